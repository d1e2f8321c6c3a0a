//! `DidKey` parsing: every error, weak and non-canonical keys, serde, proptest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use constle_identity::ed25519_dalek::VerifyingKey;
use constle_identity::{DidKey, DidKeyError, SigningIdentity};
use proptest::prelude::*;

const GOOD: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

/// The DID spelling of arbitrary payload bytes (no validity checks).
fn did_of_payload(payload: &[u8]) -> String {
    format!("did:key:z{}", bs58::encode(payload).into_string())
}

/// The DID spelling of 32 arbitrary key bytes under the ed25519-pub codec.
fn did_of_key_bytes(key: &[u8]) -> String {
    let mut payload = vec![0xed, 0x01];
    payload.extend_from_slice(key);
    did_of_payload(&payload)
}

fn err(s: &str) -> DidKeyError {
    match DidKey::parse(s) {
        Ok(did) => panic!("{s:?} parsed as {did}"),
        Err(e) => e,
    }
}

#[test]
fn good_did_parses_and_prints_back() {
    let did = DidKey::parse(GOOD).unwrap();
    assert_eq!(did.to_string(), GOOD);
    assert_eq!(format!("{did:?}"), format!("DidKey({GOOD:?})"));
    let via_from_str: DidKey = GOOD.parse().unwrap();
    assert_eq!(via_from_str, did);
}

#[test]
fn whitespace_is_refused() {
    for s in [
        format!(" {GOOD}"),
        format!("{GOOD}\n"),
        format!("\t{GOOD}"),
        format!("{GOOD}\u{a0}"),
    ] {
        assert!(
            matches!(err(&s), DidKeyError::SurroundingWhitespace { .. }),
            "{s:?}"
        );
    }
}

#[test]
fn missing_prefix_is_refused() {
    for s in [
        "",
        "z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
        "DID:KEY:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
        "did:web:example.com",
        "did:key",
    ] {
        assert!(matches!(err(s), DidKeyError::MissingPrefix { .. }), "{s:?}");
    }
    let msg = err("did:web:example.com").to_string();
    assert!(msg.contains("\"did:key:\""), "{msg}");
}

#[test]
fn did_urls_are_refused() {
    let fragment = format!("{GOOD}#z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK");
    match err(&fragment) {
        DidKeyError::DidUrl {
            part: '#',
            position,
            what,
            ..
        } => {
            assert_eq!(position, GOOD.len());
            assert_eq!(what, "fragment");
        }
        other => panic!("{other:?}"),
    }
    let msg = err(&fragment).to_string();
    assert!(
        msg.contains("fragment") && msg.contains("bare did:key"),
        "{msg}"
    );
    assert!(matches!(
        err(&format!("{GOOD}?service=files")),
        DidKeyError::DidUrl {
            part: '?',
            what: "query",
            ..
        }
    ));
    assert!(matches!(
        err(&format!("{GOOD}/path")),
        DidKeyError::DidUrl {
            part: '/',
            what: "path",
            ..
        }
    ));
}

#[test]
fn overlong_input_is_refused_before_decoding() {
    let s = format!("did:key:z{}", "2".repeat(100_000));
    assert!(matches!(
        err(&s),
        DidKeyError::TooLong {
            len: 100_009,
            max: 128
        }
    ));
}

#[test]
fn other_multibase_is_refused() {
    assert!(matches!(
        err("did:key:"),
        DidKeyError::NotBase58Btc { found } if found == "nothing"
    ));
    // base16 ('f') and base64url ('u') multibase of the same kind of payload.
    assert!(matches!(
        err("did:key:fed01d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"),
        DidKeyError::NotBase58Btc { found } if found == "'f'"
    ));
    assert!(matches!(
        err("did:key:u7QHXWpgBgrEKt9VL_tPJZAc6DuFy89qmIyWvAhpo9wdRGg"),
        DidKeyError::NotBase58Btc { .. }
    ));
    let msg = err("did:key:f00").to_string();
    assert!(msg.contains("'z' (base58btc)"), "{msg}");
}

#[test]
fn bad_base58_names_character_and_position() {
    // '0', 'O', 'I', 'l' are not in the base58btc alphabet.
    for (bad, at) in [('0', 12), ('O', 20), ('I', 30), ('l', 55)] {
        let mut s: Vec<char> = GOOD.chars().collect();
        s[at] = bad;
        let s: String = s.into_iter().collect();
        match err(&s) {
            DidKeyError::InvalidBase58 {
                character,
                position,
            } => {
                assert_eq!(character, bad, "{s}");
                assert_eq!(position, at, "{s}");
            }
            other => panic!("{s}: {other:?}"),
        }
    }
    let msg = err("did:key:z6Mk0").to_string();
    assert!(msg.contains("'0'") && msg.contains("byte 12"), "{msg}");
    // Non-ASCII: the character itself is reported, at its byte offset.
    assert!(matches!(
        err("did:key:z6Mké"),
        DidKeyError::InvalidBase58 {
            character: 'é',
            position: 12
        }
    ));
    assert!(matches!(
        err("did:key:z6Mk\u{0}"),
        DidKeyError::InvalidBase58 {
            character: '\0',
            ..
        }
    ));
}

