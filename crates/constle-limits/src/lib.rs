//! Memory, process and CPU limits for everything a run starts, enforced by
//! the kernel through cgroups, with a clear error wherever a declared limit
//! cannot be enforced: a limit is never silently ignored.
//!
//! The agent is assumed hostile: a fork bomb or a memory hog must not take
//! the machine down, and nothing it starts may outlive the run. The sandbox
//! launcher puts itself into the run's cgroups just before it execs
//! bubblewrap, so every process of the sandbox is inside. A process leaves
//! a cgroup, or raises its limits, only by writing cgroup files, so the
//! sandbox must show the agent no writable cgroup file system: under a
//! delegated scope the run's cgroups belong to the user constle runs as,
//! which is also the host user the agent's uid maps to. bubblewrap mounts
//! none unless asked; a read-only `/sys` is fine.
//!
//! # How a run uses it
//!
//! ```no_run
//! use constle_limits::{Limits, LimitsError, RunCgroup};
//!
//! # fn main() -> Result<(), LimitsError> {
//! let limits = Limits {
//!     memory_bytes: Some(512 << 20),
//!     pids: Some(256),
//!     cpu_millis: Some(1500),
//! };
//! // 1. Before anything of the run starts: Squid, MCP servers, the sandbox.
//! //    An error here ends the run before it begins; print it as it is.
//! let cgroup = RunCgroup::create("invoice-processor", &limits)?;
//!
//! // 2. Hand the launcher the files to enter, e.g. one
//! //    `--cgroup-procs PATH` argument each…
//! let procs = cgroup.procs_files();
//! // …and in the launcher, a fresh process, just before it execs bwrap
//! //    (if this fails, exit non-zero without exec'ing anything):
//! constle_limits::enter(&procs)?;
//!
//! // 3. While the run goes on, poll about once a second, and once more
//! //    when the sandbox has exited: a hit is an audit event, then the run
//! //    ends with the hit's message (`Display`).
//! for hit in cgroup.hits()? {
//!     let (_kind, _count, _detail) = (hit.limit, hit.count, &hit.detail);
//! }
//! // For the run's summary:
//! let _cpu = cgroup.cpu_stat()?;
//!
//! // 4. Teardown: nothing outlives the run.
//! cgroup.kill_all()?;
//! cgroup.remove()?;
//! # Ok(())
//! # }
//! ```
//!
//! Never call [`enter`] in the process that holds the [`RunCgroup`]:
//! [`RunCgroup::kill_all`] would kill it too.
//!
//! # Where the limits go
//!
//! - **cgroup v2 first.** The hierarchy is found in `/proc/self/mountinfo`
//!   and this process's group in the `0::` line of `/proc/self/cgroup`.
//!   The run's group `constle-<label>-<pid>-<n>` is made under it, after
//!   enabling the controllers it needs in that group's
//!   `cgroup.subtree_control`. v2 lets only a group without processes hand
//!   controllers down, so when constle is alone in its group (as in a scope
//!   made by `systemd-run --user --scope -p Delegate=yes constle run …`) it
//!   first moves itself into a leaf of its own, `constle-<pid>-self`, and
//!   stays there until it exits; if other processes share the group, that
//!   is an error saying to start constle in a scope of its own. Files:
//!   `memory.max`, `memory.swap.max` = 0 (so swap cannot stretch the
//!   limit), `memory.oom.group` = 1 (an OOM kill takes the whole tree, so
//!   the run ends), `pids.max`, `cpu.max` = `<quota> 100000`.
//! - **v1 per controller**, only for a controller the v2 group does not
//!   offer, in that controller's own hierarchy (in practice: root on a
//!   hybrid machine): `<hierarchy>/<this process's cgroup>/constle-…`,
//!   with `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes`,
//!   `pids.max`, `cpu.cfs_period_us` = 100000 and `cpu.cfs_quota_us`. v1
//!   has no `oom.group`: the OOM killer kills one process, and
//!   [`RunCgroup::hits`] reports it so that the caller ends the run.
//! - On a hybrid machine a v2 group is made too, holding no controller:
//!   it gives teardown `cgroup.kill` and the run's CPU time. Where it
//!   cannot be made, nothing declared is lost and it is left out.
//! - **Neither:** [`LimitsError::Unavailable`] names the controller, what
//!   was found in each hierarchy, and what to do.
//!
//! A run with no limit declared gets no cgroup at all.
//!
//! What each limit does when reached: memory, the kernel's OOM killer
//! stops the tree (v2) or its largest process (v1), counted in
//! `memory.events` or `memory.oom_control`; pids, `fork` and `clone` fail
//! with `EAGAIN` inside the sandbox, counted in `pids.events`; CPU, the
//! tree is throttled, which slows it down and never stops it.
//!
//! `docs/sandbox.md` says the same for users, with the exact messages.

