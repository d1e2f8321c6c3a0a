//! [`Needs`]: what the run being checked needs, which decides which layers
//! are required.

use std::path::PathBuf;

use constle_limits::Limits;

/// What a run needs, from its Agentfile and this process; `constle doctor`
/// without an Agentfile describes "any run" with [`Needs::any_run`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needs {
    /// The constle binary, which the probes run as a child process
    /// ([`PROBE_SUBCOMMAND`](crate::PROBE_SUBCOMMAND)).
    pub constle_exe: PathBuf,
    /// The work directory, whose file system the idmapped-mount check
    /// tries; `None`: not tried.
    pub workdir: Option<PathBuf>,
    /// `sandbox.limits` (memory, pids, CPU): cgroup delegation is required
    /// when any is declared. When none is, the check still tries
    /// [`Needs::PROBE_LIMITS`] and says what it found, as not required.
    pub limits: Limits,
    /// Whether the run takes the root path: the launcher switches to a host
    /// id of the run's own and shows the work directory through an
    /// idmapped mount. `constle_hostids::privileged` says whether this
    /// process would.
    pub as_root: bool,
    /// Whether the run starts the egress proxy (`sandbox.network.egress`
    /// other than `none`): Squid is required then.
    pub egress_proxy: bool,
}

impl Needs {
    /// The limits tried when none is declared: one of each kind.
    pub const PROBE_LIMITS: Limits = Limits {
        memory_bytes: Some(256 << 20),
        pids: Some(256),
        cpu_millis: Some(1000),
    };

    /// Any run on this machine, by this process: the work directory is
    /// `workdir`, no limits, the proxy started, the root path when this
    /// process would take it.
    pub fn any_run(constle_exe: PathBuf, workdir: Option<PathBuf>) -> Needs {
        Needs {
            constle_exe,
            workdir,
            limits: Limits::default(),
            as_root: constle_hostids::privileged(),
            egress_proxy: true,
        }
    }
}
