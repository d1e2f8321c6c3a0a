//! What a witness decides about a submitted checkpoint
//! (c2sp.org/tlog-witness `add-checkpoint`), as pure functions: the server
//! that holds the state, persists it and answers over HTTP is built on them.
//!
//! The witness keeps, per origin, the tree head it last cosigned. Given a
//! checkpoint whose signature it verified ([`VerifiedCheckpoint`]), the old
//! size the client claims the witness last cosigned, and a consistency proof
//! from that size, [`check_submission`] answers, in the order the spec
//! checks:
//!
//! | case | answer | status |
//! |---|---|---|
//! | old size above the checkpoint's | [`Refusal::OldSizeAboveSize`] | 400 |
//! | old size is not the size last cosigned (0 if none) | [`Refusal::StaleOldSize`] | 409 |
//! | size 0 without the empty tree's root | [`Refusal::EmptyTreeRoot`] | 422 |
//! | the size last cosigned, another root | [`Refusal::RootChanged`] | 422 |
//! | the proof does not lead from the cosigned head | [`Refusal::BadProof`] | 422 |
//! | otherwise | the new head to store, then [`cosign`](crate::cosign) | 200 |
//!
//! Since the check runs from the head the witness itself stored, never from
//! a root the client sends, a witness using it cosigns at most one root per
//! size, and only trees that extend all it cosigned before. The caller must
//! make check and store one atomic step per origin (the spec's race).

use crate::checkpoint::{SignedCheckpoint, VerifiedCheckpoint};
use crate::error::{Refusal, RequestError};
use crate::hash::Hash;
use crate::tree::{ConsistencyProof, MAX_PROOF_HASHES, TreeHead, verify_consistency};

/// Decides whether a witness whose last cosigned head for the checkpoint's
/// origin is `last` (`None`: never cosigned one) may cosign `checkpoint`,
/// given the client's `old_size` and consistency `proof` from it.
///
/// # Errors
///
/// The [`Refusal`], whose [`status`](Refusal::status) is the HTTP answer.
pub fn check_submission(
    last: Option<TreeHead>,
    old_size: u64,
    proof: &[Hash],
    checkpoint: &VerifiedCheckpoint,
) -> Result<TreeHead, Refusal> {
    let new = checkpoint.head();
    if old_size > new.size {
        return Err(Refusal::OldSizeAboveSize {
            old: old_size,
            size: new.size,
        });
    }
    let last = last.unwrap_or(TreeHead::EMPTY);
    if old_size != last.size {
        return Err(Refusal::StaleOldSize {
            old: old_size,
            latest: last.size,
        });
    }
    if new.size == 0 && new.root != Hash::EMPTY {
        return Err(Refusal::EmptyTreeRoot);
    }
    if new.size == last.size && new.root != last.root {
        return Err(Refusal::RootChanged { size: new.size });
    }
    let bad = |source| Refusal::BadProof {
        old: last.size,
        source,
    };
    let proof = ConsistencyProof::new(last.size, new.size, proof.to_vec()).map_err(bad)?;
    verify_consistency(&last, &new, &proof).map_err(bad)?;
    Ok(new)
}

/// An `add-checkpoint` request body, read but not checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddCheckpoint {
    /// The size the client says the witness last cosigned.
    pub old_size: u64,
    /// The consistency proof from `old_size` to the checkpoint's size.
    pub proof: Vec<Hash>,
    /// The checkpoint, signature unchecked.
    pub checkpoint: SignedCheckpoint,
}

impl AddCheckpoint {
    /// Reads `old <size>\n`, up to 63 base64 hash lines, a blank line, and a
    /// signed checkpoint.
    ///
    /// # Errors
    ///
    /// [`RequestError`] (all answered 400 Bad Request, except what the
    /// checkpoint itself fails on, which the caller may answer as it likes).
    pub fn parse(body: &[u8]) -> Result<AddCheckpoint, RequestError> {
        let mut rest = body;
        let mut next_line = || -> Result<&[u8], RequestError> {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .ok_or(RequestError::Malformed("a line does not end in a newline"))?;
            let line = &rest[..end];
            rest = &rest[end + 1..];
            Ok(line)
        };
        let old = next_line()?;
        let old = std::str::from_utf8(old)
            .ok()
            .and_then(|l| l.strip_prefix("old "))
            .ok_or(RequestError::Malformed(
                "the first line is not `old <size>`",
            ))?;
        let old_size: u64 = old
            .parse()
            .ok()
            .filter(|n: &u64| n.to_string() == old)
            .ok_or(RequestError::Malformed(
                "the old size is not a decimal number",
            ))?;
        let mut proof = Vec::new();
        loop {
            let line = next_line()?;
            if line.is_empty() {
                break;
            }
            if proof.len() == MAX_PROOF_HASHES {
                return Err(RequestError::TooManyProofLines(proof.len() + 1));
            }
            let hash = std::str::from_utf8(line)
                .ok()
                .and_then(Hash::from_base64)
                .ok_or(RequestError::Malformed("a proof line is not a base64 hash"))?;
            proof.push(hash);
        }
        let checkpoint = SignedCheckpoint::parse(rest)?;
        Ok(AddCheckpoint {
            old_size,
            proof,
            checkpoint,
        })
    }

    /// The body, as a client sends it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut body = format!("old {}\n", self.old_size).into_bytes();
        for hash in &self.proof {
            body.extend_from_slice(format!("{hash}\n").as_bytes());
        }
        body.push(b'\n');
        body.extend_from_slice(self.checkpoint.as_bytes());
        body
    }
}