#[test]
fn other_key_types_are_refused_with_the_codec_named() {
    // x25519-pub, from the did:key spec's example DID document.
    match err("did:key:z6LSj72tK8brWgZja8NLRwPigth2T9QRiG1uH9oKZuKjdh9p") {
        DidKeyError::WrongMulticodec { found } => {
            assert_eq!(found, "0xec 0x01 (x25519-pub)");
        }
        other => panic!("{other:?}"),
    }
    let msg = err("did:key:z6LSj72tK8brWgZja8NLRwPigth2T9QRiG1uH9oKZuKjdh9p").to_string();
    assert!(msg.contains("expected 0xed 0x01 (ed25519-pub)"), "{msg}");
    // secp256k1-pub, from the spec's secp256k1 test vectors.
    assert!(matches!(
        err("did:key:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme"),
        DidKeyError::WrongMulticodec { found } if found.contains("secp256k1-pub")
    ));
    // Unknown codec, one byte, no bytes.
    let mut payload = vec![0x12, 0x20];
    payload.extend([7u8; 32]);
    assert!(matches!(
        err(&did_of_payload(&payload)),
        DidKeyError::WrongMulticodec { found } if found == "0x12 0x20 (unknown codec)"
    ));
    assert!(matches!(
        err(&did_of_payload(&[0xed])),
        DidKeyError::WrongMulticodec { found } if found.contains("single byte 0xed")
    ));
    assert!(matches!(
        err("did:key:z"),
        DidKeyError::WrongMulticodec { found } if found == "empty"
    ));
    // Leading '1's decode to zero bytes: not the ed25519 codec.
    assert!(matches!(
        err("did:key:z16MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"),
        DidKeyError::WrongMulticodec { found } if found.starts_with("0x00")
    ));
}

#[test]
fn wrong_key_length_is_refused() {
    let key = DidKey::parse(GOOD).unwrap();
    let bytes = key.verifying_key().to_bytes();
    for len in [0usize, 1, 31, 33, 64] {
        let mut body: Vec<u8> = bytes.iter().copied().cycle().take(len).collect();
        if len > 32 {
            body[..32].copy_from_slice(&bytes);
        }
        match err(&did_of_key_bytes(&body)) {
            DidKeyError::WrongLength { found, expected } => {
                assert_eq!((found, expected), (len, 32));
            }
            other => panic!("len {len}: {other:?}"),
        }
    }
    let msg = err(&did_of_key_bytes(&bytes[..31])).to_string();
    assert!(
        msg.contains("31-byte") && msg.contains("expected 32"),
        "{msg}"
    );
}

#[test]
fn points_off_the_curve_are_refused() {
    let mut refused = 0;
    for y in 2u8..=40 {
        let mut key = [0u8; 32];
        key[0] = y;
        if VerifyingKey::from_bytes(&key).is_err() {
            assert_eq!(
                err(&did_of_key_bytes(&key)),
                DidKeyError::InvalidPoint,
                "y={y}"
            );
            refused += 1;
        }
    }
    // About half of all y coordinates have no point.
    assert!(refused > 5, "only {refused} invalid points found");
}

#[test]
fn small_order_keys_are_refused() {
    let identity = {
        let mut k = [0u8; 32];
        k[0] = 1;
        k
    };
    let all_zero = [0u8; 32];
    // (0, -1): order 2.
    let minus_one = {
        let mut k = [0xffu8; 32];
        k[0] = 0xec;
        k[31] = 0x7f;
        k
    };
    for key in [identity, all_zero, minus_one] {
        assert_eq!(
            err(&did_of_key_bytes(&key)),
            DidKeyError::WeakKey,
            "{key:02x?}"
        );
        let vk = VerifyingKey::from_bytes(&key).unwrap();
        assert!(vk.is_weak());
        assert_eq!(DidKey::from_verifying_key(vk), Err(DidKeyError::WeakKey));
    }
    let msg = DidKeyError::WeakKey.to_string();
    assert!(msg.contains("weak") && msg.contains("small-order"), "{msg}");
}

