//! Strict signature verification: what `DidKey::verify` must refuse.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::hex_array;
use constle_identity::ed25519_dalek::Signature;
use constle_identity::{DidKey, SigningIdentity};
use curve25519_dalek::Scalar;
use sha2::{Digest as _, Sha512};

const RFC8032_TEST1_SECRET: &str =
    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const RFC8032_TEST1_SIGNATURE: &str = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";

/// The group order l, little-endian.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// a + b as 256-bit little-endian numbers (no overflow in these tests).
fn add_le(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut carry = 0u16;
    for i in 0..32 {
        let sum = u16::from(a[i]) + u16::from(b[i]) + carry;
        out[i] = sum as u8;
        carry = sum >> 8;
    }
    assert_eq!(carry, 0);
    out
}

fn test1() -> (SigningIdentity, DidKey, Signature) {
    let identity = SigningIdentity::from_bytes(&hex_array(RFC8032_TEST1_SECRET));
    let did = identity.did().clone();
    let signature = Signature::from_bytes(&hex_array(RFC8032_TEST1_SIGNATURE));
    (identity, did, signature)
}

#[test]
fn rfc8032_test1_signature_verifies() {
    let (identity, did, signature) = test1();
    did.verify(b"", &signature).unwrap();
    assert_eq!(identity.sign(b""), signature);
}

#[test]
fn non_canonical_s_is_refused() {
    let (_, did, signature) = test1();
    // S + l is the same scalar mod l: a malleated copy of a valid signature.
    let s_plus_l = add_le(signature.s_bytes(), &L);
    let malleated = Signature::from_components(*signature.r_bytes(), s_plus_l);
    assert_ne!(malleated, signature);
    let err = did.verify(b"", &malleated).unwrap_err();
    assert_eq!(err.did(), &did);
    assert!(err.to_string().contains(did.as_str()), "{err}");
    // S = l exactly is also refused.
    let s_is_l = Signature::from_components(*signature.r_bytes(), L);
    assert!(did.verify(b"", &s_is_l).is_err());
}

#[test]
fn small_order_r_is_refused() {
    // A signature with R = the identity point and S = H(R || A || M)·a
    // satisfies the (cofactorless) Ed25519 equation SB = R + H(R||A||M)A,
    // so lax verification accepts it; strict verification must not.
    let (identity, did, _) = test1();
    let message = b"approved";
    let r = {
        let mut r = [0u8; 32];
        r[0] = 1;
        r
    };
    let a = did.verifying_key().to_bytes();
    let mut hasher = Sha512::new();
    hasher.update(r);
    hasher.update(a);
    hasher.update(message);
    let mut wide = [0u8; 64];
    wide.copy_from_slice(&hasher.finalize());
    let h = Scalar::from_bytes_mod_order_wide(&wide);
    let secret = hex_array::<32>(RFC8032_TEST1_SECRET);
    let signing_key = constle_identity::ed25519_dalek::SigningKey::from_bytes(&secret);
    let s = h * signing_key.to_scalar();
    let forged = Signature::from_components(r, s.to_bytes());

    // The test is meaningful: the lax check accepts this signature...
    assert!(
        did.verifying_key().verify_strict(message, &forged).is_err()
            && constle_identity::ed25519_dalek::Verifier::verify(
                did.verifying_key(),
                message,
                &forged
            )
            .is_ok(),
        "the small-order-R signature should pass lax and fail strict verification"
    );
    // ...and DidKey::verify refuses it.
    assert!(did.verify(message, &forged).is_err());
    drop(identity);
}

#[test]
fn other_key_or_message_is_refused() {
    let (identity, did, _) = test1();
    let other = SigningIdentity::from_bytes(&[9u8; 32]);
    let signature = other.sign(b"line");
    assert!(did.verify(b"line", &signature).is_err());
    let signature = identity.sign(b"line");
    did.verify(b"line", &signature).unwrap();
    assert!(did.verify(b"line\n", &signature).is_err());
    let mut flipped = signature.to_bytes();
    flipped[10] ^= 1;
    assert!(
        did.verify(b"line", &Signature::from_bytes(&flipped))
            .is_err()
    );
}
