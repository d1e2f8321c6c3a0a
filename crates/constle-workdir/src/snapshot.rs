//! Before the run: what the check after it compares with, and what is
//! refused or kept from the agent.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use constle_hostids::KEEPER_ID;
use nix::fcntl::{OFlag, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat};

use crate::Acting;
use crate::bounds::MAX_SAVED_BYTES;
use crate::error::WorkdirError;
use crate::fsops;
use crate::git;
use crate::place::{self, Class, Place};
use crate::walk::{self, Entry, Listing};

/// An inode: device and number.
pub(crate) type Inode = (u64, u64);

pub(crate) fn inode(st: &FileStat) -> Inode {
    (st.st_dev, st.st_ino)
}

/// Permission bits that let group or others write.
pub(crate) const OTHERS_WRITE: u32 = 0o022;
/// The set-user-ID and set-group-ID bits.
pub(crate) const SETID: u32 = 0o6000;

/// Executable configuration as it was before the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Saved {
    File {
        bytes: Vec<u8>,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Link(Vec<u8>),
    /// Something else (a directory where a file is expected, a FIFO), or a
    /// file this user could not read: compared by kind only.
    Other,
}

/// The work directory before the run.
#[derive(Debug)]
pub(crate) struct Before {
    /// How the root's entries are read: [`Place::Plain`] for a work
    /// directory, [`Place::Home`] for a kept home.
    pub place: Place,
    /// The root's device and inode, owner and permission bits.
    pub inode: Inode,
    pub owner: (u32, u32),
    pub root_mode: u32,
    /// Inodes writable by group or others before the run.
    pub open: HashSet<Inode>,
    /// Regular files' set-id bits before the run.
    pub setid: HashMap<Inode, u32>,
    /// Executable configuration, by path below the work directory.
    pub saved: BTreeMap<PathBuf, Saved>,
    /// Directories a repository's `core.hooksPath` names.
    pub hooks: BTreeSet<PathBuf>,
    /// How many of the owner's read-only entries were kept from the agent.
    pub frozen: usize,
    /// How many entries a killed run had kept from its agent, given back.
    pub recovered: usize,
}

/// What the walk before the run gathers besides [`Before`].
#[derive(Default)]
struct Gathered {
    /// Regular files with other names: inode → (links, names seen, a path).
    linked: HashMap<Inode, (u64, u64, PathBuf)>,
    /// The owner's read-only entries: their directory, name and status.
    read_only: Vec<(PathBuf, CString, FileStat)>,
    /// Entries a killed run left with the keeper.
    orphans: Vec<(PathBuf, CString, FileStat)>,
    saved_bytes: usize,
}

impl Before {
    pub(crate) fn take(
        root: &OwnedFd,
        path: &Path,
        acting: Acting,
        place: Place,
    ) -> Result<Before, WorkdirError> {
        let st = fstat(root).map_err(|e| WorkdirError::io(path, e))?;
        if st.st_uid == KEEPER_ID {
            return Err(WorkdirError::Orphaned {
                path: path.to_path_buf(),
                uid: KEEPER_ID,
            });
        }
        let mut before = Before {
            place,
            inode: inode(&st),
            owner: (st.st_uid, st.st_gid),
            root_mode: st.st_mode & 0o7777,
            open: HashSet::new(),
            setid: HashMap::new(),
            saved: BTreeMap::new(),
            hooks: BTreeSet::new(),
            frozen: 0,
            recovered: 0,
        };
        let acts_as = match acting {
            Acting::Owner => st.st_uid,
            Acting::User(uid) => uid,
        };
        let mut gathered = Gathered::default();
        before.read(root, acts_as, &mut gathered)?;
        before.hooks = hooks_paths(&before.saved, root);
        for dir in before.hooks.clone() {
            if let Ok(fd) = fsops::open_dir_below(root, &dir) {
                gathered.saved_bytes += before.save_hooks(&fd, &dir)?;
            }
        }
        refuse_outside_links(path, &gathered.linked)?;
        if gathered.saved_bytes > MAX_SAVED_BYTES {
            return Err(WorkdirError::TooMuchConfig);
        }
        before.recovered = give_back(root, &gathered.orphans, before.owner.0)?;
        if acting == Acting::Owner {
            before.frozen = freeze(root, &gathered.read_only, before.owner.0)?;
        }
        Ok(before)
    }

    /// Reads the whole tree.
    fn read(
        &mut self,
        root: &OwnedFd,
        acts_as: u32,
        gathered: &mut Gathered,
    ) -> Result<(), WorkdirError> {
        let no_hooks = BTreeSet::new();
        walk::walk(root, Path::new(""), self.place, |listing| {
            let (classes, subdirs) = place::classify(listing, &no_hooks);
            for (entry, class) in listing.entries.iter().zip(classes) {
                self.note(listing, entry, class, acts_as, gathered)?;
            }
            Ok(subdirs)
        })
    }

