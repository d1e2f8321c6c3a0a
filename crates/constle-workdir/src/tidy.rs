//! After the run: the work directory put right, and a report of every
//! change.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use constle_hostids::KEEPER_ID;
use nix::sys::stat::{FileStat, SFlag, fstat};

use crate::error::WorkdirError;
use crate::fsops;
use crate::git::{self, Review};
use crate::place::{self, Class, Place};
use crate::quarantine::{self, Quarantine, Taken};
use crate::snapshot::{self, Before, OTHERS_WRITE, SETID, Saved, inode};
use crate::walk::{self, Entry, Listing};

/// The largest git configuration file read to review it; a larger one is
/// set aside whole.
const MAX_GIT_CONFIG: usize = 1 << 20;

/// What was done to one entry of executable configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The agent made it: moved into the quarantine.
    Moved,
    /// The agent changed it: its version moved into the quarantine, the one
    /// from before the run put back.
    Restored,
    /// A git configuration file the agent added settings to that are not
    /// allowed: the file as it left it moved into the quarantine, and
    /// rewritten without these settings.
    Rewritten {
        /// The settings removed, as git names them (`core.fsmonitor`).
        removed: Vec<String>,
    },
}

/// One entry set aside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetAside {
    /// Its path below the work directory (and in the quarantine).
    pub path: PathBuf,
    /// What it is: "VS Code workspace settings", "git hook", ….
    pub what: &'static str,
    /// What was done.
    pub action: Action,
    /// Whether what the agent left is in the quarantine; `false`: it was
    /// removed instead, as the quarantine is on another file system and
    /// this run had copied 256 MiB there already.
    pub kept: bool,
}

/// Everything the check after a run changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Executable configuration set aside, in walk order.
    pub set_aside: Vec<SetAside>,
    /// Where it is, when anything was set aside.
    pub quarantine: Option<PathBuf>,
    /// Entries left writable by group or others that were not before the
    /// run, now writable by their owner only.
    pub write_opened: Vec<PathBuf>,
    /// Regular files whose set-id bits were cleared.
    pub setid_cleared: Vec<PathBuf>,
    /// The work directory's own mode and owner, when they were changed
    /// back: what the agent had made them, as `mode 0777, owner 0:0`.
    pub root_changed: Option<String>,
    /// Entries kept read-only from the agent during the run, given back.
    pub returned: usize,
    /// Entries a killed run had kept read-only, given back before this run.
    pub recovered: usize,
}

/// Puts the work directory `root` right after the run.
pub(crate) fn after_run(
    root: &OwnedFd,
    before: &Before,
    quarantine: &Path,
) -> Result<Report, WorkdirError> {
    let mut report = Report {
        root_changed: restore_root(root, before)?,
        recovered: before.recovered,
        ..Report::default()
    };
    let git = git::find_git();
    let mut quarantine = Quarantine::new(quarantine);
    let mut tidy = Tidy {
        before,
        git: git.as_deref(),
        quarantine: &mut quarantine,
        report: &mut report,
    };
    walk::walk(root, Path::new(""), before.place, |listing| {
        let (classes, subdirs) = place::classify(listing, &before.hooks);
        for (entry, class) in listing.entries.iter().zip(classes) {
            tidy.entry(listing, entry, class)?;
        }
        Ok(subdirs)
    })?;
    report.quarantine = quarantine.used();
    Ok(report)
}

/// The work directory's own owner and mode, as they were.
fn restore_root(root: &OwnedFd, before: &Before) -> Result<Option<String>, WorkdirError> {
    let here = Path::new("");
    let st = fstat(root).map_err(|e| WorkdirError::io(here, e))?;
    let now = (st.st_uid, st.st_gid, st.st_mode & 0o7777);
    let was = (before.owner.0, before.owner.1, before.root_mode);
    if now == was {
        return Ok(None);
    }
    nix::unistd::fchown(root, Some(was.0.into()), Some(was.1.into()))
        .map_err(|e| WorkdirError::io(here, e))?;
    nix::sys::stat::fchmod(root, nix::sys::stat::Mode::from_bits_truncate(was.2))
        .map_err(|e| WorkdirError::io(here, e))?;
    // Kept from the agent during the run is not changed by it.
    Ok((now.0 != KEEPER_ID || now.2 != was.2)
        .then(|| format!("mode {:04o}, owner {}:{}", now.2, now.0, now.1)))
}

struct Tidy<'a, 'q> {
    before: &'a Before,
    git: Option<&'a Path>,
    quarantine: &'a mut Quarantine<'q>,
    report: &'a mut Report,
}

impl Tidy<'_, '_> {
    fn entry(
        &mut self,
        listing: &Listing<'_, Place>,
        entry: &Entry,
        class: Class,
    ) -> Result<(), WorkdirError> {
        // Most entries need nothing: judged on their status alone, with no
        // path made and no system call.
        let owner = entry.stat.st_uid == KEEPER_ID;
        let mode = self.mode_wanted(entry);
        if !owner && mode.is_none() && class == Class::Plain {
            return Ok(());
        }
        let path = listing.path_of(entry);
        let dir = listing.fd;
        if owner {
            self.give_back(dir, entry, &path)?;
        }
        if let Some(mode) = mode {
            self.set_mode(dir, entry, &path, mode)?;
        }
        match class {
            Class::Plain => Ok(()),
            Class::Config(what) => self.config(dir, entry, &path, what),
            Class::GitConfig => self.git_config(dir, entry, &path),
        }
    }

