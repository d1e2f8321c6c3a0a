//! Where executable configuration the agent left is set aside: a directory
//! outside the work directory (under `$CONSTLE_HOME`), mode 0700, where
//! each entry keeps its path below the work directory. Nothing there is
//! run by anything, and nothing is lost: an entry is renamed there when the
//! quarantine is on the same file system, else copied (and synced) before
//! it is removed from the work directory.

use std::ffi::{CStr, CString, OsStr};
use std::io::Write as _;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, readlinkat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

use crate::error::WorkdirError;
use crate::fsops;
use crate::snapshot::{self, Saved};
use crate::walk::Entry;

/// The most one run's quarantine copies from another file system. Past
/// it, what the agent left is removed rather than kept, so that planted
/// files cannot fill the file system holding `$CONSTLE_HOME` and the audit
/// log (on the same file system, entries are renamed, which costs no
/// space).
pub(crate) const MAX_COPIED: u64 = 256 << 20;

/// Whether an entry set aside is kept in the quarantine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    Kept,
    /// Past [`MAX_COPIED`]: removed from the work directory, not kept.
    Removed,
}

/// The quarantine of one run, made when first needed.
pub(crate) struct Quarantine<'a> {
    root: &'a Path,
    made: bool,
    /// Bytes copied so far from another file system.
    copied: u64,
}

impl<'a> Quarantine<'a> {
    pub(crate) fn new(root: &'a Path) -> Quarantine<'a> {
        Quarantine {
            root,
            made: false,
            copied: 0,
        }
    }

    /// The quarantine's path, once anything was set aside.
    pub(crate) fn used(&self) -> Option<PathBuf> {
        self.made.then(|| self.root.to_path_buf())
    }

    /// Moves `entry` of `dir` (at `path` below the work directory) into the
    /// quarantine. A FIFO, socket or device holds nothing to keep and is
    /// removed; so is a file that would take the copies from another file
    /// system past [`MAX_COPIED`].
    pub(crate) fn take(
        &mut self,
        dir: BorrowedFd<'_>,
        entry: &Entry,
        path: &Path,
    ) -> Result<Taken, WorkdirError> {
        let failed = |e: std::io::Error| WorkdirError::io(path, e);
        let (into, name) = self.place_for(path)?;
        let fd = fsops::open_same(dir, &entry.name, &entry.stat).map_err(|e| failed(e.into()))?;
        let same_device = fstat(&into).map_err(|e| failed(e.into()))?.st_dev == entry.stat.st_dev;
        if same_device {
            return renameat(dir, entry.name.as_c_str(), &into, name.as_c_str())
                .map(|()| Taken::Kept)
                .map_err(|e| failed(e.into()));
        }
        let size = u64::try_from(entry.stat.st_size).unwrap_or(u64::MAX);
        let taken = match self.copied.saturating_add(size) > MAX_COPIED {
            true if entry.kind() == SFlag::S_IFREG => Taken::Removed,
            _ => Taken::Kept,
        };
        match entry.kind() {
            SFlag::S_IFREG if taken == Taken::Kept => {
                copy_file(dir, entry, &into, &name).map_err(failed)?;
                self.copied += size;
            }
            SFlag::S_IFLNK => {
                let target =
                    readlinkat(dir, entry.name.as_c_str()).map_err(|e| failed(e.into()))?;
                symlinkat(target.as_os_str(), &into, name.as_c_str())
                    .map_err(|e| failed(e.into()))?;
            }
            _ => {}
        }
        drop(fd);
        unlinkat(dir, entry.name.as_c_str(), UnlinkatFlags::NoRemoveDir)
            .map(|()| taken)
            .map_err(|e| failed(e.into()))
    }

    /// The directory in the quarantine for `path`, made as needed, and the
    /// name there.
    fn place_for(&mut self, path: &Path) -> Result<(OwnedFd, CString), WorkdirError> {
        let failed = |e: std::io::Error| WorkdirError::io(self.root, e);
        if !self.made {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(self.root)
                .map_err(failed)?;
            self.made = true;
        }
        let parent = self.root.join(path.parent().unwrap_or(Path::new("")));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&parent)
            .map_err(failed)?;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let into = nix::fcntl::open(&parent, flags, Mode::empty()).map_err(|e| failed(e.into()))?;
        let name = path.file_name().unwrap_or(OsStr::new("entry"));
        Ok((into, fsops::cstring(name).map_err(|e| failed(e.into()))?))
    }
}

