//! Atomic, durable replacement of a small file: a reader, or the next run
//! after a crash, finds the old file or the whole new one, never a mix.
//!
//! Every way in takes the same steps: a temporary file in the target's
//! directory, created with the caller's mode and set to it exactly
//! (whatever the umask took away) before the bytes are written; the bytes;
//! `fsync`; a rename over the target (or, for [`create_new`], a rename
//! that fails if the target exists); an `fsync` of the directory, so that
//! the rename itself survives a crash. A step that fails leaves the target
//! as it was, removes the temporary file, and says which step failed on
//! which path ([`ReplaceError::Io`]).
//!
//! The temporary file is [`tempfile`]'s, under a fresh random name
//! (`.<name>.XXXXXX.tmp`), except for [`replace_via`]: a fixed name, for
//! a store that writes one file at a time under a lock of its own, so that
//! what a crash leaves is one known file, taken over by the next write.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use tempfile::{NamedTempFile, TempPath};

use crate::error::{FSYNC_DIR, ReplaceError};

/// Replaces `path` with `bytes`, mode `mode`, through a temporary file of
/// a fresh name beside it. Returns the new file.
///
/// # Errors
///
/// [`ReplaceError::Io`] naming the step and the path that failed.
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> Result<File, ReplaceError> {
    put(fresh_temp(path, mode)?, path, bytes, mode, Place::Over)
}

/// Replaces `path` with `bytes`, mode `mode`, through the temporary file
/// `temp_name` in its directory. Returns the new file.
///
/// Only for a caller that holds a lock of its own for the whole write:
/// whatever is at `temp_name` is taken for a crash's leftover and removed
/// first (a link there is removed, never followed).
///
/// # Errors
///
/// [`ReplaceError::Io`] naming the step and the path that failed.
pub fn replace_via(
    path: &Path,
    temp_name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<File, ReplaceError> {
    let temp = named_temp(&dir_of(path).join(temp_name), mode)?;
    put(temp, path, bytes, mode, Place::Over)
}

/// Writes `bytes` as the new file `path`, mode `mode`, never replacing
/// one: the temporary file is renamed into place only if the name is
/// free. Returns the new file.
///
/// # Errors
///
/// [`ReplaceError::Exists`] if `path` exists (it is left alone), or
/// [`ReplaceError::Io`] naming the step and the path that failed.
pub fn create_new(path: &Path, bytes: &[u8], mode: u32) -> Result<File, ReplaceError> {
    put(fresh_temp(path, mode)?, path, bytes, mode, Place::New)
}

/// Whether the temporary file may be renamed over a file already there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Over,
    New,
}

/// The directory `path` is in.
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// A new temporary file beside `path`, under a fresh random name.
fn fresh_temp(path: &Path, mode: u32) -> Result<NamedTempFile, ReplaceError> {
    let dir = dir_of(path);
    let Some(name) = path.file_name() else {
        let none = io::Error::new(io::ErrorKind::InvalidInput, "the path names no file");
        return Err(ReplaceError::at("create a temporary file for", path)(none));
    };
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .permissions(Permissions::from_mode(mode))
        .tempfile_in(dir)
        .map_err(ReplaceError::at("create a temporary file in", dir))
}

/// The temporary file `temp`, created afresh: what is there is removed
/// first, so that neither its mode nor a link planted there is kept.
fn named_temp(temp: &Path, mode: u32) -> Result<NamedTempFile, ReplaceError> {
    match std::fs::remove_file(temp) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => {
            return Err(ReplaceError::at("remove the leftover", temp)(err));
        }
        _ => {}
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(temp)
        .map_err(ReplaceError::at("create", temp))?;
    // Removed again if a later step fails, like a fresh one.
    let owned = TempPath::try_from_path(temp).map_err(|err| {
        let _ = std::fs::remove_file(temp);
        ReplaceError::at("create", temp)(err)
    })?;
    Ok(NamedTempFile::from_parts(file, owned))
}

