//! What can go wrong.

use std::path::PathBuf;

/// The Agentfile's `audit` section cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `audit.deployment` is not a valid origin part.
    #[error("audit.deployment: {0}")]
    Deployment(#[source] constle_tlog::OriginError),
}

/// A round could not make a checkpoint. Witnesses that fail are not errors
/// (they are in the [`crate::Round`]); the log that cannot be read is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// No HTTP client for the witnesses can be made.
    #[error("cannot make an HTTP client for the witnesses: {0}")]
    Client(String),
    /// The head anchor cannot be read.
    #[error("cannot read the audit log's head anchor in {dir}: {reason}")]
    Head {
        /// The log directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// The log's files do not make a tree.
    #[error("cannot build the audit log's tree: {0}")]
    Files(#[from] constle_tlog::LogFilesError),
    /// The checkpoint cannot be signed.
    #[error("cannot sign the checkpoint: {0}")]
    Sign(#[from] constle_tlog::CheckpointError),
    /// The latest checkpoint cannot be written beside the log.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}