    /// What was kept from the agent goes back to the owner.
    fn give_back(
        &mut self,
        dir: BorrowedFd<'_>,
        entry: &Entry,
        path: &Path,
    ) -> Result<(), WorkdirError> {
        let fd = fsops::open_same(dir, &entry.name, &entry.stat)
            .map_err(|e| WorkdirError::io(path, e))?;
        fsops::chown(&fd, self.before.owner.0, None).map_err(|e| WorkdirError::io(path, e))?;
        self.report.returned += 1;
        Ok(())
    }

    /// The entry's permission bits without write for group or others, and
    /// without set-id bits, that were not there before the run; `None`
    /// when they stay as they are.
    fn mode_wanted(&self, entry: &Entry) -> Option<u32> {
        let st = &entry.stat;
        let kind = entry.kind();
        if kind == SFlag::S_IFLNK {
            return None;
        }
        let mode = st.st_mode & 0o7777;
        let mut keep = mode;
        if mode & OTHERS_WRITE != 0 && !self.before.open.contains(&inode(st)) {
            keep &= !OTHERS_WRITE;
        }
        let setid = mode & SETID;
        if kind == SFlag::S_IFREG && setid != 0 && self.before.setid.get(&inode(st)) != Some(&setid)
        {
            keep &= !SETID;
        }
        (keep != mode).then_some(keep)
    }

    fn set_mode(
        &mut self,
        dir: BorrowedFd<'_>,
        entry: &Entry,
        path: &Path,
        keep: u32,
    ) -> Result<(), WorkdirError> {
        let mode = entry.stat.st_mode & 0o7777;
        if (mode & !keep) & OTHERS_WRITE != 0 {
            self.report.write_opened.push(path.to_path_buf());
        }
        if (mode & !keep) & SETID != 0 {
            self.report.setid_cleared.push(path.to_path_buf());
        }
        let fd = fsops::open_same(dir, &entry.name, &entry.stat)
            .map_err(|e| WorkdirError::io(path, e))?;
        fsops::chmod(&fd, keep).map_err(|e| WorkdirError::io(path, e))
    }

    /// Executable configuration the agent added or changed is set aside,
    /// and what was there before put back.
    fn config(
        &mut self,
        dir: BorrowedFd<'_>,
        entry: &Entry,
        path: &Path,
        what: &'static str,
    ) -> Result<(), WorkdirError> {
        let before = self.before.saved.get(path);
        if entry.kind() == SFlag::S_IFDIR || unchanged(dir, entry, before) {
            return Ok(());
        }
        let taken = self.quarantine.take(dir, entry, path)?;
        let restored = match before {
            Some(saved) => quarantine::restore(dir, &entry.name, saved, path)?,
            None => false,
        };
        let action = if restored {
            Action::Restored
        } else {
            Action::Moved
        };
        self.set_aside(path, what, action, taken == Taken::Kept);
        Ok(())
    }

    /// A git configuration file the agent changed: kept, rewritten without
    /// what is not allowed, or set aside whole.
    fn git_config(
        &mut self,
        dir: BorrowedFd<'_>,
        entry: &Entry,
        path: &Path,
    ) -> Result<(), WorkdirError> {
        let before = self.before.saved.get(path);
        if unchanged(dir, entry, before) {
            return Ok(());
        }
        let after = match entry.kind() {
            SFlag::S_IFREG => snapshot::read_bounded(dir, entry, MAX_GIT_CONFIG + 1).ok(),
            _ => None,
        };
        let before_bytes = match before {
            Some(Saved::File { bytes, .. }) => Some(bytes.as_slice()),
            _ => None,
        };
        let review = match after {
            Some(after) if after.len() <= MAX_GIT_CONFIG => {
                git::review(self.git, before_bytes, &after)
            }
            _ => Review::Unreadable("it is not a regular file of at most 1 MiB".into()),
        };
        match review {
            Review::Keep => Ok(()),
            Review::Rewrite { bytes, removed } => {
                quarantine::replace(self.quarantine, dir, entry, path, &bytes)?;
                self.set_aside(path, GIT_CONFIG, Action::Rewritten { removed }, true);
                Ok(())
            }
            Review::Unreadable(_) => self.config(dir, entry, path, GIT_CONFIG),
        }
    }

    fn set_aside(&mut self, path: &Path, what: &'static str, action: Action, kept: bool) {
        self.report.set_aside.push(SetAside {
            path: path.to_path_buf(),
            what,
            action,
            kept,
        });
    }
}

const GIT_CONFIG: &str = "git configuration";

/// Whether `entry` is what was saved before the run: the same kind, the
/// same bytes and permission bits, or the same link target.
fn unchanged(dir: BorrowedFd<'_>, entry: &Entry, before: Option<&Saved>) -> bool {
    let Some(before) = before else {
        return false;
    };
    let st: &FileStat = &entry.stat;
    match (entry.kind(), before) {
        (SFlag::S_IFREG, Saved::File { bytes, mode, .. }) => {
            st.st_size as u64 == bytes.len() as u64
                && st.st_mode & 0o7777 == *mode
                && snapshot::read_bounded(dir, entry, bytes.len() + 1)
                    .is_ok_and(|now| &now == bytes)
        }
        (SFlag::S_IFLNK, Saved::Link(target)) => nix::fcntl::readlinkat(dir, entry.name.as_c_str())
            .is_ok_and(|now| now.as_encoded_bytes() == target.as_slice()),
        _ => false,
    }
}
