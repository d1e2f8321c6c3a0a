//! The typed report: one [`Check`] per layer, and which of them stop a run.

use serde::Serialize;

/// What [`check`](crate::check) found: one [`Check`] per layer, always in
/// the order of [`CheckId::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Every layer checked.
    pub checks: Vec<Check>,
}

impl Report {
    /// The checks that stop a run: required, and missing. A run stops with
    /// the first one's [`Check::finding`] and its [`Check::fixes`].
    pub fn blocking(&self) -> impl Iterator<Item = &Check> {
        self.checks
            .iter()
            .filter(|c| c.required && c.status == Status::Missing)
    }

    /// Whether every required layer is there (nothing is
    /// [blocking](Report::blocking)).
    pub fn ok(&self) -> bool {
        self.blocking().next().is_none()
    }
}

/// One layer: whether it is there, what was seen, and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Which layer.
    pub id: CheckId,
    /// Whether the run described by [`Needs`](crate::Needs) needs it.
    pub required: bool,
    /// Whether it is there.
    pub status: Status,
    /// One line naming what was seen, e.g. `user namespaces: blocked by
    /// seccomp (unshare(CLONE_NEWUSER) returned EPERM while …)`; for
    /// [`Status::Unknown`], why it could not be told.
    pub finding: String,
    /// What fixes it; all `None` unless it is missing.
    pub fixes: Fixes,
}

/// A layer, by a name that stays the same from release to release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CheckId {
    /// Who runs constle: the user, whether root, whether `CAP_SYS_ADMIN`
    /// is effective, and so which path the sandbox takes. Never missing.
    User,
    /// Unprivileged user namespaces, and what blocks them (sysctl,
    /// AppArmor, seccomp).
    UserNamespaces,
    /// The system calls bubblewrap makes: `clone` with namespace flags,
    /// `unshare`, `mount`, `umount2`, `pivot_root`, `sethostname`.
    SystemCalls,
    /// A fresh `/proc` mounted in a new PID namespace (a masked `/proc`
    /// refuses it).
    ProcMount,
    /// Idmapped mounts on the work directory's file system (a run as root).
    IdmappedMounts,
    /// cgroups the run can make for `sandbox.limits`.
    CgroupDelegation,
    /// bubblewrap found where a run looks for it, and its version.
    Bwrap,
    /// Squid found where a run looks for it, and its version.
    Squid,
}

impl CheckId {
    /// Every layer, in the order a report lists them.
    pub const ALL: [CheckId; 8] = [
        CheckId::User,
        CheckId::UserNamespaces,
        CheckId::SystemCalls,
        CheckId::ProcMount,
        CheckId::IdmappedMounts,
        CheckId::CgroupDelegation,
        CheckId::Bwrap,
        CheckId::Squid,
    ];

    /// Its name, as in JSON: `user_namespaces`.
    pub fn name(self) -> &'static str {
        match self {
            CheckId::User => "user",
            CheckId::UserNamespaces => "user_namespaces",
            CheckId::SystemCalls => "system_calls",
            CheckId::ProcMount => "proc_mount",
            CheckId::IdmappedMounts => "idmapped_mounts",
            CheckId::CgroupDelegation => "cgroup_delegation",
            CheckId::Bwrap => "bwrap",
            CheckId::Squid => "squid",
        }
    }
}

/// Whether a layer is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It is.
    Ok,
    /// It is not; [`Check::fixes`] says what to change.
    Missing,
    /// It could not be told, or was not tried; [`Check::finding`] says why.
    Unknown,
}

/// What fixes a missing layer where constle runs in a container: the exact
/// flag or setting, for each engine. `None` where nothing is to be changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Fixes {
    /// For `docker run`.
    pub docker: Option<String>,
    /// For `podman run`.
    pub podman: Option<String>,
    /// For a Kubernetes pod.
    pub kubernetes: Option<String>,
}

impl Fixes {
    /// No fix: the layer is there, or nothing is known to fix it.
    pub const NONE: Fixes = Fixes {
        docker: None,
        podman: None,
        kubernetes: None,
    };

    /// Each engine's fix there is, named as `constle doctor` names them
    /// (`docker`, `podman`, `kubernetes`).
    pub fn each(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("docker", &self.docker),
            ("podman", &self.podman),
            ("kubernetes", &self.kubernetes),
        ]
        .into_iter()
        .filter_map(|(engine, fix)| Some((engine, fix.as_deref()?)))
    }

    /// The same three, from static texts.
    pub(crate) fn of(docker: &str, podman: &str, kubernetes: &str) -> Fixes {
        Fixes {
            docker: Some(docker.to_owned()),
            podman: Some(podman.to_owned()),
            kubernetes: Some(kubernetes.to_owned()),
        }
    }
}
