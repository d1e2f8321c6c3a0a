//! `verify_chain`: every way to get a version accepted that should not be.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use constle_approver_set::{
    ApproverSetError, SignatureEntry, SignatureOutcome, Signers, VersionFile, verify_chain,
};
use constle_identity::ed25519_dalek::Signature;
use proptest::prelude::*;

fn err(pin: &constle_approver_set::SetPin, versions: &[Vec<u8>]) -> ApproverSetError {
    verify_chain(pin, versions).unwrap_err()
}

#[test]
fn a_rotation_verifies_and_revokes() {
    let (pin, files) = rotation();
    let chain = verify_chain(&pin, &files).unwrap();
    assert_eq!(chain.len(), 3);
    assert!(chain[0].contains(key(1).did()));
    assert!(
        !chain[1].contains(key(1).did()),
        "key 1 is revoked by version 2"
    );
    assert!(
        !chain[2].contains(key(2).did()),
        "key 2 is revoked by version 3"
    );
    assert_eq!(chain[2].label_of(key(5).did()), Some("k5"));
    assert_eq!(chain[2].label_of(key(1).did()), None);
    assert_eq!(chain[0].digest(), pin.digest());
    // Version 2's signatures: 1 counts for the old set only, 4 for the new only.
    let outcomes: Vec<_> = chain[1].signatures().iter().map(|s| s.outcome()).collect();
    assert_eq!(
        outcomes,
        [
            SignatureOutcome::Counted {
                own: false,
                previous: true
            },
            SignatureOutcome::Counted {
                own: true,
                previous: true
            },
            SignatureOutcome::Counted {
                own: true,
                previous: true
            },
            SignatureOutcome::Counted {
                own: true,
                previous: false
            },
        ]
    );
}

#[test]
fn version_one_needs_its_threshold_and_the_pin() {
    let v1 = body(1, &[1, 2, 3], 2, FAR);
    let pin = pin_of(&v1);
    match err(&pin, &[signed(&v1, &[1])]) {
        ApproverSetError::UnderSigned {
            signers: Signers::Own,
            valid: 1,
            threshold: 2,
            ..
        } => {}
        other => panic!("{other}"),
    }
    let other = body(1, &[1, 2, 3], 1, FAR);
    let e = err(&pin, &[signed(&other, &[1, 2, 3])]);
    assert!(matches!(e, ApproverSetError::PinMismatch { .. }), "{e}");
    assert!(e.to_string().contains("pins"), "{e}");
}

#[test]
fn k_minus_one_old_keys_are_not_enough() {
    let v1 = body(1, &[1, 2, 3], 2, FAR);
    let v2 = body(2, &[2, 3, 4], 2, FAR);
    // 2 and 3 are in both sets; signing with only 1 of v1's keys (key 1)
    // and v2's own 3 and 4.
    let e = err(&pin_of(&v1), &[signed(&v1, &[1, 2]), signed(&v2, &[1, 4])]);
    match &e {
        ApproverSetError::UnderSigned {
            signers: Signers::Previous { version: 1 },
            valid: 1,
            threshold: 2,
            counted,
            ..
        } => assert_eq!(counted, "k1"),
        other => panic!("{other}"),
    }
    assert!(
        e.to_string()
            .contains("signed by 1 of the keys of version 1 (k1), it needs 2"),
        "{e}"
    );
}

#[test]
fn old_keys_without_new_ones_and_new_without_old_are_refused() {
    let v1 = body(1, &[1, 2, 3], 2, FAR);
    let v2 = body(2, &[4, 5, 6], 2, FAR);
    let first = signed(&v1, &[1, 2]);
    let only_old = err(&pin_of(&v1), &[first.clone(), signed(&v2, &[1, 2, 3])]);
    assert!(
        matches!(
            only_old,
            ApproverSetError::UnderSigned {
                signers: Signers::Own,
                valid: 0,
                ..
            }
        ),
        "{only_old}"
    );
    let only_new = err(&pin_of(&v1), &[first.clone(), signed(&v2, &[4, 5, 6])]);
    assert!(
        matches!(
            only_new,
            ApproverSetError::UnderSigned {
                signers: Signers::Previous { version: 1 },
                valid: 0,
                ..
            }
        ),
        "{only_new}"
    );
    assert!(verify_chain(&pin_of(&v1), &[first, signed(&v2, &[1, 2, 4, 5])]).is_ok());
}

