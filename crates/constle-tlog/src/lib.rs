//! The audit log as a transparency log: what a third party needs to hold
//! Constle to its past.
//!
//! `constle audit verify` shows an agent's log unaltered since it was
//! signed, but whoever holds the agent's key can re-sign a different past.
//! This crate gives the log what transparency logs use against that
//! (c2sp.org/tlog-checkpoint, signed-note, tlog-cosignature, tlog-witness):
//!
//! - [`LogTree`]: the agent's chain as an RFC 6962 Merkle tree, one leaf per
//!   line (its exact bytes, without the newline), in chain order across day
//!   files; built line by line or from the log files alone
//!   ([`LogTree::from_log_dir`]), or kept up to date as it grows
//!   ([`LogFollower`]); inclusion and consistency proofs
//!   ([`verify_inclusion`], [`verify_consistency`]).
//! - [`Origin`] (`<deployment>/constle/<agent>`), [`LogKey`] and
//!   [`WitnessKey`]: names and keys as signed notes write them, read
//!   strictly by `constle-vkey` (re-exported here), which the Agentfile's
//!   validation uses too; [`WitnessSigner`], a witness's signing key.
//! - [`sign_checkpoint`], [`SignedCheckpoint::parse`] and
//!   [`SignedCheckpoint::verify`]: checkpoints, signed by the agent's key.
//!   Only verifying makes a [`VerifiedCheckpoint`].
//! - [`cosign`], [`verify_cosignature`], [`find_cosignature`]: witness
//!   cosignatures (`cosignature/v1`).
//! - [`check_submission`] and [`AddCheckpoint`]: a witness's decision on a
//!   submitted checkpoint, with the HTTP status of each refusal.
//! - [`check_coverage`]: every cosignature found for a log (its
//!   `checkpoint_cosigned` entries, read with the tree into [`Recorded`],
//!   and checkpoints held elsewhere, [`Cosigned::from_checkpoint`]) checked
//!   against its tree: how far it is witnessed ([`Coverage`]), or the
//!   findings that show it was rewritten or cut since.
//!
//! The formats are specified, with test vectors, in
//! `docs/spec/log-checkpoints.md`.
//!
//! ```
//! use constle_identity::{Name, SigningIdentity};
//! use constle_tlog::*;
//!
//! let agent_key = SigningIdentity::from_bytes(&[1; 32]);
//! let origin = Origin::new(&Deployment::new("ci.example.com")?, &Name::new("bot")?);
//! let log_key = LogKey::new(origin, agent_key.did());
//!
//! let mut tree = LogTree::new();
//! for line in [&b"{\"seq\":0}"[..], b"{\"seq\":1}", b"{\"seq\":2}"] {
//!     tree.push(line);
//! }
//! let signed = sign_checkpoint(&agent_key, &log_key, tree.head())?;
//! let checkpoint = SignedCheckpoint::parse(signed.as_bytes())?.verify(&log_key)?;
//!
//! // A witness that cosigned size 2 checks the extension and cosigns.
//! let witness = WitnessSigner::new("witness.example.org/w1", SigningIdentity::from_bytes(&[2; 32]))?;
//! let proof = tree.consistency_proof(2, 3)?;
//! let new_state = check_submission(Some(tree.head_at(2)?), 2, proof.hashes(), &checkpoint)?;
//! assert_eq!(new_state, tree.head());
//! let cosignature = cosign(&checkpoint, &witness, 1_767_225_600)?;
//! verify_cosignature(&checkpoint, witness.public(), cosignature.line())?;
//!
//! // Entry 1 is in the checkpointed tree.
//! let inclusion = tree.inclusion_proof(1, 3)?;
//! verify_inclusion(b"{\"seq\":1}", &checkpoint.head(), &inclusion)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## The formats' crates, and what is done here instead
//!
//! - `tlog_tiles` 0.2.0 (Cloudflare's port of Go's `sumdb/tlog`): leaf and
//!   node hashes, the stored-hash layout, roots, inclusion and consistency
//!   proofs and their checks, and the checkpoint text.
//! - `signed_note` 0.2.0: the note framing, signature lines, key IDs, and
//!   the rule for known and unknown keys.
//!
//! Signatures are made and checked by `constle-identity` (ed25519-dalek 3,
//! `verify_strict`, canonical `S`), through `signed_note`'s `Verifier`
//! trait: its own `StandardVerifier` uses ed25519-dalek 2's lenient
//! `verify` and is not used. Added here: proof lengths bounded before any
//! check (the recursive checks copy the proof at each level), a parsed note
//! must re-encode to the same bytes (one spelling), no extension lines,
//! the empty-tree cases, and vkeys read strictly. The cost, measured in the
//! lock file: `signed_note` brings ed25519-dalek 2, curve25519-dalek 4,
//! base64 0.21 and thiserror 1 into the build beside the workspace's
//! versions, a second Ed25519 implementation compiled but never called.
//! Speed is no reason to write them by hand: building the tree of a
//! 100 000-entry log from its file took 83 ms beside 0.96 s for
//! `verify_file` of it, about 1.09x together (`benches/tree.rs`).
//!
//! What this does not do: it does not verify the chain itself (signatures,
//! `prev` links: that stays `constle_audit`'s), keep a witness's state, or
//! talk to witnesses. And a checkpoint binds the key holder only once a
//! witness has cosigned it: before that, a rewritten past re-signed with the
//! agent's key is as good as the real one.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod checkpoint;
mod cosignature;
mod coverage;
mod error;
mod files;
mod follow;
mod hash;
mod keys;
mod recorded;
mod tree;
mod witness;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors;

pub use checkpoint::{
    MAX_CHECKPOINT_BYTES, SignedCheckpoint, VerifiedCheckpoint, checkpoint_text, sign_checkpoint,
};
pub use constle_vkey::{Deployment, KeyError, LogKey, Origin, OriginError, WitnessKey};
pub use cosignature::{
    Cosignature, VerifiedCosignature, cosign, find_cosignature, verify_cosignature,
};
pub use coverage::{Cosigned, Coverage, CoverageVerdict, Source, check_coverage};
pub use error::{
    CheckpointError, CosignatureError, LogFilesError, ProofError, Refusal, RequestError,
};
pub use files::{LogFiles, day_files};
pub use follow::LogFollower;
pub use hash::Hash;
pub use keys::WitnessSigner;
pub use recorded::{COSIGNED_EVENT, Recorded};
pub use tree::{
    ConsistencyProof, InclusionProof, LogTree, MAX_PROOF_HASHES, TreeHead, verify_consistency,
    verify_inclusion,
};
pub use witness::{AddCheckpoint, check_submission};
