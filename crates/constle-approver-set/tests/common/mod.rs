//! What the tests share: fixed keys, versions made from them, and files
//! signed by chosen keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use constle_approver_set::{Approver, Label, SetBody, SetPin, VersionFile};
use constle_identity::SigningIdentity;

/// Key `n` (from a fixed seed), labelled `k<n>`.
pub fn key(n: u8) -> SigningIdentity {
    SigningIdentity::from_bytes(&[n; 32])
}

pub fn approver(n: u8) -> Approver {
    Approver {
        did: key(n).did().clone(),
        label: Label::new(&format!("k{n}")).unwrap(),
    }
}

pub const FAR: &str = "2099-01-01T00:00:00Z";

/// Version `version` listing keys `members` with `threshold`, expiring at `expires`.
pub fn body(version: u64, members: &[u8], threshold: usize, expires: &str) -> SetBody {
    SetBody::new(
        version,
        expires.parse().unwrap(),
        threshold,
        members.iter().map(|&n| approver(n)).collect(),
    )
    .unwrap()
}

/// `body` signed by keys `signers`, as file bytes.
pub fn signed(body: &SetBody, signers: &[u8]) -> Vec<u8> {
    let mut file = VersionFile::unsigned(body.clone());
    for &n in signers {
        file.sign(&key(n));
    }
    file.to_bytes()
}

pub fn pin_of(body: &SetBody) -> SetPin {
    SetPin::new(body.digest())
}

/// A rotation: v1 = keys 1,2,3 (2 of 3); v2 = keys 2,3,4 (2 of 3), signed
/// by 1,2 (old) and 3,4 (new); v3 = keys 3,4,5 (2 of 3), signed by 3,4 (old:
/// of v2) and 4,5 (new).
pub fn rotation() -> (SetPin, Vec<Vec<u8>>) {
    let v1 = body(1, &[1, 2, 3], 2, FAR);
    let v2 = body(2, &[2, 3, 4], 2, FAR);
    let v3 = body(3, &[3, 4, 5], 2, FAR);
    (
        pin_of(&v1),
        vec![
            signed(&v1, &[1, 2]),
            signed(&v2, &[1, 2, 3, 4]),
            signed(&v3, &[3, 4, 5]),
        ],
    )
}
