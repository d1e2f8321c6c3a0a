//! The crate's errors and the witness's refusals, one enum per job.
//!
//! Messages are short, lowercase, and say what to do next where there is
//! something to do.

use std::path::PathBuf;

use constle_audit::ReadError;

use crate::hash::Hash;

/// Why a proof could not be made or does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    /// The leaf asked about is not in the tree of that size.
    #[error("leaf {index} is not in a tree of {size} leaves")]
    IndexOutOfRange {
        /// The leaf's index.
        index: u64,
        /// The tree size.
        size: u64,
    },
    /// A size larger than the tree the proof is asked of.
    #[error("size {size} is beyond the {len} leaves of this tree")]
    SizeBeyondTree {
        /// The size asked for.
        size: u64,
        /// The tree's leaves.
        len: u64,
    },
    /// A consistency proof runs from a smaller tree to a larger one.
    #[error(
        "a consistency proof runs from a smaller tree to a larger one, not from {old} to {new}"
    )]
    SizesOutOfOrder {
        /// The earlier size.
        old: u64,
        /// The later size.
        new: u64,
    },
    /// More hashes than any tree of up to 2^64 leaves needs.
    #[error("a proof of {len} hashes is longer than any tree needs (at most {max})")]
    TooLong {
        /// The hashes given.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The proof is for other sizes than the tree heads it is checked against.
    #[error("the proof is for sizes {proof_old}..{proof_new}, the heads are {old}..{new}")]
    SizeMismatch {
        /// The proof's earlier size.
        proof_old: u64,
        /// The proof's later size.
        proof_new: u64,
        /// The earlier head's size.
        old: u64,
        /// The later head's size.
        new: u64,
    },
    /// A tree of no leaves whose root is not the hash of the empty string.
    #[error("a tree of size 0 has the root {}, not {root}", Hash::EMPTY)]
    EmptyTreeRoot {
        /// The root claimed.
        root: Hash,
    },
    /// The hashes do not lead to the root: the trees are not the ones the
    /// proof claims (a leaf changed, removed, reordered or added).
    #[error("the proof does not verify against these roots")]
    Invalid,
}

/// Why a signed checkpoint is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// Larger than any checkpoint Constle writes.
    #[error("a signed checkpoint of {len} bytes is larger than the {max} bytes read")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// Not a signed note: text, a blank line, then `— name base64` lines.
    #[error("not a signed note (c2sp.org/signed-note)")]
    MalformedNote,
    /// The note's text is not origin, size and root, each on a line.
    #[error("not a checkpoint (c2sp.org/tlog-checkpoint): origin, size and root hash lines")]
    MalformedCheckpoint,
    /// Extension lines, which Constle neither writes nor accepts.
    #[error("the checkpoint has extension lines; Constle's checkpoints have none")]
    ExtensionLines,
    /// The checkpoint is for another log than the key's.
    #[error("checkpoint of {found:?}, where one of {expected:?} was expected")]
    OriginMismatch {
        /// The key's origin.
        expected: String,
        /// The checkpoint's.
        found: String,
    },
    /// No signature line by the log's key.
    #[error("no signature by {key} on the checkpoint")]
    NotSigned {
        /// The key's name and ID.
        key: String,
    },
    /// A signature line by the log's key that does not verify.
    #[error("the signature by {key} does not verify: the checkpoint was changed or forged")]
    InvalidSignature {
        /// The key's name and ID.
        key: String,
    },
    /// Asked to sign a tree of size 0 whose root is not the empty tree's.
    #[error("a checkpoint of size 0 must have the empty tree's root")]
    EmptyTreeRoot,
    /// The signer is not the log key named.
    #[error("the signing key is not the log's key {key}")]
    WrongSigner {
        /// The log key's name and ID.
        key: String,
    },
}