#[test]
fn a_skipped_or_repeated_version_number_is_refused() {
    let v1 = body(1, &[1, 2], 1, FAR);
    let v3 = body(3, &[1, 2], 1, FAR);
    let e = err(&pin_of(&v1), &[signed(&v1, &[1]), signed(&v3, &[1, 2])]);
    assert!(
        matches!(
            e,
            ApproverSetError::WrongVersion {
                expected: 2,
                found: 3,
                ..
            }
        ),
        "{e}"
    );
    let e = err(&pin_of(&v1), &[signed(&v1, &[1]), signed(&v1, &[1])]);
    assert!(
        matches!(
            e,
            ApproverSetError::WrongVersion {
                expected: 2,
                found: 1,
                ..
            }
        ),
        "{e}"
    );
    // A chain must start at 1.
    let v2 = body(2, &[1, 2], 1, FAR);
    let e = err(&pin_of(&v2), &[signed(&v2, &[1])]);
    assert!(
        matches!(
            e,
            ApproverSetError::WrongVersion {
                expected: 1,
                found: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_key_signing_twice_counts_once() {
    let v1 = body(1, &[1, 2, 3], 2, FAR);
    let mut file = VersionFile::unsigned(v1.clone());
    file.sign(&key(1));
    let first = file.signatures()[0].clone();
    file.push_signature(first);
    let e = err(&pin_of(&v1), &[file.to_bytes()]);
    assert!(
        matches!(e, ApproverSetError::UnderSigned { valid: 1, .. }),
        "{e}"
    );
    file.sign(&key(2));
    let chain = verify_chain(&pin_of(&v1), &[file.to_bytes()]).unwrap();
    let outcomes: Vec<_> = chain[0].signatures().iter().map(|s| s.outcome()).collect();
    assert_eq!(outcomes[1], SignatureOutcome::Duplicate);
}

#[test]
fn a_signature_from_outside_the_set_is_ignored() {
    let v1 = body(1, &[1, 2, 3], 2, FAR);
    let bytes = signed(&v1, &[9, 1, 8, 2]);
    let chain = verify_chain(&pin_of(&v1), &[bytes]).unwrap();
    let outcomes: Vec<_> = chain[0].signatures().iter().map(|s| s.outcome()).collect();
    assert_eq!(outcomes[0], SignatureOutcome::NotInSet);
    assert_eq!(outcomes[2], SignatureOutcome::NotInSet);
    // And outsiders never make up a threshold.
    let e = err(&pin_of(&v1), &[signed(&v1, &[1, 7, 8, 9])]);
    assert!(
        matches!(e, ApproverSetError::UnderSigned { valid: 1, .. }),
        "{e}"
    );
}

#[test]
fn a_signature_for_another_version_does_not_count() {
    let v1 = body(1, &[1, 2, 3], 2, FAR);
    let v2 = body(2, &[1, 2, 3], 2, FAR);
    let mut file = VersionFile::unsigned(v2.clone());
    // Key 1's and 2's signatures over version 1, pasted into version 2.
    let old = VersionFile::parse(
        &signed(&v1, &[1, 2]),
        &constle_approver_set::Location::Given(0),
    )
    .unwrap();
    for entry in old.signatures() {
        file.push_signature(entry.clone());
    }
    let e = err(&pin_of(&v1), &[signed(&v1, &[1, 2]), file.to_bytes()]);
    assert!(
        matches!(e, ApproverSetError::UnderSigned { valid: 0, .. }),
        "{e}"
    );
    let chain = verify_chain(&pin_of(&v1), &[signed(&v1, &[1, 2]), signed(&v2, &[2, 3])]).unwrap();
    assert_eq!(chain.len(), 2);
    let garbage = SignatureEntry {
        did: key(1).did().clone(),
        sig: Signature::from_bytes(&[7; 64]),
    };
    let mut file = VersionFile::unsigned(v1.clone());
    file.push_signature(garbage);
    file.sign(&key(2));
    file.sign(&key(3));
    let chain = verify_chain(&pin_of(&v1), &[file.to_bytes()]).unwrap();
    assert_eq!(
        chain[0].signatures()[0].outcome(),
        SignatureOutcome::Invalid
    );
}

#[test]
fn an_expired_intermediate_version_may_be_passed_through() {
    let v1 = body(1, &[1, 2], 1, "2001-01-01T00:00:00Z");
    let v2 = body(2, &[2, 3], 1, FAR);
    let chain = verify_chain(&pin_of(&v1), &[signed(&v1, &[1]), signed(&v2, &[2])]).unwrap();
    assert!(chain[0].is_expired(jiff::Timestamp::now()));
    assert!(!chain[1].is_expired(jiff::Timestamp::now()));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Changing any one byte of a signed chain never yields a chain that
    /// verifies with different contents: the edit is refused, or it
    /// touched only whitespace or a signature that was not needed.
    #[test]
    fn any_edited_byte_is_caught(index in any::<prop::sample::Index>(), byte in any::<u8>(), which in 0usize..3) {
        let (pin, files) = rotation();
        let good = verify_chain(&pin, &files).unwrap();
        let mut edited = files.clone();
        let i = index.index(edited[which].len());
        prop_assume!(edited[which][i] != byte);
        edited[which][i] = byte;
        if let Ok(chain) = verify_chain(&pin, &edited) {
            for (a, b) in good.iter().zip(&chain) {
                prop_assert_eq!(a.body(), b.body());
                prop_assert_eq!(a.digest(), b.digest());
            }
        }
    }

    /// Editing the signed part after signing (any byte of it) is refused.
    #[test]
    fn any_edit_of_the_signed_part_is_refused(offset in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let (pin, files) = rotation();
        let text = String::from_utf8(files[1].clone()).unwrap();
        let start = text.find("\"signed\"").unwrap();
        let end = text.find("\"signatures\"").unwrap();
        // The bytes of the signed object that are not layout.
        let significant: Vec<usize> = (start..end)
            .filter(|&i| !matches!(files[1][i], b' ' | b'\n' | b'\r' | b'\t'))
            .collect();
        let i = significant[offset.index(significant.len())];
        prop_assume!(files[1][i] != byte && !matches!(byte, b' ' | b'\n' | b'\r' | b'\t'));
        let mut edited = files.clone();
        edited[1][i] = byte;
        prop_assert!(verify_chain(&pin, &edited).is_err());
    }

    /// Any subset of signers: the chain verifies exactly when both
    /// thresholds are met.
    #[test]
    fn thresholds_are_exact(old in prop::collection::vec(1u8..=3, 0..4), new in prop::collection::vec(2u8..=4, 0..4)) {
        let v1 = body(1, &[1, 2, 3], 2, FAR);
        let v2 = body(2, &[2, 3, 4], 2, FAR);
        let mut signers: Vec<u8> = old.iter().chain(&new).copied().collect();
        signers.sort_unstable();
        signers.dedup();
        let in_old = signers.iter().filter(|&&n| (1..=3).contains(&n)).count();
        let in_new = signers.iter().filter(|&&n| (2..=4).contains(&n)).count();
        let files = [signed(&v1, &[1, 2]), signed(&v2, &signers)];
        prop_assert_eq!(verify_chain(&pin_of(&v1), &files).is_ok(), in_old >= 2 && in_new >= 2);
    }
}
