//! The crate's errors, one enum per job: reading a receipt, verifying it,
//! checking it against a log, building it, writing it.
//!
//! Messages are short, lowercase, say which part failed, and what to do
//! next where there is something to do.

use std::path::PathBuf;

use constle_audit::{LineError, ReadError, SignedLineError};
use constle_tlog::{
    CheckpointError, CosignatureError, Hash, KeyError, LogFilesError, OriginError, ProofError,
};

/// Why bytes are not a receipt as Constle writes them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// Larger than [`crate::MAX_RECEIPT_BYTES`].
    #[error("{len} bytes, more than the {max} a receipt may have")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// Not strict JSON (duplicate keys, lone surrogates, trailing data, …).
    #[error("not JSON: {0}")]
    NotJson(String),
    /// JSON, but not byte for byte its canonical form (RFC 8785, spelled
    /// as log lines are).
    #[error(
        "not in its canonical form (RFC 8785, spelled as log lines are): the file was edited or re-serialised"
    )]
    NotCanonical,
    /// No `type` of a run receipt.
    #[error("not a run receipt: its `type` is {found}, not \"constle-run-receipt\"")]
    NotAReceipt {
        /// The `type` found.
        found: String,
    },
    /// A `version` this crate does not read.
    #[error("receipt version {found:?} is not 1, the one this Constle reads")]
    Version {
        /// The version found, if a number.
        found: Option<u64>,
    },
    /// A member is missing.
    #[error("the receipt has no `{member}`")]
    Missing {
        /// The member's name.
        member: &'static str,
    },
    /// A member is not of its type.
    #[error("`{member}` must be {expected}")]
    Member {
        /// The member's name.
        member: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A member no receipt has.
    #[error("{member} has a member `{name}` no receipt has")]
    Unknown {
        /// Whose member.
        member: &'static str,
        /// Its name.
        name: String,
    },
}

/// Why a receipt does not verify: which part failed, and how.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The `did` is not a did:key.
    #[error("the receipt's did is not a valid did:key: {0}")]
    Did(String),
    /// The `origin` is not a Constle origin.
    #[error("the receipt's origin: {0}")]
    Origin(OriginError),
    /// `agent` is not the origin's agent.
    #[error("the receipt is for agent `{agent}`, its origin {origin} for another")]
    AgentNotOrigins {
        /// The receipt's `agent`.
        agent: String,
        /// The receipt's `origin`.
        origin: String,
    },
    /// A value the Agentfile pins differs from the receipt's.
    #[error("the receipt's {what} is {found}, the Agentfile's is {pinned}")]
    NotPinned {
        /// `did` or `origin`.
        what: &'static str,
        /// The Agentfile's.
        pinned: String,
        /// The receipt's.
        found: String,
    },
    /// A witness vkey that does not parse.
    #[error("witness key {index}: {source}")]
    WitnessKey {
        /// Its place in `witnesses`, from 0.
        index: usize,
        /// What is wrong with it.
        source: KeyError,
    },
    /// A witness the Agentfile does not name.
    #[error("witness {vkey} is not one of the Agentfile's witnesses")]
    UnknownWitness {
        /// Its vkey.
        vkey: String,
    },
    /// A witness listed twice, or named like the log.
    #[error("witness {name} is listed twice, or named like the log itself")]
    DuplicateWitness {
        /// Its name.
        name: String,
    },
    /// The checkpoint is malformed, of another log or not signed by the
    /// agent's key.
    #[error("the checkpoint: {0}")]
    Checkpoint(CheckpointError),
    /// The checkpoint holds other signature lines than the agent's and
    /// one cosignature per witness listed.
    #[error(
        "the checkpoint has {found} signature lines, not the agent's and one per witness listed ({expected})"
    )]
    SignatureLines {
        /// Lines found.
        found: usize,
        /// Lines expected.
        expected: usize,
    },
    /// A cosignature does not verify.
    #[error("the cosignature of witness {witness}: {source}")]
    Cosignature {
        /// The witness's name.
        witness: String,
        /// What failed.
        source: CosignatureError,
    },
    /// Fewer cosignatures than the quorum (at least one).
    #[error("the checkpoint has {cosigned} cosignature(s), fewer than the quorum of {quorum}")]
    QuorumMissed {
        /// Cosignatures that verified.
        cosigned: usize,
        /// How many are needed.
        quorum: usize,
    },
    /// An entry's line is malformed or not signed by the receipt's DID.
    #[error("{part}: {source}")]
    Entry {
        /// Which entry (`run_started`, `tools_offered[2]`, …).
        part: String,
        /// What failed.
        source: SignedLineError,
    },
    /// An entry is not in the checkpoint's tree at its `seq`.
    #[error("{part} (entry {seq}) is not in the checkpointed tree at index {seq}: {source}")]
    NotIncluded {
        /// Which entry.
        part: String,
        /// Its `seq`, the leaf index its proof is checked at.
        seq: u64,
        /// What failed.
        source: ProofError,
    },
    /// An entry is of another event, agent or run than its place says.
    #[error("{part} (entry {seq}): {detail}")]
    Misplaced {
        /// Which entry.
        part: String,
        /// Its `seq`.
        seq: u64,
        /// What is wrong.
        detail: String,
    },
    /// `policy_digest` is not the one `run_started` records.
    #[error("the receipt's policy_digest {found} is not the {recorded} its run_started records")]
    PolicyDigest {
        /// The receipt's.
        found: String,
        /// The entry's (`null` if none).
        recorded: String,
    },
}

