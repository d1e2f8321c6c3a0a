//! What can go wrong giving a sandbox a host id.

use std::path::PathBuf;

/// Why no id was given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostIdError {
    /// The lock directory could not be made or is not safe.
    #[error("cannot use {path} for the locks of constle's host ids: {source}")]
    LockDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An id's lock file could not be opened or locked.
    #[error("cannot lock {path}: {source}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Every id of the range is taken or held by another run.
    #[error(
        "every host id constle gives sandboxes ({first}–{last}) is held by another run or belongs to a user, group or subordinate id range of this machine; wait for a run to end",
        first = crate::RUN_IDS.start(),
        last = crate::RUN_IDS.end()
    )]
    Exhausted,
}
