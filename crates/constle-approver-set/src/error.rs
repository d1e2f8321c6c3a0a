//! Errors of this crate: one enum, each variant saying what is wrong, where
//! (a file, or the position of a version given in memory), and what to do.

use std::fmt;
use std::path::PathBuf;

use jiff::Timestamp;

use crate::digest::SetDigest;

/// Where a version came from, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A file on disk.
    File(PathBuf),
    /// The `index`-th (from 0) of the versions handed to
    /// [`verify_chain`](crate::verify_chain).
    Given(usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(path) => write!(f, "{}", path.display()),
            Location::Given(index) => write!(f, "the version file given in position {}", index + 1),
        }
    }
}

/// Whose signatures a version lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signers {
    /// The keys of the version before it (rotation: the old set agrees).
    Previous {
        /// The previous version's number.
        version: u64,
    },
    /// Its own keys (the new set accepts it).
    Own,
}

impl fmt::Display for Signers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Signers::Previous { version } => write!(f, "the keys of version {version}"),
            Signers::Own => f.write_str("its own keys"),
        }
    }
}

/// Why an approver set, a version of it or its store was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApproverSetError {
    /// A version file is not a well-formed approver-set file, or breaks a
    /// rule (threshold, distinct keys and labels, limits).
    #[error("{location}: not a valid approver-set version: {what}")]
    Malformed {
        /// The file.
        location: Location,
        /// What is wrong, naming the member.
        what: String,
    },

    /// A version file is larger than [`MAX_FILE_BYTES`](crate::MAX_FILE_BYTES).
    #[error(
        "{location}: {len} bytes, more than the {max} an approver-set version may have; this is not an approver-set file"
    )]
    TooLarge {
        /// The file.
        location: Location,
        /// Its size in bytes.
        len: u64,
        /// The limit.
        max: usize,
    },

    /// A new version (from `constle approvers init` or `next`) breaks a rule.
    #[error("cannot make this approver-set version: {what}")]
    Invalid {
        /// What is wrong.
        what: String,
    },

    /// Version 1 is not the one the Agentfile pins.
    #[error(
        "{location}: version 1 has digest {found}, but the Agentfile pins {expected}; this is not the approver set the Agentfile names (check `constle approvers show` and the pin)"
    )]
    PinMismatch {
        /// The file.
        location: Location,
        /// The pinned digest.
        expected: SetDigest,
        /// Version 1's digest.
        found: SetDigest,
    },

    /// A file's `version` is not the one its place in the chain calls for.
    #[error(
        "{location}: holds version {found} where version {expected} must be; versions go 1, 2, 3… with none skipped"
    )]
    WrongVersion {
        /// The file.
        location: Location,
        /// The version its place requires.
        expected: u64,
        /// The version it holds.
        found: u64,
    },

    /// Too few valid signatures by the keys that must sign a version.
    #[error(
        "{location}: version {version} is signed by {valid} of {signers} ({counted}), it needs {threshold}; it is not in force (sign it with `constle approvers sign`)"
    )]
    UnderSigned {
        /// The file.
        location: Location,
        /// The version.
        version: u64,
        /// Whose signatures are short.
        signers: Signers,
        /// Distinct keys of those whose signatures verify.
        valid: usize,
        /// The threshold that applies.
        threshold: usize,
        /// Labels of the keys that counted, for the message.
        counted: String,
    },

    /// The newest version has expired.
    #[error(
        "{location}: version {version} of the approver set expired at {expires}; an expired set approves nothing: make version {} with `constle approvers next` and have it signed",
        version + 1
    )]
    Expired {
        /// The file.
        location: Location,
        /// The version.
        version: u64,
        /// When it expired.
        expires: Timestamp,
    },

    /// The set directory has no `1.approvers.json`.
    #[error(
        "{}: no 1.approvers.json; the approver set starts with version 1 (make it with `constle approvers init`)",
        dir.display()
    )]
    NoFirstVersion {
        /// The set directory.
        dir: PathBuf,
    },

    /// The set directory skips a version number.
    #[error(
        "{}: holds {found}.approvers.json but not {missing}.approvers.json; versions go 1, 2, 3… and none may be missing",
        dir.display()
    )]
    Gap {
        /// The directory.
        dir: PathBuf,
        /// The first missing version.
        missing: u64,
        /// A higher version present.
        found: u64,
    },

    /// A file name that looks like a version but is not spelled as one
    /// (`01.approvers.json`, `0.approvers.json`).
    #[error(
        "{}: not a version file name; versions are named N.approvers.json, N = 1, 2, 3… without leading zeros",
        path.display()
    )]
    BadName {
        /// The file.
        path: PathBuf,
    },

    /// A rollback: the store has accepted a higher version than the set
    /// directory offers.
    #[error(
        "version {seen} of this approver set was seen before; the set directory {} offers only version {offered}: an old set cannot be put back (a revoked key would be valid again). Put the newer versions back into the set directory; copies of every version accepted are in {}",
        set_dir.display(), store.display()
    )]
    Rollback {
        /// The highest version accepted before.
        seen: u64,
        /// The highest version the set directory offers.
        offered: u64,
        /// The set directory.
        set_dir: PathBuf,
        /// The store directory.
        store: PathBuf,
    },

    /// The set directory and the store hold two different versions with
    /// the same number, both validly signed.
    #[error(
        "{offered}: version {version} has digest {offered_digest}, but the version {version} accepted before ({}) has digest {seen_digest}; two different versions {version} were both signed, so neither is trusted: ask the approvers which one they meant",
        seen.display()
    )]
    Fork {
        /// The version number.
        version: u64,
        /// The set directory's file.
        offered: Location,
        /// Its digest.
        offered_digest: SetDigest,
        /// The store's copy.
        seen: PathBuf,
        /// The store copy's digest.
        seen_digest: SetDigest,
    },

    /// The store is damaged: a file that does not parse or chain, a
    /// version missing below a higher one, a directory others can reach.
    /// Never reset: the store is what refuses rollbacks.
    #[error(
        "the approver-set store {} is damaged: {why}; it is never reset, because it is what refuses an old set put back. Find out what changed it; only if you are sure, move the store directory away, and the set directory's versions are accepted afresh",
        path.display()
    )]
    StoreDamaged {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },

    /// A version file that must be new already exists.
    #[error(
        "{} already exists; versions are never overwritten (make the next one with `constle approvers next`)",
        path.display()
    )]
    Exists {
        /// The file.
        path: PathBuf,
    },

    /// A file operation failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The system's answer.
        #[source]
        source: std::io::Error,
    },
}

impl ApproverSetError {
    /// Whether this is an operational failure (a file could not be read
    /// or written) rather than a finding about the set itself.
    pub fn is_io(&self) -> bool {
        matches!(self, ApproverSetError::Io { .. })
    }

    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| ApproverSetError::Io { op, path, source }
    }
}
