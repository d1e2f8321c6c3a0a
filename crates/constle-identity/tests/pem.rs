//! PKCS#8 PEM: the v1 form written, v1 and v2 read, every `KeyError`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::Engine as _;
use common::hex_array;
use constle_identity::ed25519_dalek::SigningKey;
use constle_identity::ed25519_dalek::pkcs8::{EncodePrivateKey as _, KeypairBytes, PublicKeyBytes};
use constle_identity::{KeyError, SigningIdentity};
use pkcs8::LineEnding;
use proptest::prelude::*;

const SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

/// RFC 8410 §10.3's example private key (v1), as OpenSSL also writes it.
const RFC8410_PEM: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC
-----END PRIVATE KEY-----
";

/// The DER inside a single-block PEM text.
fn der_of(pem: &str) -> Vec<u8> {
    let (_, der) = pkcs8::der::pem::decode_vec(pem.as_bytes()).unwrap();
    der
}

fn pem_of(label: &str, der: &[u8]) -> String {
    pkcs8::der::pem::encode_string(label, LineEnding::LF, der).unwrap()
}

fn err(pem: &str) -> KeyError {
    match SigningIdentity::from_pkcs8_pem(pem) {
        Ok(identity) => panic!("parsed as {}", identity.did()),
        Err(e) => e,
    }
}

/// An Ed25519 PrivateKeyInfo DER with the given OID bytes, optional
/// algorithm parameters and inner private key bytes.
fn private_key_info(oid: &[u8], params: &[u8], inner: &[u8]) -> Vec<u8> {
    let mut alg = vec![0x06, oid.len() as u8];
    alg.extend_from_slice(oid);
    alg.extend_from_slice(params);
    let mut body = vec![0x02, 0x01, 0x00, 0x30, alg.len() as u8];
    body.extend(alg);
    body.extend([0x04, inner.len() as u8]);
    body.extend_from_slice(inner);
    let mut der = vec![0x30, body.len() as u8];
    der.extend(body);
    der
}

fn wrapped_seed(seed: &[u8]) -> Vec<u8> {
    let mut inner = vec![0x04, seed.len() as u8];
    inner.extend_from_slice(seed);
    inner
}

const ED25519_OID: [u8; 3] = [0x2b, 0x65, 0x70];

#[test]
fn written_pem_is_pkcs8_v1_exactly() {
    let seed: [u8; 32] = hex_array(SEED);
    let identity = SigningIdentity::from_bytes(&seed);
    let pem = identity.to_pkcs8_pem();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{}", *pem);
    assert!(pem.ends_with("\n-----END PRIVATE KEY-----\n"), "{}", *pem);
    let der = der_of(&pem);
    // SEQUENCE { INTEGER 0, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING seed } }
    // and nothing else: no [1] publicKey, no [0] attributes.
    let mut expected = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    expected.extend_from_slice(&seed);
    assert_eq!(der, expected);
    assert_eq!(
        &der[2..5],
        &[0x02, 0x01, 0x00],
        "version must be INTEGER 0 (v1)"
    );
    assert_eq!(der.len(), 48, "a public key field would make it longer");
    // Same layout as RFC 8410's own example.
    assert_eq!(&der_of(RFC8410_PEM)[..16], &expected[..16]);
}

#[test]
fn round_trip() {
    let identity = SigningIdentity::generate();
    let pem = identity.to_pkcs8_pem();
    let back = SigningIdentity::from_pkcs8_pem(&pem).unwrap();
    assert_eq!(back.did(), identity.did());
    assert_eq!(back.sign(b"x"), identity.sign(b"x"));
    assert_eq!(*back.to_pkcs8_pem(), *pem);
}

#[test]
fn rfc8410_example_key_is_read() {
    let identity = SigningIdentity::from_pkcs8_pem(RFC8410_PEM).unwrap();
    // RFC 8410 §10.3: the matching public key is
    // 19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1.
    assert_eq!(
        identity.did().verifying_key().to_bytes(),
        hex_array::<32>("19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1")
    );
    assert_eq!(*identity.to_pkcs8_pem(), RFC8410_PEM);
}

#[test]
fn v2_with_public_key_is_read() {
    let seed: [u8; 32] = hex_array(SEED);
    // ed25519-dalek's own writer emits v2 (version 1, [1] publicKey).
    let v2 = SigningKey::from_bytes(&seed)
        .to_pkcs8_pem(LineEnding::LF)
        .unwrap();
    let der = der_of(&v2);
    assert_eq!(&der[2..5], &[0x02, 0x01, 0x01], "dalek should write v2");
    let identity = SigningIdentity::from_pkcs8_pem(&v2).unwrap();
    assert_eq!(identity.did(), SigningIdentity::from_bytes(&seed).did());
    // Written back as v1.
    assert_eq!(&der_of(&identity.to_pkcs8_pem())[2..5], &[0x02, 0x01, 0x00]);
}

#[test]
fn v2_with_someone_elses_public_key_is_refused() {
    let other = SigningIdentity::from_bytes(&[1u8; 32]);
    let pem = KeypairBytes {
        secret_key: hex_array(SEED),
        public_key: Some(PublicKeyBytes(other.did().verifying_key().to_bytes())),
    }
    .to_pkcs8_pem(LineEnding::LF)
    .unwrap();
    assert_eq!(err(&pem), KeyError::PublicKeyMismatch);
}

