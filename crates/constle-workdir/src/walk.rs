//! A walk of the work directory by descriptor: every directory is opened
//! relative to its parent without following a link, checked to be the
//! directory that was listed, and never left for another file system. What
//! is read is therefore what is judged, whatever names change meanwhile.
//!
//! Descriptors are held only along the path from the root to the
//! directory being read, so the walk needs as many as the tree is deep,
//! and refuses a tree deeper than [`MAX_DEPTH`](crate::bounds::MAX_DEPTH).

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};

use crate::bounds::MAX_DEPTH;
use crate::error::WorkdirError;

/// One entry of a directory.
pub(crate) struct Entry {
    pub name: CString,
    pub stat: FileStat,
}

impl Entry {
    pub fn kind(&self) -> SFlag {
        kind(&self.stat)
    }

    pub fn name_bytes(&self) -> &[u8] {
        self.name.to_bytes()
    }
}

pub(crate) fn kind(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT
}

/// A directory being read: its descriptor, its path below the root, its
/// entries (`.` and `..` left out), and what the visitor carried down to it.
pub(crate) struct Listing<'a, C> {
    pub fd: BorrowedFd<'a>,
    pub path: &'a Path,
    pub entries: &'a [Entry],
    pub context: &'a C,
}

impl<C> Listing<'_, C> {
    /// The path of entry `entry` below the root.
    pub fn path_of(&self, entry: &Entry) -> PathBuf {
        self.path.join(OsStr::from_bytes(entry.name_bytes()))
    }
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Opens the directory `name` in `dir`, provided it is still the directory
/// `expected` describes (the same device and inode).
pub(crate) fn open_subdir(
    dir: impl AsFd,
    name: &CString,
    expected: &FileStat,
) -> nix::Result<OwnedFd> {
    let fd = openat(dir, name.as_c_str(), DIR_FLAGS, Mode::empty())?;
    let st = fstat(&fd)?;
    match (st.st_dev, st.st_ino) == (expected.st_dev, expected.st_ino) {
        true => Ok(fd),
        false => Err(nix::errno::Errno::ESTALE),
    }
}

/// Walks the tree below `root` (a directory descriptor, at `path` below
/// the work directory), depth first. For each directory, `visit` sees its
/// listing and returns the subdirectories to go into (indices into the
/// entries; only those on the root's file system are read) and the context
/// each is read with.
pub(crate) fn walk<C>(
    root: &OwnedFd,
    path: &Path,
    root_context: C,
    mut visit: impl FnMut(&Listing<'_, C>) -> Result<Vec<(usize, C)>, WorkdirError>,
) -> Result<(), WorkdirError> {
    let device = fstat(root).map_err(|e| WorkdirError::io(path, e))?.st_dev;
    let root = root.try_clone().map_err(|e| WorkdirError::io(path, e))?;
    let mut stack = vec![Frame::read(
        root,
        path.to_path_buf(),
        root_context,
        device,
        &mut visit,
    )?];
    let mut depth = 1;
    while let Some(top) = stack.last_mut() {
        let Some((name, stat, path, context)) = top.pending.pop() else {
            stack.pop();
            depth -= 1;
            continue;
        };
        if depth > MAX_DEPTH {
            return Err(WorkdirError::TooDeep { path });
        }
        let fd = match open_subdir(&top.fd, &name, &stat) {
            Err(nix::errno::Errno::EACCES) => make_readable(&top.fd, &name, &stat)
                .and_then(|()| open_subdir(&top.fd, &name, &stat)),
            other => other,
        };
        let fd = fd.map_err(|e| WorkdirError::io(&path, e))?;
        let frame = Frame::read(fd, path, context, device, &mut visit)?;
        stack.push(frame);
        depth += 1;
    }
    Ok(())
}

/// Lets the owner read and search a directory it could not: one the agent
/// made so (in a run as an unprivileged user, whose files the agent's are).
fn make_readable(dir: &OwnedFd, name: &CString, stat: &FileStat) -> nix::Result<()> {
    let fd = crate::fsops::open_same(dir, name, stat)?;
    crate::fsops::chmod(&fd, (stat.st_mode | 0o700) & 0o7777).map_err(|e| {
        nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(nix::errno::Errno::EIO as i32))
    })
}

/// A directory read, with the subdirectories still to go into.
struct Frame<C> {
    fd: OwnedFd,
    pending: Vec<(CString, FileStat, PathBuf, C)>,
}

impl<C> Frame<C> {
    fn read(
        fd: OwnedFd,
        path: PathBuf,
        context: C,
        device: u64,
        visit: &mut impl FnMut(&Listing<'_, C>) -> Result<Vec<(usize, C)>, WorkdirError>,
    ) -> Result<Frame<C>, WorkdirError> {
        let entries = list(&fd).map_err(|e| WorkdirError::io(&path, e))?;
        let listing = Listing {
            fd: fd.as_fd(),
            path: &path,
            entries: &entries,
            context: &context,
        };
        let mut pending = Vec::new();
        for (index, sub) in visit(&listing)? {
            let entry = &entries[index];
            if entry.kind() == SFlag::S_IFDIR && entry.stat.st_dev == device {
                let at = listing.path_of(entry);
                pending.push((entry.name.clone(), entry.stat, at, sub));
            }
        }
        // Popped from the end: reverse, so the walk goes in listing order.
        pending.reverse();
        Ok(Frame { fd, pending })
    }
}

/// The entries of the directory `fd`, each with its status (links not
/// followed). An entry that vanished since it was listed is left out.
fn list(fd: &OwnedFd) -> nix::Result<Vec<Entry>> {
    let mut dir = Dir::from_fd(fd.try_clone().map_err(|_| nix::errno::Errno::EMFILE)?)?;
    let mut entries = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        match fstatat(fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => entries.push(Entry {
                name: name.to_owned(),
                stat,
            }),
            Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}
