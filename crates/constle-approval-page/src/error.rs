//! The approver's errors.

use std::path::PathBuf;

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// SQLite said no.
    #[error("approver database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A file of the database (itself, or the `-wal` or `-shm` file SQLite
    /// keeps beside it) can be read or written by users other than its
    /// owner. It holds password hashes, session CSRF tokens and every
    /// gated call's arguments, so it is not opened.
    #[error(
        "approver database file {} has mode {mode:04o}: other users can read or write it, and it holds password hashes, session CSRF tokens and the arguments of every gated call; run `chmod 600 {}` and start again",
        .path.display(),
        .path.display()
    )]
    NotPrivate {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A file of the database belongs to another user, who can read and
    /// replace it.
    #[error(
        "approver database file {} belongs to uid {owner}, not to uid {user} that runs the approver; run the approver as its owner, or give it to this user (`chown`), and start again",
        .path.display()
    )]
    NotOwned {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Who runs the approver.
        user: u32,
    },
    /// The database was written by a newer approver, whose schema this one
    /// does not know; it is not touched.
    #[error(
        "approver database has schema version {found}, newer than the {known} this constle approver knows: it was written by a newer constle; run that one, or give this one another --db"
    )]
    NewerSchema {
        /// The database's `user_version`.
        found: i64,
        /// The newest this code knows.
        known: i64,
    },
    /// A file of the database could not be created or examined.
    #[error("approver database file {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
}
