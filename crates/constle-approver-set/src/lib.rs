//! The approver set: who may approve a gated call, and how many must agree,
//! in a signed, versioned file that rotates and revokes keys without
//! editing the Agentfile (specified in `docs/spec/approver-set.md`).
//!
//! It works like the root metadata of TUF. A set directory holds
//! `1.approvers.json`, `2.approvers.json`, …; each version lists approver
//! keys (`did:key`, with a label), a threshold and an expiry, and carries
//! Ed25519 signatures over the domain separator
//! [`DOMAIN_SEPARATOR`] and the RFC 8785 canonical form of its `signed`
//! object. The Agentfile pins version 1 by its digest ([`SetPin`]).
//!
//! - Version 1 is valid when a threshold of its own keys signed it and its
//!   digest is the pin.
//! - Version N+1 is valid when it says N+1, and a threshold of version N's
//!   keys (by version N's threshold) *and* a threshold of its own keys (by
//!   its own) signed it. So the old approvers agree to hand over, and the
//!   new ones accept; a key left out of N+1 is revoked from then on.
//! - The newest version must not have expired; older ones may have.
//! - Signatures by keys in neither set are ignored; a key counts once,
//!   however many entries it has.
//!
//! Which API:
//!
//! - [`ApproverSets::load`]: what a run uses. It verifies the set
//!   directory from the pin, checks it against the versions accepted
//!   before (kept under `$CONSTLE_HOME`: a rollback, a fork or a damaged
//!   store is refused, never reset), records new ones, and returns the
//!   [`InForce`] version, which nothing else can make.
//! - [`verify_chain`]: the same verification over versions given as bytes,
//!   for `audit verify`, which checks each recorded vote against the
//!   version in force at the time ([`VerifiedVersion::contains`]).
//! - [`SetBody`], [`VersionFile`], [`write_new_version`],
//!   [`rewrite_version`]: making and signing versions
//!   (`constle approvers init`, `next`, `sign`).
//!
//! ```
//! use constle_approver_set::{Approver, Label, SetBody, SetPin, VersionFile, verify_chain};
//! use constle_identity::SigningIdentity;
//!
//! let keys: Vec<SigningIdentity> = (1..=3).map(|n| SigningIdentity::from_bytes(&[n; 32])).collect();
//! let approvers = keys
//!     .iter()
//!     .zip(["alice", "bob", "carol"])
//!     .map(|(k, l)| Ok(Approver { did: k.did().clone(), label: Label::new(l)? }))
//!     .collect::<Result<Vec<_>, String>>()?;
//! let body = SetBody::new(1, "2030-01-01T00:00:00Z".parse()?, 2, approvers)?;
//! let mut first = VersionFile::unsigned(body);
//! let pin = SetPin::new(first.digest());
//! first.sign(&keys[0]);
//! assert!(verify_chain(&pin, &[first.to_bytes()]).is_err()); // 1 of 2
//! first.sign(&keys[1]);
//! let chain = verify_chain(&pin, &[first.to_bytes()])?;
//! assert!(chain[0].contains(keys[2].did()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod body;
mod digest;
mod error;
mod file;
mod store;
mod verify;

#[cfg(test)]
mod vectors;

pub use body::{Approver, Label, MAX_VERSION, SetBody, parse_expiry};
pub use digest::{DigestParseError, SetDigest, SetPin};
pub use error::{ApproverSetError, Location, Signers};
pub use file::{SignatureEntry, VersionFile};
pub use store::{
    ApproverSets, InForce, newest_version, read_version_file, read_versions, rewrite_version,
    store_dir, verify_files, version_file_name, write_new_version,
};
pub use verify::{SignatureCheck, SignatureOutcome, VerifiedVersion, verify_chain};

/// What every signature covers first: `constle approver-set v1\n`.
pub const DOMAIN_SEPARATOR: &[u8] = b"constle approver-set v1\n";

/// The `signed.type` of every version.
pub const SET_TYPE: &str = "constle/approver-set";

/// The largest version file, in bytes.
pub const MAX_FILE_BYTES: usize = 64 * 1024;

/// The most approvers one version may list.
pub const MAX_APPROVERS: usize = 64;

/// The most signature entries one file may hold: each of a version's and
/// its predecessor's approvers once.
pub const MAX_SIGNATURES: usize = 2 * MAX_APPROVERS;

/// The longest label, in bytes.
pub const MAX_LABEL_BYTES: usize = 64;