#![forbid(unsafe_code)]

mod cgfs;
mod controller;
mod discover;
mod error;
mod kill;
mod plan;
mod run;

use std::fmt;
use std::path::Path;
use std::time::Duration;

pub use discover::unescape as unescape_mountinfo;
pub use error::LimitsError;
pub use run::RunCgroup;

/// What to limit; `None` leaves that resource unlimited. The caller
/// converts the Agentfile's `sandbox.limits` into this.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Memory in bytes for the whole tree (page cache and kernel memory
    /// charged to it included).
    pub memory_bytes: Option<u64>,
    /// Processes and threads that may exist at once.
    pub pids: Option<u32>,
    /// CPU time in thousandths of a CPU per unit of time: 1500 is one and a
    /// half CPUs.
    pub cpu_millis: Option<u32>,
}

impl Limits {
    /// Whether no limit is declared.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// The limit for `controller`, in its own unit.
    fn get(&self, controller: Controller) -> Option<u64> {
        match controller {
            Controller::Memory => self.memory_bytes,
            Controller::Pids => self.pids.map(u64::from),
            Controller::Cpu => self.cpu_millis.map(u64::from),
        }
    }

    /// The controllers declared limits need, refusing a limit of zero.
    fn declared(&self) -> Result<Vec<Controller>, LimitsError> {
        let mut declared = Vec::new();
        for controller in Controller::ALL {
            match self.get(controller) {
                Some(0) => return Err(LimitsError::Zero { controller }),
                Some(_) => declared.push(controller),
                None => {}
            }
        }
        Ok(declared)
    }
}

/// A cgroup controller a limit needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Controller {
    /// `memory`.
    Memory,
    /// `pids`.
    Pids,
    /// `cpu`.
    Cpu,
}

impl Controller {
    const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    /// The kernel's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }

    /// The kind of hit its limit can have; a CPU limit has none.
    fn hit_kind(self) -> Option<LimitKind> {
        match self {
            Controller::Memory => Some(LimitKind::Memory),
            Controller::Pids => Some(LimitKind::Pids),
            Controller::Cpu => None,
        }
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A limit that can be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitKind {
    /// The memory limit: the OOM killer killed a process of the run.
    Memory,
    /// The pids limit: a fork or a new thread was refused.
    Pids,
}

/// A limit the run has reached, from [`RunCgroup::hits`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitHit {
    /// Which limit.
    pub limit: LimitKind,
    /// How often: processes killed for memory, forks refused for pids.
    pub count: u64,
    /// The limit as set, for messages: `512 MiB`, `64 processes and threads`.
    pub detail: String,
}

impl LimitHit {
    fn new(limit: LimitKind, count: u64, limits: &Limits) -> LimitHit {
        let detail = match limit {
            LimitKind::Memory => bytes(limits.memory_bytes.unwrap_or_default()),
            LimitKind::Pids => format!("{} processes and threads", limits.pids.unwrap_or_default()),
        };
        LimitHit {
            limit,
            count,
            detail,
        }
    }
}

impl fmt::Display for LimitHit {
    /// `the memory limit (64 MiB) was reached: the kernel killed 1 process`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.count == 1 { "" } else { "es" };
        match self.limit {
            LimitKind::Memory => write!(
                f,
                "the memory limit ({}) was reached: the kernel killed {} process{plural}",
                self.detail, self.count
            ),
            LimitKind::Pids => write!(
                f,
                "the process limit ({}) was reached: {} fork{} refused",
                self.detail,
                self.count,
                if self.count == 1 { " was" } else { "s were" }
            ),
        }
    }
}