/// Why a cosignature is not made or not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CosignatureError {
    /// Not a note signature line, `— <name> <base64>`.
    #[error("not a note signature line (`— <name> <base64>`)")]
    Malformed,
    /// A line of another key than this witness's.
    #[error("the line is signed by {found}, not by the witness {expected}")]
    OtherKey {
        /// The witness's name and ID.
        expected: String,
        /// The line's name and ID.
        found: String,
    },
    /// Not 8 bytes of timestamp and a 64-byte Ed25519 signature.
    #[error("a cosignature/v1 is 72 bytes (timestamp and signature), not {len}")]
    WrongLength {
        /// The bytes after the key ID.
        len: usize,
    },
    /// Zero, or above 2^63 - 1.
    #[error("cosignature timestamp {timestamp} is not between 1 and 2^63 - 1")]
    Timestamp {
        /// The timestamp.
        timestamp: u64,
    },
    /// The signature does not verify over this checkpoint and time.
    #[error("the cosignature by {key} does not verify over this checkpoint")]
    InvalidSignature {
        /// The witness's name and ID.
        key: String,
    },
    /// The checkpoint carries no cosignature by this witness.
    #[error("no cosignature by {key} on the checkpoint")]
    Missing {
        /// The witness's name and ID.
        key: String,
    },
}

/// Why a witness request body (`add-checkpoint`) is refused before checking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// Not `old <size>`, proof lines, a blank line, a checkpoint.
    #[error("not an add-checkpoint body: {0}")]
    Malformed(&'static str),
    /// More than the 63 proof lines a client may send.
    #[error("{0} consistency proof lines, more than the 63 allowed")]
    TooManyProofLines(usize),
    /// The checkpoint part is not a checkpoint.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

/// Why a witness does not cosign a checkpoint: each maps to the HTTP status
/// c2sp.org/tlog-witness prescribes ([`Refusal::status`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The old size is larger than the checkpoint's (400).
    #[error("old size {old} is larger than the checkpoint's size {size}")]
    OldSizeAboveSize {
        /// The old size sent.
        old: u64,
        /// The checkpoint's size.
        size: u64,
    },
    /// The old size is not the size last cosigned (409; the body is
    /// `latest` and a newline, `text/x.tlog.size`).
    #[error("old size {old} is not {latest}, the size last cosigned; resubmit from {latest}")]
    StaleOldSize {
        /// The old size sent.
        old: u64,
        /// The size the witness last cosigned (0 if none).
        latest: u64,
    },
    /// A tree of size 0 without the empty tree's root (422).
    #[error("a checkpoint of size 0 must have the empty tree's root")]
    EmptyTreeRoot,
    /// The consistency proof does not lead from the cosigned tree to this
    /// one (422): the log's history differs from what was cosigned.
    #[error("the consistency proof from size {old} does not verify: {source}")]
    BadProof {
        /// The cosigned size it should extend.
        old: u64,
        /// Why the proof fails.
        source: ProofError,
    },
    /// Another root for the size already cosigned (422): a fork. Never
    /// cosigned.
    #[error("size {size} was cosigned with another root: the log has forked")]
    RootChanged {
        /// The size.
        size: u64,
    },
}

impl Refusal {
    /// The HTTP status c2sp.org/tlog-witness gives this refusal.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::OldSizeAboveSize { .. } => 400,
            Refusal::StaleOldSize { .. } => 409,
            Refusal::EmptyTreeRoot | Refusal::BadProof { .. } | Refusal::RootChanged { .. } => 422,
        }
    }
}

/// Why an agent's tree could not be built from its day files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogFilesError {
    /// A day file could not be read (not a regular file, too large, I/O).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The directory could not be listed.
    #[error("{}: {source}", .dir.display())]
    ListDir {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A day file other than the latest ends without a newline: its last
    /// line is cut off, which no writer leaves behind a later day.
    #[error("{}: the last line has no newline, yet a later day file follows; run `constle audit verify`", .file.display())]
    TornLine {
        /// The file.
        file: PathBuf,
    },
    /// An empty line, which no writer produces.
    #[error("{}: line {line} is empty; run `constle audit verify`", .file.display())]
    EmptyLine {
        /// The file.
        file: PathBuf,
        /// The line number, from 1.
        line: usize,
    },
    /// A day's first entry whose `seq` is not the number of lines before
    /// it: earlier days are missing (retention) or lines were removed.
    #[error("{}: the first entry is seq {found}, but {expected} lines come before it; the tree needs the whole chain from seq 0", .file.display())]
    SeqGap {
        /// The file.
        file: PathBuf,
        /// The lines before it.
        expected: u64,
        /// Its `seq`.
        found: u64,
    },
    /// The files do not hold the entries a head anchor names, as a
    /// following reader last saw them: the log shrank, was replaced, or
    /// its head file is not one of its day files.
    #[error("{}: {what}; run `constle audit verify`", .dir.display())]
    NotFollowing {
        /// The log directory.
        dir: PathBuf,
        /// What does not hold.
        what: String,
    },
}