/// Why a log is not the one a verified receipt speaks of.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The log's files could not be read as a tree.
    #[error("the log: {0}")]
    Files(LogFilesError),
    /// Fewer entries than the checkpoint covers.
    #[error(
        "the log has {entries} entries, fewer than the {size} the checkpoint covers: entries were removed after the receipt was made"
    )]
    Shorter {
        /// Entries in the log.
        entries: u64,
        /// The checkpoint's size.
        size: u64,
    },
    /// The log's tree at the checkpoint's size has another root.
    #[error(
        "the log's tree of its first {size} entries has the root {found}, the cosigned checkpoint {cosigned}: the log was rewritten after the receipt was made"
    )]
    Rewritten {
        /// The checkpoint's size.
        size: u64,
        /// The log's root.
        found: Hash,
        /// The checkpoint's root.
        cosigned: Hash,
    },
    /// A line of the run cannot be read.
    #[error("entry {seq} of the run: {source}")]
    Line {
        /// Its `seq`.
        seq: u64,
        /// What failed.
        source: LineError,
    },
    /// The run's tool lists in the log are not the receipt's.
    #[error(
        "the run's mcp_tools_offered entries in the log are {in_log:?}, the receipt holds {in_receipt:?}: the receipt leaves some out"
    )]
    ToolsLeftOut {
        /// Their `seq`s in the log.
        in_log: Vec<u64>,
        /// Their `seq`s in the receipt.
        in_receipt: Vec<u64>,
    },
    /// Another run started or finished during this one.
    #[error(
        "entry {seq} is a {event} of another run during this one: a receipt cannot tell the runs' entries apart"
    )]
    Overlap {
        /// Its `seq`.
        seq: u64,
        /// `run_started` or `run_finished`.
        event: String,
    },
}

/// Why [`crate::Pins`] cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinsError {
    /// More cosignatures asked than witnesses.
    #[error("a quorum of {quorum} from {witnesses} witness(es)")]
    Quorum {
        /// The quorum.
        quorum: usize,
        /// The witnesses.
        witnesses: usize,
    },
    /// Two witnesses with one name.
    #[error("witness {name} is named twice")]
    DuplicateWitness {
        /// The name.
        name: String,
    },
}

