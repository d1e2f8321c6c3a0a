//! Verifying many entry signatures at once.
//!
//! Batch verification is about three times faster per signature than
//! one-by-one `verify_strict`, but on its own accepts encodings that strict
//! verification refuses. So every signature first passes the same
//! encoding checks `verify_strict` makes — `S` canonical (done by the batch
//! itself), `R` a canonical encoding and not of small order, the key not of
//! small order — and each signer key is also checked to be torsion-free.
//! One difference remains: a signature whose `R` has a torsion component
//! without being of small order may pass the batch equation (with
//! probability at most 1/2) where strict verification always refuses it.
//! Only someone holding the private key can make such a signature, and that
//! person can sign any entry anyway; it cannot help a forger.
//!
//! A batch that fails is re-checked entry by entry with `verify_strict`, so
//! the result for each entry is exact.

use std::sync::OnceLock;

use constle_identity::DidKey;
use curve25519_dalek::constants::EIGHT_TORSION;
use ed25519_dalek::Signature;

/// One signature to check.
pub(crate) struct Item<'a> {
    pub key: &'a DidKey,
    pub message: &'a [u8],
    pub signature: &'a Signature,
}

/// Whether each item's signature is valid, in order.
pub(crate) fn verify(items: &[Item]) -> Vec<bool> {
    let mut keys: Vec<&DidKey> = items.iter().map(|i| i.key).collect();
    keys.dedup();
    let encodings_ok =
        items.iter().all(|i| r_acceptable(i.signature)) && keys.into_iter().all(torsion_free);
    if encodings_ok && batch(items) {
        return vec![true; items.len()];
    }
    items
        .iter()
        .map(|i| i.key.verify(i.message, i.signature).is_ok())
        .collect()
}

fn batch(items: &[Item]) -> bool {
    let messages: Vec<&[u8]> = items.iter().map(|i| i.message).collect();
    let signatures: Vec<Signature> = items.iter().map(|i| *i.signature).collect();
    let keys: Vec<_> = items.iter().map(|i| *i.key.verifying_key()).collect();
    ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok()
}

/// `R` must be a canonical point encoding (y < p) and not one of the eight
/// small-order points, whatever its sign bit.
fn r_acceptable(signature: &Signature) -> bool {
    let mut r = *signature.r_bytes();
    r[31] &= 0x7f;
    let y_at_least_p = r[0] >= 0xed && r[1..31].iter().all(|&b| b == 0xff) && r[31] == 0x7f;
    !y_at_least_p && !small_order_encodings().contains(&r)
}

fn small_order_encodings() -> &'static [[u8; 32]; 8] {
    static ENCODINGS: OnceLock<[[u8; 32]; 8]> = OnceLock::new();
    ENCODINGS.get_or_init(|| {
        EIGHT_TORSION.map(|point| {
            let mut bytes = point.compress().to_bytes();
            bytes[31] &= 0x7f;
            bytes
        })
    })
}

fn torsion_free(key: &DidKey) -> bool {
    key.verifying_key().to_edwards().is_torsion_free()
}

#[cfg(test)]
mod tests {
    use super::*;
    use constle_identity::SigningIdentity;

    fn signed(n: usize) -> (SigningIdentity, Vec<Vec<u8>>, Vec<Signature>) {
        let signer = SigningIdentity::from_bytes(&[3; 32]);
        let messages: Vec<Vec<u8>> = (0..n).map(|i| format!("entry {i}").into_bytes()).collect();
        let signatures = messages.iter().map(|m| signer.sign(m)).collect();
        (signer, messages, signatures)
    }

    fn items<'a>(
        key: &'a DidKey,
        messages: &'a [Vec<u8>],
        signatures: &'a [Signature],
    ) -> Vec<Item<'a>> {
        messages
            .iter()
            .zip(signatures)
            .map(|(message, signature)| Item {
                key,
                message,
                signature,
            })
            .collect()
    }

    #[test]
    fn valid_batches_pass_and_a_bad_entry_is_located() {
        let (signer, mut messages, signatures) = signed(50);
        assert_eq!(
            verify(&items(signer.did(), &messages, &signatures)),
            vec![true; 50]
        );
        messages[17].push(b'!');
        let result = verify(&items(signer.did(), &messages, &signatures));
        assert_eq!(result.iter().filter(|ok| !**ok).count(), 1);
        assert!(!result[17]);
    }

    #[test]
    fn small_order_and_non_canonical_r_are_refused() {
        let (_, _, signatures) = signed(1);
        for mut r in small_order_encodings().iter().copied() {
            let mut bytes = signatures[0].to_bytes();
            bytes[..32].copy_from_slice(&r);
            assert!(!r_acceptable(&Signature::from_bytes(&bytes)));
            r[31] |= 0x80;
            bytes[..32].copy_from_slice(&r);
            assert!(!r_acceptable(&Signature::from_bytes(&bytes)));
        }
        let mut bytes = signatures[0].to_bytes();
        bytes[..32].copy_from_slice(&[0xff; 32]);
        bytes[0] = 0xee;
        assert!(!r_acceptable(&Signature::from_bytes(&bytes)));
        assert!(r_acceptable(&signatures[0]));
    }
}
