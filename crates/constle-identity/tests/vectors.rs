//! Published test vectors: the W3C CCG did:key Ed25519 vectors and RFC 8032.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::Engine as _;
use common::{hex, hex_array, to_hex};
use constle_identity::ed25519_dalek::Signature;
use constle_identity::{DidKey, SigningIdentity};

/// From `test-vectors/ed25519-x25519.json` of w3c-ccg/did-method-key: the
/// 32-byte seed, the DID, and the key as `publicKeyBase58`.
const W3C_SEED_VECTORS: [(&str, &str, &str); 4] = [
    (
        "0000000000000000000000000000000000000000000000000000000000000000",
        "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp",
        "4zvwRjXUKGfvwnParsHAS3HuSVzV5cA4McphgmoCtajS",
    ),
    (
        "0000000000000000000000000000000000000000000000000000000000000001",
        "did:key:z6MkjchhfUsD6mmvni8mCdXHw216Xrm9bQe2mBH1P5RDjVJG",
        "6ASf5EcmmEHTgDJ4X4ZT5vT6iHVJBXPg5AN5YoTCpGWt",
    ),
    (
        "0000000000000000000000000000000000000000000000000000000000000002",
        "did:key:z6MknGc3ocHs3zdPiJbnaaqDi58NGb4pk1Sp9WxWufuXSdxf",
        "8pM1DN3RiT8vbom5u1sNryaNT1nyL8CTTW3b5PwWXRBH",
    ),
    (
        "0000000000000000000000000000000000000000000000000000000000000003",
        "did:key:z6MkvqoYXQfDDJRv8L4wKzxYeuKyVZBfi9Qo6Ro8MiLH3kDQ",
        "HPYVwAQmskwT1qEEeRzhoomyfyupJGASQQtCXSNG8XS2",
    ),
];

/// The same file's JsonWebKey2020 vector: seed, DID, JWK `x` (base64url).
const W3C_JWK_VECTOR: (&str, &str, &str) = (
    "0000000000000000000000000000000000000000000000000000000000000005",
    "did:key:z6MkwYMhwTvsq376YBAcJHy3vyRWzBgn5vKfVqqDCgm7XVKU",
    "_eT7oDCtAC98L31MMx9J0T-w7HR-zuvsY08f9MvKne8",
);

/// The did:key spec's example DIDs with, from the same DID documents, the
/// Ed25519 key as `publicKeyBase58` (older revision of the spec) and the
/// derived X25519 key-agreement key (base58, raw or as an x25519-pub did:key
/// multibase value).
///
/// Note: `B12NYF8RrR3h41TDCTJojY59usg3mbtbjnFs7Eud1Y6u` belongs to
/// `z6MkpTHR8VNs…` (spec revision 3479de8, 2022), not to the current
/// example `z6MkhaXgBZDv…`.
const SPEC_EXAMPLE_OLD: (&str, &str, &str) = (
    "did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH",
    "B12NYF8RrR3h41TDCTJojY59usg3mbtbjnFs7Eud1Y6u",
    "JhNWeSVLMYccCk7iopQW4guaSJTojqpMEELgSLhKwRr",
);
const SPEC_EXAMPLE: (&str, &str) = (
    "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
    "z6LSj72tK8brWgZja8NLRwPigth2T9QRiG1uH9oKZuKjdh9p",
);

/// Parse, check the key bytes, and check it prints back identically.
fn check_did(did: &str, expected_key: &[u8]) {
    let parsed = DidKey::parse(did).unwrap_or_else(|e| panic!("{did}: {e}"));
    assert_eq!(
        parsed.verifying_key().as_bytes().as_slice(),
        expected_key,
        "{did}"
    );
    assert_eq!(parsed.to_string(), did);
    assert_eq!(parsed.as_str(), did);
    // Independently of the crate: base58btc(0xed 0x01 || key).
    let payload = bs58::decode(&did["did:key:z".len()..]).into_vec().unwrap();
    assert_eq!(&payload[..2], &[0xed, 0x01]);
    assert_eq!(&payload[2..], expected_key);
    // And the other way: key bytes -> DID.
    let mut prefixed = vec![0xed, 0x01];
    prefixed.extend_from_slice(expected_key);
    assert_eq!(
        format!("did:key:z{}", bs58::encode(prefixed).into_string()),
        did
    );
}

#[test]
fn w3c_seed_vectors_derive_parse_and_reencode() {
    for (seed, did, key58) in W3C_SEED_VECTORS {
        let key = bs58::decode(key58).into_vec().unwrap();
        assert_eq!(key.len(), 32, "{key58}");
        check_did(did, &key);
        let identity = SigningIdentity::from_bytes(&hex_array(seed));
        assert_eq!(identity.did().as_str(), did, "seed {seed}");
    }
}

#[test]
fn w3c_jwk_vector() {
    let (seed, did, x) = W3C_JWK_VECTOR;
    let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(x)
        .unwrap();
    assert_eq!(key.len(), 32);
    check_did(did, &key);
    let identity = SigningIdentity::from_bytes(&hex_array(seed));
    assert_eq!(identity.did().as_str(), did);
}

#[test]
fn did_key_spec_examples() {
    let (did, key58, x25519_58) = SPEC_EXAMPLE_OLD;
    let key = bs58::decode(key58).into_vec().unwrap();
    assert_eq!(key.len(), 32);
    check_did(did, &key);
    let parsed = DidKey::parse(did).unwrap();
    let x25519 = bs58::decode(x25519_58).into_vec().unwrap();
    assert_eq!(
        parsed.verifying_key().to_montgomery().to_bytes().as_slice(),
        x25519
    );

    let (did, x25519_multibase) = SPEC_EXAMPLE;
    let payload = bs58::decode(&did["did:key:z".len()..]).into_vec().unwrap();
    check_did(did, &payload[2..]);
    let parsed = DidKey::parse(did).unwrap();
    let x25519 = bs58::decode(&x25519_multibase[1..]).into_vec().unwrap();
    assert_eq!(&x25519[..2], &[0xec, 0x01]);
    assert_eq!(
        parsed.verifying_key().to_montgomery().to_bytes().as_slice(),
        &x25519[2..]
    );
}

/// RFC 8032 §7.1 tests 1–3: secret key, public key, message, signature.
const RFC8032: [(&str, &str, &str, &str); 3] = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
];

#[test]
fn rfc8032_sign_and_verify() {
    for (secret, public, message, signature) in RFC8032 {
        let identity = SigningIdentity::from_bytes(&hex_array(secret));
        assert_eq!(to_hex(identity.did().verifying_key().as_bytes()), public);
        let message = hex(message);
        let signed = identity.sign(&message);
        assert_eq!(to_hex(&signed.to_bytes()), signature);

        let did = DidKey::parse(identity.did().as_str()).unwrap();
        let expected = Signature::from_bytes(&hex_array(signature));
        did.verify(&message, &expected).unwrap();
        let mut wrong = message.clone();
        wrong.push(0);
        assert!(did.verify(&wrong, &expected).is_err());
    }
}

#[test]
fn rfc8032_test1_did() {
    let identity = SigningIdentity::from_bytes(&hex_array(RFC8032[0].0));
    let mut prefixed = vec![0xed, 0x01];
    prefixed.extend(hex(RFC8032[0].1));
    let expected = format!("did:key:z{}", bs58::encode(prefixed).into_string());
    assert_eq!(identity.did().to_string(), expected);
    assert!(expected.starts_with("did:key:z6Mk"));
    check_did(&expected, &hex(RFC8032[0].1));
}