#[test]
fn non_canonical_encodings_are_refused() {
    // y = p + k for small k (p = 2^255 - 19) encodes the same y as k.
    let mut checked_large_order = 0;
    for k in 0u8..19 {
        for sign in [0u8, 0x80] {
            let mut key = [0xffu8; 32];
            key[0] = 0xed + k;
            key[31] = 0x7f | sign;
            let Ok(vk) = VerifyingKey::from_bytes(&key) else {
                continue;
            };
            assert_eq!(
                err(&did_of_key_bytes(&key)),
                DidKeyError::NonCanonical,
                "k={k} sign={sign}"
            );
            assert_eq!(
                DidKey::from_verifying_key(vk),
                Err(DidKeyError::NonCanonical)
            );
            if !vk.is_weak() {
                checked_large_order += 1;
            }
        }
    }
    assert!(
        checked_large_order > 0,
        "no non-canonical encoding of a large-order point was tried"
    );
    // x = 0 with the sign bit set ("negative zero"): the identity point.
    let mut negative_zero = [0u8; 32];
    negative_zero[0] = 1;
    negative_zero[31] = 0x80;
    if VerifyingKey::from_bytes(&negative_zero).is_ok() {
        assert_eq!(
            err(&did_of_key_bytes(&negative_zero)),
            DidKeyError::NonCanonical
        );
    }
}

#[test]
fn from_verifying_key_matches_parse() {
    let identity = SigningIdentity::from_bytes(&[42u8; 32]);
    let vk = *identity.did().verifying_key();
    let did = DidKey::from_verifying_key(vk).unwrap();
    assert_eq!(&did, identity.did());
    assert_eq!(DidKey::parse(did.as_str()).unwrap(), did);
}

#[test]
fn serde_is_the_did_string() {
    let did = DidKey::parse(GOOD).unwrap();
    let json = serde_json::to_string(&did).unwrap();
    assert_eq!(json, format!("\"{GOOD}\""));
    let back: DidKey = serde_json::from_str(&json).unwrap();
    assert_eq!(back, did);
    let e = serde_json::from_str::<DidKey>(
        "\"did:key:z6LSj72tK8brWgZja8NLRwPigth2T9QRiG1uH9oKZuKjdh9p\"",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("expected 0xed 0x01 (ed25519-pub)"), "{e}");
    assert!(serde_json::from_str::<DidKey>("42").is_err());
}

#[test]
fn messages_escape_untrusted_text() {
    let hostile = "\x1b[2J\x1b[Hdid:web:evil\r\napproved";
    let msg = err(hostile).to_string();
    assert!(!msg.chars().any(char::is_control), "{msg:?}");
    let long = format!("did:web:{}", "a".repeat(10_000));
    let msg = err(&long).to_string();
    assert!(msg.len() < 400, "{} bytes", msg.len());
}

#[test]
fn ed25519_did_length_is_56() {
    let did = SigningIdentity::from_bytes(&[7u8; 32]).did().to_string();
    assert_eq!(did.len(), 56);
    assert!(did.len() <= constle_identity::MAX_DID_LEN);
}

proptest! {
    #[test]
    fn seeds_round_trip(seed in any::<[u8; 32]>()) {
        let identity = SigningIdentity::from_bytes(&seed);
        let did = identity.did();
        let text = did.to_string();
        prop_assert!(text.starts_with("did:key:z6Mk"));
        let parsed = DidKey::parse(&text).unwrap();
        prop_assert_eq!(&parsed, did);
        prop_assert_eq!(parsed.to_string(), text);
        let signature = identity.sign(&seed);
        prop_assert!(parsed.verify(&seed, &signature).is_ok());
    }

    #[test]
    fn arbitrary_strings_never_panic(s in any::<String>()) {
        if let Ok(did) = DidKey::parse(&s) {
            prop_assert_eq!(did.to_string(), s);
        }
    }

    #[test]
    fn arbitrary_base58_never_panics(s in "did:key:z[1-9A-HJ-NP-Za-km-z]{0,60}") {
        if let Ok(did) = DidKey::parse(&s) {
            prop_assert_eq!(did.to_string(), s);
        }
    }

    #[test]
    fn arbitrary_key_bytes_parse_or_fail_cleanly(key in any::<[u8; 32]>()) {
        let s = did_of_key_bytes(&key);
        match DidKey::parse(&s) {
            Ok(did) => {
                prop_assert_eq!(did.verifying_key().as_bytes(), &key);
                prop_assert_eq!(did.to_string(), s);
            }
            Err(e) => prop_assert!(matches!(
                e,
                DidKeyError::InvalidPoint | DidKeyError::NonCanonical | DidKeyError::WeakKey
            ), "{:?}", e),
        }
    }
}
