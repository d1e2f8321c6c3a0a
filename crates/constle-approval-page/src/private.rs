//! The database's files are the serving user's alone: created `0600`, and
//! refused when anyone else can read or write them.
//!
//! SQLite creates a new database with mode `0644` (less the umask), so with
//! `--db` outside the private default directory the password hashes, CSRF
//! tokens and every request's arguments would be readable by every user.
//! It gives the `-wal` and `-shm` files the database's own mode and owner,
//! so creating the database `0600` before SQLite opens it makes all three
//! private.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use crate::StoreError;

/// Permission bits that let others read or write a file.
const SHARED: u32 = 0o066;

/// Creates `db` empty with mode `0600` if it does not exist yet.
pub(crate) fn create(db: &Path) -> Result<(), StoreError> {
    let created = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(db);
    match created {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(StoreError::Io {
            path: db.to_owned(),
            source,
        }),
    }
}

/// Refuses `db`, or its `-wal` or `-shm` file where they exist, when they
/// belong to another user or others may read or write them.
pub(crate) fn check(db: &Path) -> Result<(), StoreError> {
    let user = nix::unistd::geteuid().as_raw();
    for path in files(db) {
        let meta = match fs::metadata(&path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == io::ErrorKind::NotFound && path != db => continue,
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        if meta.uid() != user {
            let owner = meta.uid();
            return Err(StoreError::NotOwned { path, owner, user });
        }
        let mode = meta.mode() & 0o7777;
        if mode & SHARED != 0 {
            return Err(StoreError::NotPrivate { path, mode });
        }
    }
    Ok(())
}

/// The database and the two files SQLite keeps beside it in WAL mode.
pub(crate) fn files(db: &Path) -> [PathBuf; 3] {
    ["", "-wal", "-shm"].map(|suffix| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        name.into()
    })
}