/// Sets the mode, writes, syncs and renames `temp` into place at `path`,
/// then syncs the directory. `temp` is removed if any step before the
/// rename fails.
fn put(
    mut temp: NamedTempFile,
    path: &Path,
    bytes: &[u8],
    mode: u32,
    place: Place,
) -> Result<File, ReplaceError> {
    let at = temp.path().to_owned();
    temp.as_file()
        .set_permissions(Permissions::from_mode(mode))
        .map_err(ReplaceError::at("chmod", &at))?;
    temp.write_all(bytes)
        .map_err(ReplaceError::at("write", &at))?;
    temp.as_file()
        .sync_all()
        .map_err(ReplaceError::at("fsync", &at))?;
    let placed = match place {
        Place::Over => temp.persist(path),
        Place::New => temp.persist_noclobber(path),
    };
    // A `PersistError` owns the temporary file: dropping it removes it.
    let file = placed.map_err(|failed| match failed.error.kind() {
        io::ErrorKind::AlreadyExists if place == Place::New => ReplaceError::Exists {
            path: path.to_owned(),
        },
        _ => ReplaceError::at("rename into place", path)(failed.error),
    })?;
    let dir = dir_of(path);
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(ReplaceError::at(FSYNC_DIR, dir))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::MetadataExt as _;
    use std::path::PathBuf;

    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    /// A directory holding `file` with "old" in it.
    fn with_old_file() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        fs::write(&file, "old").unwrap();
        (dir, file)
    }

    #[test]
    fn content_and_mode_are_the_new_ones() {
        let (dir, file) = with_old_file();
        for mode in [0o600, 0o644, 0o400] {
            replace(&file, b"new", mode).unwrap();
            assert_eq!(fs::read(&file).unwrap(), b"new");
            assert_eq!(super::tests::mode(&file), mode);
        }
        replace_via(&file, "file.tmp", b"newer", 0o640).unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"newer");
        assert_eq!(super::tests::mode(&file), 0o640);
        assert_eq!(names(dir.path()), ["file"]);
    }

    #[test]
    fn the_returned_file_is_the_one_in_place() {
        let (_dir, file) = with_old_file();
        let written = replace(&file, b"new", 0o600).unwrap();
        let (held, placed) = (written.metadata().unwrap(), fs::metadata(&file).unwrap());
        assert_eq!((held.dev(), held.ino()), (placed.dev(), placed.ino()));
    }

    #[test]
    fn a_bare_name_is_in_the_current_directory() {
        assert_eq!(dir_of(Path::new("bare")), Path::new("."));
        assert_eq!(dir_of(Path::new("/a/b")), Path::new("/a"));
    }

    #[test]
    fn a_failed_rename_keeps_the_old_file_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory cannot be renamed over (works as root).
        let target = dir.path().join("target");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("kept"), "old").unwrap();
        let ways: [&dyn Fn() -> Result<File, ReplaceError>; 2] =
            [&|| replace(&target, b"new", 0o600), &|| {
                replace_via(&target, "target.tmp", b"new", 0o600)
            }];
        for way in ways {
            let err = way().unwrap_err();
            assert!(
                matches!(&err, ReplaceError::Io { step: "rename into place", path, .. } if *path == target),
                "{err}"
            );
            assert!(
                err.to_string().contains(&*target.to_string_lossy()),
                "{err}"
            );
            assert_eq!(fs::read(target.join("kept")).unwrap(), b"old");
            assert_eq!(names(dir.path()), ["target"]);
        }
    }

    #[test]
    fn a_vanished_directory_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let file = gone.join("file");
        let err = replace(&file, b"new", 0o600).unwrap_err();
        assert!(
            matches!(&err, ReplaceError::Io { path, source, .. }
                if *path == gone && source.kind() == io::ErrorKind::NotFound),
            "{err}"
        );
        let err = replace_via(&file, "file.tmp", b"new", 0o600).unwrap_err();
        assert_eq!(err.path(), gone.join("file.tmp"), "{err}");
        assert!(!gone.exists());
    }

    #[test]
    fn a_read_only_directory_keeps_the_old_file() {
        let (dir, file) = with_old_file();
        if fs::metadata(&file).unwrap().uid() == 0 {
            // Root writes into a read-only directory; the rename test
            // covers a failure after the temporary file exists.
            return;
        }
        fs::set_permissions(dir.path(), Permissions::from_mode(0o500)).unwrap();
        let fresh = replace(&file, b"new", 0o600).map(drop);
        let named = replace_via(&file, "file.tmp", b"new", 0o600).map(drop);
        fs::set_permissions(dir.path(), Permissions::from_mode(0o700)).unwrap();
        for err in [fresh.unwrap_err(), named.unwrap_err()] {
            assert!(matches!(err, ReplaceError::Io { .. }), "{err}");
        }
        assert_eq!(fs::read(&file).unwrap(), b"old");
        assert_eq!(names(dir.path()), ["file"]);
    }

    #[test]
    fn a_leftover_at_the_fixed_name_is_replaced_never_followed() {
        let (dir, file) = with_old_file();
        let temp = dir.path().join("file.tmp");
        fs::write(&temp, "torn").unwrap();
        fs::set_permissions(&temp, Permissions::from_mode(0o666)).unwrap();
        replace_via(&file, "file.tmp", b"new", 0o600).unwrap();
        assert_eq!(super::tests::mode(&file), 0o600);
        let outside = dir.path().join("outside");
        std::os::unix::fs::symlink(&outside, &temp).unwrap();
        replace_via(&file, "file.tmp", b"newer", 0o600).unwrap();
        assert!(!outside.exists());
        assert_eq!(fs::read(&file).unwrap(), b"newer");
        assert_eq!(names(dir.path()), ["file"]);
    }

    #[test]
    fn what_cannot_be_removed_at_the_fixed_name_is_left_and_named() {
        let (dir, file) = with_old_file();
        let temp = dir.path().join("file.tmp");
        fs::create_dir(&temp).unwrap();
        let err = replace_via(&file, "file.tmp", b"new", 0o600).unwrap_err();
        assert!(
            matches!(&err, ReplaceError::Io { step: "remove the leftover", path, .. } if *path == temp),
            "{err}"
        );
        assert!(temp.is_dir());
        assert_eq!(fs::read(&file).unwrap(), b"old");
    }

    #[test]
    fn a_new_file_never_replaces_one() {
        let (dir, file) = with_old_file();
        let err = create_new(&file, b"new", 0o600).unwrap_err();
        assert!(
            matches!(&err, ReplaceError::Exists { path } if *path == file),
            "{err}"
        );
        assert_eq!(err.into_io().kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&file).unwrap(), b"old");
        assert_eq!(names(dir.path()), ["file"]);

        let other = dir.path().join("other");
        create_new(&other, b"new", 0o644).unwrap();
        assert_eq!(fs::read(&other).unwrap(), b"new");
        assert_eq!(super::tests::mode(&other), 0o644);
        assert_eq!(names(dir.path()), ["file", "other"]);
    }
}
