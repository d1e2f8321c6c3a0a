//! What an agent leaves in its work directory must not attack the
//! operator once the run is over.
//!
//! A compromised agent need not escape its sandbox while it runs: it can
//! leave things in its work directory that the operator's own tools then
//! execute on the host, outside any sandbox, or that other users of the
//! host can use. This crate checks the work directory before each run and
//! puts it right after:
//!
//! - **Executable configuration** the agent added or changed (git's
//!   configuration and hooks, editors', shells' and package managers' files
//!   that act when a directory is opened: [`config::RULES`]) is moved out
//!   of the work directory into a quarantine, and what was there before is
//!   put back. A directory kept as the agent's home
//!   ([`Workdir::prepare_home`]) is checked the same way, but for the
//!   coding agents' own homes at its top (`.claude/`, `.codex/`), where
//!   only [`config::HOME_RULES`] is configuration and the sessions stay. A git configuration file is kept when the agent only added
//!   settings an agent needs (`user.name`, a branch's upstream), and
//!   rewritten without the rest otherwise.
//! - **Permissions**: nothing is left writable by group or others that was
//!   not before the run, the work directory itself keeps its mode and
//!   owner, and no regular file keeps a set-id bit it did not have.
//! - **Files the agent did not create**: before a run, a file the agent
//!   could change that also has a name outside the work directory (a hard
//!   link) makes the run refuse to start, since the agent would change it
//!   there too. In a root run, where the agent acts on the directory
//!   owner's files through an idmapped mount, the owner's read-only files
//!   and directories are given to [`constle_hostids::KEEPER_ID`] for the
//!   run, so the agent has a stranger's access to them: it can neither
//!   write them nor make them writable.
//!
//! Every change is made by descriptor, on the object that was checked,
//! never through a link; the walk stays on the work directory's file
//! system. A work directory is locked for the run: two runs never check or
//! change one at the same time.
//!
//! ```no_run
//! # fn main() -> Result<(), constle_workdir::WorkdirError> {
//! use constle_workdir::{Acting, Workdir};
//! let workdir = Workdir::prepare("/srv/agent/work".as_ref(), Acting::Owner)?;
//! // … the sandbox runs …
//! let report = workdir.finish("/root/.constle/quarantine/agent-1".as_ref())?;
//! for item in &report.set_aside {
//!     println!("{}: {} ({:?})", item.path.display(), item.what, item.action);
//! }
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod bounds;
pub mod config;
mod error;
mod fsops;
mod git;
mod place;
mod quarantine;
mod snapshot;
mod tidy;
mod walk;

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::sys::stat::{Mode, fstat};

pub use error::WorkdirError;
pub use tidy::{Action, Report, SetAside};

use place::Place;
use snapshot::Before;

/// Whose rights the agent has on the work directory's existing files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acting {
    /// Those of the directory's owner: a root run, where the sandbox shows
    /// the directory to the agent through an idmapped mount. The owner's
    /// read-only entries are kept from it for the run.
    Owner,
    /// Those of this uid: a run by an unprivileged user, whose agent is
    /// that user on the host.
    User(u32),
}

impl Acting {
    /// This process's own user: what a sandbox started without root acts
    /// as.
    pub fn this_user() -> Acting {
        Acting::User(nix::unistd::geteuid().as_raw())
    }
}

/// A work directory checked and locked for one run.
#[derive(Debug)]
pub struct Workdir {
    path: PathBuf,
    /// The directory, held open and locked (`flock`) until the run is
    /// over.
    dir: File,
    before: Before,
}

impl Workdir {
    /// Checks and locks the work directory at `path` (its real path, as the
    /// sandbox checked it) before the agent starts: refuses hard links the
    /// agent could change through, records what the check after the run
    /// compares with, and, acting as the owner, keeps the owner's read-only
    /// entries from the agent.
    pub fn prepare(path: &Path, acting: Acting) -> Result<Workdir, WorkdirError> {
        Workdir::prepare_as(path, acting, Place::Plain)
    }

    /// As [`Workdir::prepare`], for a directory kept as the agent's home
    /// (`sandbox.home`): the same checks and rules, but for the coding
    /// agents' own homes at its top (`.claude/`, `.codex/`), whose sessions
    /// are kept and of which only what [`config::HOME_RULES`] names is
    /// executable configuration.
    pub fn prepare_home(path: &Path, acting: Acting) -> Result<Workdir, WorkdirError> {
        Workdir::prepare_as(path, acting, Place::Home)
    }

    fn prepare_as(path: &Path, acting: Acting, place: Place) -> Result<Workdir, WorkdirError> {
        let dir = open_root(path)?;
        match dir.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(WorkdirError::Busy {
                    path: path.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(WorkdirError::io(path, e)),
        }
        let root: OwnedFd = dir
            .try_clone()
            .map_err(|e| WorkdirError::io(path, e))?
            .into();
        let before = Before::take(&root, path, acting, place)?;
        Ok(Workdir {
            path: path.to_path_buf(),
            dir,
            before,
        })
    }

    /// The work directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The device and inode of the directory held: what the sandbox must
    /// mount.
    pub fn inode(&self) -> (u64, u64) {
        self.before.inode
    }

    /// How many of the owner's read-only entries are kept from the agent
    /// for the run.
    pub fn kept_read_only(&self) -> usize {
        self.before.frozen
    }

    /// How many entries a killed run had kept from its agent were given
    /// back to the owner before this run.
    pub fn recovered(&self) -> usize {
        self.before.recovered
    }

    /// Puts the work directory right after the run (the sandbox is gone):
    /// gives back what was kept from the agent, sets aside executable
    /// configuration into `quarantine` (made when first needed, mode
    /// 0700), and restores permissions. Everything done is in the report.
    pub fn finish(self, quarantine: &Path) -> Result<Report, WorkdirError> {
        let root: OwnedFd = self
            .dir
            .try_clone()
            .map_err(|e| WorkdirError::io(&self.path, e))?
            .into();
        let still = open_root(&self.path).and_then(|now| same_dir(&now, &self.dir));
        let report = tidy::after_run(&root, &self.before, quarantine);
        match still {
            Ok(true) => report,
            _ => report.and(Err(WorkdirError::Replaced { path: self.path })),
        }
    }
}

fn open_root(path: &Path) -> Result<File, WorkdirError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = open(path, flags, Mode::empty()).map_err(|e| WorkdirError::io(path, e))?;
    Ok(File::from(fd))
}

fn same_dir(a: &File, b: &File) -> Result<bool, WorkdirError> {
    let stat = |f: &File| fstat(f).map_err(|e| WorkdirError::io(Path::new(""), e));
    let (a, b) = (stat(a)?, stat(b)?);
    Ok((a.st_dev, a.st_ino) == (b.st_dev, b.st_ino))
}
