//! [`WorkdirError`]: why a work directory cannot be used, or could not be
//! checked after a run.

use std::path::{Path, PathBuf};

/// Why a work directory cannot be used for a run, or could not be put
/// right after one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkdirError {
    /// Another run holds the work directory.
    #[error(
        "another constle run is using the work directory {path}: two runs in one work directory would each check and change what the other's agent is writing; wait for it to end, or give this agent a work directory of its own"
    )]
    Busy {
        /// The work directory.
        path: PathBuf,
    },
    /// Files the agent could change have other names outside the work
    /// directory.
    #[error(
        "{count} file{s} in the work directory {path} also {have} names outside it (hard links), so what runs in the sandbox could change {them} there too: {listed}; give the work directory its own copies (for example `cp -a --no-preserve=links`, `git clone --no-hardlinks`, pnpm's `package-import-method=copy`) or remove the other names; nothing was started",
        s = if *count == 1 { "" } else { "s" },
        have = if *count == 1 { "has" } else { "have" },
        them = if *count == 1 { "it" } else { "them" },
    )]
    HardLinks {
        /// The work directory.
        path: PathBuf,
        /// How many such files.
        count: usize,
        /// The first of them, relative to the work directory.
        listed: String,
    },
    /// The work directory's root is owned by constle's keeper id, left by a
    /// run that was killed: its owner is unknown.
    #[error(
        "the work directory {path} belongs to uid {uid}, which constle gives the operator's read-only files while a run is going: a run in it was killed; give it back to its owner (chown OWNER:GROUP {path}) and run again"
    )]
    Orphaned {
        /// The work directory.
        path: PathBuf,
        /// The keeper id.
        uid: u32,
    },
    /// The tree is deeper than the walk goes.
    #[error(
        "the work directory is nested deeper than {} directories at {path}: constle checks every file an agent leaves, and cannot check this one; remove or move that tree",
        crate::bounds::MAX_DEPTH
    )]
    TooDeep {
        /// Where, relative to the work directory.
        path: PathBuf,
    },
    /// The work directory at its path is no longer the one the run used.
    #[error(
        "the work directory {path} is no longer the directory the run used (it was moved or replaced during the run); nothing after the run was checked there"
    )]
    Replaced {
        /// The work directory.
        path: PathBuf,
    },
    /// Its executable configuration is too large to keep a copy of.
    #[error(
        "the executable configuration in the work directory (editor, git and shell settings) holds more than {} MiB; constle keeps a copy of it to put it back if the agent changes it: remove what is not needed",
        crate::bounds::MAX_SAVED_BYTES >> 20
    )]
    TooMuchConfig,
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path, relative to the work directory, or the quarantine's.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

impl WorkdirError {
    pub(crate) fn io(path: &Path, source: impl Into<std::io::Error>) -> WorkdirError {
        let path = match path.as_os_str().is_empty() {
            true => PathBuf::from("."),
            false => path.to_path_buf(),
        };
        WorkdirError::Io {
            path,
            source: source.into(),
        }
    }
}
