//! The witness's errors: at start ([`WitnessError`]) and per origin's
//! state ([`StateError`]).

use std::path::PathBuf;

use constle_tlog::KeyError;

/// Why the witness cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WitnessError {
    /// A line of the logs file is not a log's verifier key.
    #[error("{}:{line}: not a log's verifier key (`<origin>+<key ID>+<base64>`): {source}", .path.display())]
    LogKey {
        /// The logs file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        source: KeyError,
    },
    /// Two lines of the logs file name the same origin.
    #[error("{}:{line}: origin {origin} is listed twice; give each log one key", .path.display())]
    DuplicateOrigin {
        /// The logs file.
        path: PathBuf,
        /// The second line, from 1.
        line: usize,
        /// The origin.
        origin: String,
    },
    /// An origin too long for a state file's name.
    #[error("{}:{line}: origin {origin} is too long for a state file name", .path.display())]
    OriginTooLong {
        /// The logs file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The origin.
        origin: String,
    },
    /// The logs file lists no log.
    #[error("{}: lists no log; write one verifier key per line", .path.display())]
    NoLogs {
        /// The logs file.
        path: PathBuf,
    },
    /// The logs file cannot be read.
    #[error("cannot read {}: {source}", .path.display())]
    ReadLogs {
        /// The logs file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The witness name cannot name a key.
    #[error("witness name: {0}")]
    Name(KeyError),
    /// The state directory cannot be used.
    #[error("state directory {}: {why}", .path.display())]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// A log's state that cannot be read or written: the witness answers 500
/// for that log until someone looks, and never resets it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("witness state {}: {why}; the witness refuses this log until it is repaired by hand", .path.display())]
pub struct StateError {
    /// The file (or directory) involved.
    pub path: PathBuf,
    /// What is wrong.
    pub why: String,
}
