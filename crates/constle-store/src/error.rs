//! The crate's errors: one type per module, each mapped by its callers
//! into their own error type, with their own messages.

use std::io;
use std::path::{Path, PathBuf};

/// The last step of a replacement, after the rename.
pub(crate) const FSYNC_DIR: &str = "fsync directory";

/// Why [`crate::replace`] could not put a file in place. The old file is
/// then still there, except when [`ReplaceError::in_place`]: the new one
/// is, but may not survive a crash.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplaceError {
    /// One step failed.
    #[error("cannot {step} {}: {source}", path.display())]
    Io {
        /// What was being done, for a message: "create", "chmod",
        /// "write", "fsync", "rename into place", "fsync directory", …
        step: &'static str,
        /// The file or directory it was done to.
        path: PathBuf,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// A file that must be new is there already; it was left alone.
    #[error("{} exists already", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
}

impl ReplaceError {
    /// The file or directory the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ReplaceError::Io { path, .. } | ReplaceError::Exists { path } => path,
        }
    }

    /// Whether the new file is in place all the same: only the `fsync` of
    /// its directory failed, so a crash may still undo the rename.
    pub fn in_place(&self) -> bool {
        matches!(self, ReplaceError::Io { step, .. } if *step == FSYNC_DIR)
    }

    /// The step, the path and the system's answer, for a caller whose
    /// error type has its own message around them ([`ReplaceError::Exists`]
    /// is the step "create new" answered with `AlreadyExists`).
    pub fn into_parts(self) -> (&'static str, PathBuf, io::Error) {
        match self {
            ReplaceError::Io { step, path, source } => (step, path, source),
            ReplaceError::Exists { path } => {
                ("create new", path, io::ErrorKind::AlreadyExists.into())
            }
        }
    }

    /// The system's answer alone (`AlreadyExists` for
    /// [`ReplaceError::Exists`]), for a caller whose message names the path
    /// itself.
    pub fn into_io(self) -> io::Error {
        match self {
            ReplaceError::Io { source, .. } => source,
            ReplaceError::Exists { .. } => io::ErrorKind::AlreadyExists.into(),
        }
    }

    pub(crate) fn at(step: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_owned();
        move |source| ReplaceError::Io { step, path, source }
    }
}

/// Why [`crate::lock::locked`] has no result from its job.
#[cfg(feature = "lock")]
#[derive(Debug)]
pub enum LockFailure<E> {
    /// The job did not take the lock within the wait: it has done nothing
    /// and never will.
    TimedOut,
    /// The blocking thread panicked, or the runtime is shutting down.
    Stopped(tokio::task::JoinError),
    /// The job's own error.
    Job(E),
}

/// Why Redis could not be used. Every `url` is
/// [`redacted`](crate::redis::redacted).
#[cfg(feature = "redis")]
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RedisFailure {
    /// The URL is not one the Redis client accepts.
    #[error("{url} is not a usable Redis URL: {message}")]
    BadUrl {
        /// The URL, without credentials.
        url: String,
        /// What the client said.
        message: String,
    },
    /// Redis failed or refused the command, or the connection failed.
    #[error("{url}: {message}")]
    Redis {
        /// The URL, without credentials.
        url: String,
        /// What failed.
        message: String,
    },
    /// Redis did not answer in time.
    #[error("{url} did not answer within {after:?}")]
    Timeout {
        /// The URL, without credentials.
        url: String,
        /// The bound.
        after: std::time::Duration,
    },
}

#[cfg(feature = "redis")]
impl RedisFailure {
    /// The URL, without credentials.
    pub fn url(&self) -> &str {
        match self {
            RedisFailure::BadUrl { url, .. }
            | RedisFailure::Redis { url, .. }
            | RedisFailure::Timeout { url, .. } => url,
        }
    }
}