    /// Saves what a `core.hooksPath` directory (at `at`) holds, which the
    /// walk of the whole tree read as ordinary files; returns the bytes.
    fn save_hooks(&mut self, dir: &OwnedFd, at: &Path) -> Result<usize, WorkdirError> {
        let mut bytes = 0;
        walk::walk(dir, at, Place::Hooks, |listing| {
            let (_, subdirs) = place::classify(listing, &BTreeSet::new());
            for entry in listing.entries {
                bytes += self.save_entry(listing, entry)?;
            }
            Ok(subdirs)
        })?;
        Ok(bytes)
    }

    /// Keeps a copy of an entry of executable configuration; returns the
    /// bytes kept.
    fn save_entry(
        &mut self,
        listing: &Listing<'_, Place>,
        entry: &Entry,
    ) -> Result<usize, WorkdirError> {
        if entry.kind() == SFlag::S_IFDIR {
            return Ok(0);
        }
        let path = listing.path_of(entry);
        let saved = save(listing.fd, entry).map_err(|e| WorkdirError::io(&path, e))?;
        let bytes = match &saved {
            Saved::File { bytes, .. } => bytes.len(),
            _ => 0,
        };
        self.saved.insert(path, saved);
        Ok(bytes)
    }

    fn note(
        &mut self,
        listing: &Listing<'_, Place>,
        entry: &Entry,
        class: Class,
        acts_as: u32,
        gathered: &mut Gathered,
    ) -> Result<(), WorkdirError> {
        let st = &entry.stat;
        let kind = entry.kind();
        if kind != SFlag::S_IFLNK && st.st_mode & OTHERS_WRITE != 0 {
            self.open.insert(inode(st));
        }
        if kind == SFlag::S_IFREG && st.st_mode & SETID != 0 {
            self.setid.insert(inode(st), st.st_mode & SETID);
        }
        if kind == SFlag::S_IFREG && st.st_nlink > 1 && st.st_uid == acts_as {
            let seen = gathered
                .linked
                .entry(inode(st))
                .or_insert_with(|| (st.st_nlink, 0, listing.path_of(entry)));
            seen.1 += 1;
        }
        let here = || (listing.path.to_path_buf(), entry.name.clone(), *st);
        if st.st_uid == KEEPER_ID {
            gathered.orphans.push(here());
        } else if st.st_uid == self.owner.0
            && st.st_mode & 0o200 == 0
            && matches!(kind, SFlag::S_IFREG | SFlag::S_IFDIR)
        {
            gathered.read_only.push(here());
        }
        if class != Class::Plain {
            gathered.saved_bytes += self.save_entry(listing, entry)?;
        }
        Ok(())
    }
}

/// A copy of the entry, to compare with and put back. A file bigger than
/// what may be kept is read no further than that (the caller refuses).
pub(crate) fn save(dir: impl AsFd, entry: &Entry) -> nix::Result<Saved> {
    let st = &entry.stat;
    match entry.kind() {
        SFlag::S_IFLNK => Ok(Saved::Link(
            readlinkat(dir, entry.name.as_c_str())?.into_encoded_bytes(),
        )),
        SFlag::S_IFREG => match read_bounded(dir, entry, MAX_SAVED_BYTES + 1) {
            Ok(bytes) => Ok(Saved::File {
                bytes,
                mode: st.st_mode & 0o7777,
                uid: st.st_uid,
                gid: st.st_gid,
            }),
            Err(nix::errno::Errno::EACCES) => Ok(Saved::Other),
            Err(e) => Err(e),
        },
        _ => Ok(Saved::Other),
    }
}

/// The regular file `entry` of `dir`, opened for reading without following
/// a link (nor blocking on a FIFO swapped in), checked to be that inode.
pub(crate) fn open_regular(dir: impl AsFd, entry: &Entry) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = openat(dir, entry.name.as_c_str(), flags, Mode::empty())?;
    match inode(&fstat(&fd)?) == inode(&entry.stat) {
        true => Ok(fd),
        false => Err(nix::errno::Errno::ESTALE),
    }
}

/// Up to `limit` bytes of the regular file `entry` in `dir`.
pub(crate) fn read_bounded(dir: impl AsFd, entry: &Entry, limit: usize) -> nix::Result<Vec<u8>> {
    use std::io::Read as _;
    let fd = open_regular(dir, entry)?;
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(limit as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(nix::errno::Errno::EIO as i32))
        })?;
    Ok(bytes)
}