/// Copies the regular file `entry` of `dir` to `name` in `into`, with its
/// permission bits, and syncs it.
fn copy_file(
    dir: BorrowedFd<'_>,
    entry: &Entry,
    into: &OwnedFd,
    name: &CStr,
) -> std::io::Result<()> {
    let from = open_for_copy(dir, entry)?;
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let to = openat(into, name, flags, Mode::from_bits_truncate(0o600))?;
    let mut to = std::fs::File::from(to);
    std::io::copy(&mut std::fs::File::from(from), &mut to)?;
    nix::sys::stat::fchmod(&to, Mode::from_bits_truncate(entry.stat.st_mode & 0o777))?;
    to.flush()?;
    to.sync_all()
}

/// The file opened for reading; one its owner cannot read (the agent made
/// it so) is made readable to its owner first.
fn open_for_copy(dir: BorrowedFd<'_>, entry: &Entry) -> std::io::Result<OwnedFd> {
    match snapshot::open_regular(dir, entry) {
        Err(Errno::EACCES) => {
            let fd = fsops::open_same(dir, &entry.name, &entry.stat)?;
            fsops::chmod(&fd, (entry.stat.st_mode | 0o400) & 0o7777)?;
            Ok(snapshot::open_regular(dir, entry)?)
        }
        other => Ok(other?),
    }
}

/// Puts `saved`, what was at `name` in `dir` before the run, back there
/// (the name is free: what the agent left was set aside).
pub(crate) fn restore(
    dir: BorrowedFd<'_>,
    name: &CStr,
    saved: &Saved,
    path: &Path,
) -> Result<bool, WorkdirError> {
    let failed = |e: Errno| WorkdirError::io(path, e);
    match saved {
        Saved::File {
            bytes,
            mode,
            uid,
            gid,
        } => {
            let tmp = fsops::write_new(dir, bytes, *mode, Some((*uid, *gid))).map_err(failed)?;
            renameat(dir, tmp.as_c_str(), dir, name).map_err(failed)?;
            Ok(true)
        }
        Saved::Link(target) => {
            symlinkat(OsStr::from_bytes(target), dir, name).map_err(failed)?;
            Ok(true)
        }
        Saved::Other => Ok(false),
    }
}

/// Writes `bytes` in place of `entry` of `dir`, which is moved into the
/// quarantine: the rewritten file gets the entry's owner and permission
/// bits (without group or others' write).
pub(crate) fn replace(
    quarantine: &mut Quarantine<'_>,
    dir: BorrowedFd<'_>,
    entry: &Entry,
    path: &Path,
    bytes: &[u8],
) -> Result<(), WorkdirError> {
    let st: &FileStat = &entry.stat;
    let mode = st.st_mode & 0o777 & !snapshot::OTHERS_WRITE;
    let tmp = fsops::write_new(dir, bytes, mode, Some((st.st_uid, st.st_gid)))
        .map_err(|e| WorkdirError::io(path, e))?;
    if let Err(err) = quarantine.take(dir, entry, path) {
        let _ = unlinkat(dir, tmp.as_c_str(), UnlinkatFlags::NoRemoveDir);
        return Err(err);
    }
    renameat(dir, tmp.as_c_str(), dir, entry.name.as_c_str()).map_err(|e| WorkdirError::io(path, e))
}
