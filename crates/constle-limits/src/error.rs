//! [`LimitsError`]: why a run's cgroups cannot be made, read or removed.

use std::io;
use std::path::PathBuf;

use crate::Controller;

/// What to do when a declared limit cannot be enforced, said to a user
/// other than root.
pub(crate) const HELP: &str = "constle never ignores a declared limit: run it as root, or on a cgroup v2 system start it in a delegated scope (systemd-run --user --scope -p Delegate=yes constle run …), or remove the limit from sandbox.limits";

/// What to do when a declared limit cannot be enforced, said to root: what
/// it lacks is a cgroup it may write, as in a container.
pub(crate) const ROOT_HELP: &str = "constle never ignores a declared limit: it runs as root, but the cgroup file system it sees is read-only or does not delegate the controller to it, as in a container: on a host, start it in a delegated scope (systemd-run --scope -p Delegate=yes constle run …); docker mounts /sys/fs/cgroup read-only unless the container is --privileged; podman mounts it writable on cgroup v2 with --systemd=always; on Kubernetes, give the limits to the pod's resources (constle kube renders them from sandbox.limits) and remove them from sandbox.limits; or remove the limit from sandbox.limits";

/// The advice for this process's user: never "run it as root" to root.
pub(crate) fn help() -> &'static str {
    help_for(rustix::process::geteuid().is_root())
}

fn help_for(root: bool) -> &'static str {
    match root {
        true => ROOT_HELP,
        false => HELP,
    }
}

/// What to do when constle shares its cgroup with other processes.
pub(crate) const OWN_SCOPE_HELP: &str = "start constle in a scope of its own, before it starts anything else (systemd-run --user --scope -p Delegate=yes constle run …; as root, without --user)";

/// Why a run's cgroups cannot be made, read or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsError {
    /// A declared limit cannot be enforced on this machine, for this user.
    #[error("cannot enforce the {controller} limit: {found}; {help}")]
    Unavailable {
        /// The controller the limit needs.
        controller: Controller,
        /// What was found instead: which hierarchies, and why neither serves.
        found: String,
        /// What to do.
        help: &'static str,
    },
    /// A limit of zero, which no cgroup can meaningfully enforce.
    #[error("the {controller} limit is zero; leave it out for no limit")]
    Zero {
        /// The limit.
        controller: Controller,
    },
    /// A run label that cannot be part of a cgroup name.
    #[error(
        "run label {label:?} cannot name a cgroup: use 1 to 64 of A-Z, a-z, 0-9, `-`, `_` and `.`"
    )]
    InvalidLabel {
        /// The label given.
        label: String,
    },
    /// [`enter`](crate::enter) was given a path that is not a
    /// `cgroup.procs` file.
    #[error("{} is not a cgroup.procs file", path.display())]
    NotProcsFile {
        /// The path given.
        path: PathBuf,
    },
    /// Processes were still in the run's cgroups when
    /// [`kill_all`](crate::RunCgroup::kill_all) gave up.
    #[error("processes {pids:?} are still in the run's cgroups after SIGKILL")]
    StillRunning {
        /// Their ids.
        pids: Vec<u32>,
    },
    /// A cgroup or `/proc` file could not be read or written.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done: "cannot read", "cannot write"…
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
}

impl LimitsError {
    /// A limit that cannot be enforced, with the usual advice.
    pub(crate) fn unavailable(controller: Controller, found: String) -> LimitsError {
        LimitsError::Unavailable {
            controller,
            found,
            help: help(),
        }
    }

    /// A closure that wraps an I/O error on `path`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> LimitsError {
        let path = path.into();
        move |source| LimitsError::Io {
            action,
            path,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_never_told_to_run_it_as_root() {
        assert!(
            !help_for(true).contains("run it as root"),
            "{}",
            help_for(true)
        );
        assert!(help_for(true).contains("read-only"));
        assert!(help_for(true).contains("pod's resources"));
        assert!(help_for(true).contains("systemd-run --scope -p Delegate=yes"));
        assert!(HELP.contains("systemd-run --user --scope -p Delegate=yes"));
        assert_eq!(help_for(false), HELP);
        assert!(HELP.contains("run it as root"));
    }
}