/// The directories inside the work directory that the saved git
/// configuration files name as `core.hooksPath`.
fn hooks_paths(saved: &BTreeMap<PathBuf, Saved>, root: &OwnedFd) -> BTreeSet<PathBuf> {
    let git = git::find_git();
    let root_path = fsops::real_path(root);
    let mut found = BTreeSet::new();
    for (path, saved) in saved {
        let Saved::File { bytes, .. } = saved else {
            continue;
        };
        if !matches!(
            path.file_name().map(OsStr::as_bytes),
            Some(b"config" | b"config.worktree")
        ) {
            continue;
        }
        for value in git::hooks_path(git.as_deref(), bytes) {
            if let Some(dir) = resolve_hooks(path, &value, root_path.as_deref()) {
                found.insert(dir);
            }
        }
    }
    found
}

/// Where `value`, a `core.hooksPath` in the configuration file `config`,
/// points below the work directory (at `root`), if it does: relative to
/// the worktree (the directory holding `.git`), or to a bare repository.
fn resolve_hooks(config: &Path, value: &[u8], root: Option<&Path>) -> Option<PathBuf> {
    let value = Path::new(OsStr::from_bytes(value));
    let gitdir = config.parent()?;
    let base = match gitdir.file_name().map(OsStr::as_bytes) {
        Some(b".git") => gitdir.parent()?,
        _ => gitdir,
    };
    let joined = match value.strip_prefix(root?) {
        Ok(inside) if value.is_absolute() => inside.to_path_buf(),
        _ if value.is_absolute() => return None,
        _ => base.join(value),
    };
    normalise(&joined)
}

/// `path` with `.` and `..` resolved lexically; `None` when it leaves the
/// work directory.
fn normalise(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Refuses files the agent could change that have names outside the work
/// directory: more links than names found in it.
fn refuse_outside_links(
    path: &Path,
    linked: &HashMap<Inode, (u64, u64, PathBuf)>,
) -> Result<(), WorkdirError> {
    let mut outside: Vec<&PathBuf> = linked
        .values()
        .filter(|(links, seen, _)| seen < links)
        .map(|(.., p)| p)
        .collect();
    if outside.is_empty() {
        return Ok(());
    }
    outside.sort();
    let listed: Vec<String> = outside
        .iter()
        .take(5)
        .map(|p| constle_escape::escape(&p.to_string_lossy()))
        .collect();
    let more = outside.len().saturating_sub(5);
    Err(WorkdirError::HardLinks {
        path: path.to_path_buf(),
        count: outside.len(),
        listed: match more {
            0 => listed.join(", "),
            n => format!("{}, and {n} more", listed.join(", ")),
        },
    })
}

/// Gives `entries` the owner `uid`, each the very inode that was listed
/// and still held by `from`; returns how many were changed.
fn chown_listed(
    root: &OwnedFd,
    entries: &[(PathBuf, CString, FileStat)],
    from: u32,
    to: u32,
) -> Result<usize, WorkdirError> {
    let mut changed = 0;
    for (dir, name, st) in entries {
        let at = dir.join(OsStr::from_bytes(name.as_bytes()));
        let failed = |e| WorkdirError::io(&at, e);
        let parent = fsops::open_dir_below(root, dir).map_err(failed)?;
        let fd = fsops::open_same(&parent, name, st).map_err(failed)?;
        if fstat(&fd).map_err(failed)?.st_uid == from {
            fsops::chown(&fd, to, None).map_err(failed)?;
            changed += 1;
        }
    }
    Ok(changed)
}

fn freeze(
    root: &OwnedFd,
    read_only: &[(PathBuf, CString, FileStat)],
    owner: u32,
) -> Result<usize, WorkdirError> {
    chown_listed(root, read_only, owner, KEEPER_ID).inspect_err(|_| {
        let _ = chown_listed(root, read_only, KEEPER_ID, owner);
    })
}

fn give_back(
    root: &OwnedFd,
    orphans: &[(PathBuf, CString, FileStat)],
    owner: u32,
) -> Result<usize, WorkdirError> {
    chown_listed(root, orphans, KEEPER_ID, owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_paths_resolve_inside_the_work_directory_only() {
        let root = Some(Path::new("/srv/work"));
        let cfg = Path::new("repo/.git/config");
        let at = |v: &str| resolve_hooks(cfg, v.as_bytes(), root);
        assert_eq!(at(".husky/_"), Some(PathBuf::from("repo/.husky/_")));
        assert_eq!(at("../shared/hooks"), Some(PathBuf::from("shared/hooks")));
        assert_eq!(at("/srv/work/hooks"), Some(PathBuf::from("hooks")));
        assert_eq!(at("/etc/hooks"), None);
        assert_eq!(at("../../../outside"), None);
        let bare = Path::new("bare.git/config");
        assert_eq!(
            resolve_hooks(bare, b"hooks2", root),
            Some(PathBuf::from("bare.git/hooks2"))
        );
    }
}