#[test]
fn surrounding_whitespace_and_crlf_are_accepted() {
    let identity = SigningIdentity::from_bytes(&[3u8; 32]);
    let pem = identity.to_pkcs8_pem();
    let padded = format!("\n\n  {}\n\n", pem.trim());
    assert_eq!(
        SigningIdentity::from_pkcs8_pem(&padded).unwrap().did(),
        identity.did()
    );
    let crlf = pem.replace('\n', "\r\n");
    assert_eq!(
        SigningIdentity::from_pkcs8_pem(&crlf).unwrap().did(),
        identity.did()
    );
}

#[test]
fn not_pem_is_refused() {
    for text in [
        "",
        "hello",
        "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
        "-----BEGIN PRIVATE KEY-----\nnot base64!!\n-----END PRIVATE KEY-----\n",
        "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n",
    ] {
        assert!(matches!(err(text), KeyError::NotPem { .. }), "{text:?}");
    }
    let msg = err("hello").to_string();
    assert!(msg.contains("constle keygen"), "{msg}");
}

#[test]
fn encrypted_key_is_refused_with_advice() {
    let pem = pem_of("ENCRYPTED PRIVATE KEY", &[0x30, 0x00]);
    assert_eq!(err(&pem), KeyError::Encrypted);
    assert!(err(&pem).to_string().contains("openssl pkey"));
}

#[test]
fn other_labels_are_refused() {
    for label in [
        "RSA PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
        "PUBLIC KEY",
        "EC PRIVATE KEY",
    ] {
        let pem = pem_of(label, &der_of(RFC8410_PEM));
        match err(&pem) {
            KeyError::WrongLabel { label: found } => assert!(found.contains(label)),
            other => panic!("{label}: {other:?}"),
        }
    }
}

#[test]
fn malformed_der_is_refused() {
    let seed: [u8; 32] = hex_array(SEED);
    let mut trailing = private_key_info(&ED25519_OID, &[], &wrapped_seed(&seed));
    trailing.push(0);
    for der in [
        vec![0x30, 0x00],
        b"not der at all".to_vec(),
        trailing,
        der_of(RFC8410_PEM)[..40].to_vec(),
    ] {
        let pem = pem_of("PRIVATE KEY", &der);
        assert!(
            matches!(err(&pem), KeyError::Malformed { .. }),
            "{der:02x?}"
        );
    }
}

#[test]
fn other_algorithms_are_refused() {
    let seed: [u8; 32] = hex_array(SEED);
    // X25519 (1.3.101.110) has the same layout as Ed25519.
    let x25519 = pem_of(
        "PRIVATE KEY",
        &private_key_info(&[0x2b, 0x65, 0x6e], &[], &wrapped_seed(&seed)),
    );
    match err(&x25519) {
        KeyError::WrongAlgorithm { algorithm } => assert_eq!(algorithm, "1.3.101.110 (X25519)"),
        other => panic!("{other:?}"),
    }
    let msg = err(&x25519).to_string();
    assert!(msg.contains("expected 1.3.101.112 (Ed25519)"), "{msg}");
}

#[test]
fn algorithm_parameters_are_refused() {
    let seed: [u8; 32] = hex_array(SEED);
    let with_null = private_key_info(&ED25519_OID, &[0x05, 0x00], &wrapped_seed(&seed));
    assert_eq!(
        err(&pem_of("PRIVATE KEY", &with_null)),
        KeyError::AlgorithmParameters
    );
}

#[test]
fn wrong_seed_length_is_refused() {
    let seed: [u8; 33] = [5u8; 33];
    for inner in [
        wrapped_seed(&seed[..31]),
        wrapped_seed(&seed[..33]),
        seed[..32].to_vec(),
        vec![0x03, 0x20].into_iter().chain([0u8; 32]).collect(),
    ] {
        let der = private_key_info(&ED25519_OID, &[], &inner);
        assert_eq!(
            err(&pem_of("PRIVATE KEY", &der)),
            KeyError::BadPrivateKey,
            "{inner:02x?}"
        );
    }
}

#[test]
fn pem_line_is_plain_base64_of_the_der() {
    let identity = SigningIdentity::from_bytes(&[0xabu8; 32]);
    let pem = identity.to_pkcs8_pem();
    let lines: Vec<&str> = pem.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1].len(), 64);
    let der = base64::engine::general_purpose::STANDARD
        .decode(lines[1])
        .unwrap();
    assert_eq!(&der[16..], &[0xabu8; 32]);
}

proptest! {
    #[test]
    fn any_seed_round_trips_through_pem(seed in any::<[u8; 32]>()) {
        let identity = SigningIdentity::from_bytes(&seed);
        let back = SigningIdentity::from_pkcs8_pem(&identity.to_pkcs8_pem()).unwrap();
        prop_assert_eq!(back.did(), identity.did());
    }

    #[test]
    fn arbitrary_text_never_panics(s in any::<String>()) {
        let _ = SigningIdentity::from_pkcs8_pem(&s);
        let _ = SigningIdentity::from_pkcs8_pem(&format!("-----BEGIN PRIVATE KEY-----\n{s}\n-----END PRIVATE KEY-----\n"));
    }

    #[test]
    fn arbitrary_der_never_panics(der in proptest::collection::vec(any::<u8>(), 0..80)) {
        let _ = SigningIdentity::from_pkcs8_pem(&pem_of("PRIVATE KEY", &der));
    }
}