/// Why no receipt could be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The log's files could not be read as a tree.
    #[error("the log: {0}")]
    Files(LogFilesError),
    /// A line that must be read is not an entry.
    #[error("entry {seq}: {source}")]
    Line {
        /// Its `seq`.
        seq: u64,
        /// What failed.
        source: LineError,
    },
    /// The Agentfile names no witness, so no checkpoint can be cosigned.
    #[error(
        "the Agentfile declares no witnesses (audit.witnesses): a receipt needs a checkpoint a witness cosigned"
    )]
    NoWitnesses,
    /// The log has no run.
    #[error("the log has no run_started entry: no run to make a receipt of")]
    NoRun,
    /// `--run` names no `run_started`.
    #[error("entry {seq} is not a run_started entry of the log (see `constle audit show`)")]
    NoSuchRun {
        /// The `seq` asked for.
        seq: u64,
    },
    /// The run has not finished.
    #[error(
        "the run started at entry {started} has no run_finished naming it (still running, killed, or written by a Constle before receipts)"
    )]
    Unfinished {
        /// Its `run_started`'s `seq`.
        started: u64,
    },
    /// Another run started or finished during this one.
    #[error(
        "the run of entries {started} to {finished} overlaps another run (entry {other}): a receipt cannot tell their entries apart"
    )]
    Overlap {
        /// Its `run_started`'s `seq`.
        started: u64,
        /// Its `run_finished`'s `seq`.
        finished: u64,
        /// The other run's entry.
        other: u64,
    },
    /// No checkpoint after the run covers it.
    #[error(
        "no checkpoint covers the run of entries {started} to {finished}: the log is unsigned, was written before checkpoints (docs/spec/log-checkpoints.md §6), or none has been written since the run ended"
    )]
    NoCheckpoint {
        /// Its `run_started`'s `seq`.
        started: u64,
        /// Its `run_finished`'s `seq`.
        finished: u64,
    },
    /// Checkpoints cover the run, none with enough cosignatures.
    #[error(
        "no checkpoint covering the run of entries {started} to {finished} has the cosignatures of {needed} of the Agentfile's witnesses (the best has {best}): its witnesses failed or are not the Agentfile's"
    )]
    NotWitnessed {
        /// Its `run_started`'s `seq`.
        started: u64,
        /// Its `run_finished`'s `seq`.
        finished: u64,
        /// The most cosignatures one checkpoint got.
        best: usize,
        /// How many are needed.
        needed: usize,
    },
    /// A `checkpoint` entry whose note is missing or does not verify.
    #[error("the checkpoint recorded in entry {seq}: {detail}")]
    Checkpoint {
        /// The `checkpoint` entry's `seq`.
        seq: u64,
        /// What is wrong.
        detail: String,
    },
    /// The log's tree at a checkpoint's size has another root.
    #[error(
        "the log's tree of its first {size} entries does not have the root the checkpoint in entry {seq} signed: the log was changed after that checkpoint; run `constle audit verify`"
    )]
    Rewritten {
        /// The `checkpoint` entry's `seq`.
        seq: u64,
        /// Its size.
        size: u64,
    },
    /// No inclusion proof of an entry could be made.
    #[error("no inclusion proof of entry {seq}: {source}")]
    Proof {
        /// The entry's `seq`.
        seq: u64,
        /// What failed.
        source: ProofError,
    },
    /// `run_started` records no policy digest.
    #[error("the run_started entry {seq} records no policy_digest")]
    NoPolicyDigest {
        /// Its `seq`.
        seq: u64,
    },
    /// What was built does not verify (lines not signed by the Agentfile's
    /// key, say).
    #[error("the receipt built does not verify: {0}")]
    Unverifiable(VerifyError),
}

/// Why a receipt file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// It could not be read.
    #[error(transparent)]
    Read(ReadError),
    /// It is not a receipt.
    #[error("{}: {source}", .path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: FormatError,
    },
    /// It could not be written.
    #[error("cannot {op} {}: {source}", .path.display())]
    Write {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}