/// `n` bytes in the largest binary unit that divides it: `512 MiB`.
pub fn bytes(n: u64) -> String {
    [("GiB", 30), ("MiB", 20), ("KiB", 10)]
        .iter()
        .find(|(_, shift)| n != 0 && n.trailing_zeros() >= *shift)
        .map_or_else(
            || format!("{n} bytes"),
            |(unit, shift)| format!("{} {unit}", n >> shift),
        )
}

/// The run's CPU time, from [`RunCgroup::cpu_stat`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStat {
    /// CPU time the whole tree has used; `None` where the run has no
    /// cgroup v2 group (no limit declared, or a machine without v2).
    pub usage: Option<Duration>,
    /// How long the tree was held back by the CPU limit, summed over the
    /// CPUs it ran on; `None` without a CPU limit.
    pub throttled: Option<Duration>,
}

/// Moves the calling process into the cgroups whose `cgroup.procs` files
/// are given (from [`RunCgroup::procs_files`]) by writing `0` into each.
/// Everything it starts afterwards is inside too. The sandbox launcher
/// calls this just before it execs bubblewrap.
///
/// # Errors
///
/// [`LimitsError::NotProcsFile`] for a path whose file name is not
/// `cgroup.procs`, and [`LimitsError::Io`] when a write fails: the
/// process is then in some of the groups at most, and must not go on.
pub fn enter<P: AsRef<Path>>(procs_files: &[P]) -> Result<(), LimitsError> {
    for file in procs_files {
        let file = file.as_ref();
        if file.file_name().is_none_or(|name| name != "cgroup.procs") {
            return Err(LimitsError::NotProcsFile {
                path: file.to_path_buf(),
            });
        }
        cgfs::write(file, "0").map_err(LimitsError::io("cannot enter", file))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_read_well() {
        let limits = Limits {
            memory_bytes: Some(64 << 20),
            pids: Some(32),
            cpu_millis: None,
        };
        let memory = LimitHit::new(LimitKind::Memory, 1, &limits);
        assert_eq!(memory.detail, "64 MiB");
        assert_eq!(
            memory.to_string(),
            "the memory limit (64 MiB) was reached: the kernel killed 1 process"
        );
        let pids = LimitHit::new(LimitKind::Pids, 3, &limits);
        assert_eq!(
            pids.to_string(),
            "the process limit (32 processes and threads) was reached: 3 forks were refused"
        );
    }

    #[test]
    fn byte_units() {
        assert_eq!(bytes(2 << 30), "2 GiB");
        assert_eq!(bytes(1536 << 20), "1536 MiB");
        assert_eq!(bytes(6 << 10), "6 KiB");
        assert_eq!(bytes(6_291_457), "6291457 bytes");
        assert_eq!(bytes(0), "0 bytes");
    }

    #[test]
    fn declared_in_order() {
        let all = Limits {
            memory_bytes: Some(1),
            pids: Some(1),
            cpu_millis: Some(1),
        };
        assert_eq!(all.declared().unwrap(), Controller::ALL);
        assert!(Limits::default().is_empty());
        assert!(Limits::default().declared().unwrap().is_empty());
    }

    #[test]
    fn enter_only_procs_files() {
        let err = enter(&["/sys/fs/cgroup/memory.max"]).unwrap_err();
        assert!(matches!(err, LimitsError::NotProcsFile { .. }), "{err}");
    }
}
