//! [`SandboxError`]: why a sandbox cannot be built.

use std::io;
use std::path::PathBuf;

/// Why [`sandbox_command`](crate::sandbox_command) (or the launcher) refused a [`SandboxSpec`](crate::SandboxSpec),
/// or [`seccomp_programs`](crate::seccomp_programs) could not build the filter.
///
/// Every refusal happens before anything is started: a spec that would give
/// the agent more than it declares is an error, never a silent adjustment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A file system in memory would be smaller than
    /// [`MIN_TMPFS_BYTES`](crate::MIN_TMPFS_BYTES).
    #[error("the sandbox's {mount} would hold only {bytes} bytes; give it at least 1 MiB")]
    TmpfsTooSmall {
        /// Where it is mounted.
        mount: &'static str,
        /// The size asked for.
        bytes: u64,
    },

    /// `command` is empty.
    #[error("the sandbox command is empty: give the program to run and its arguments")]
    EmptyCommand,

    /// A file for the sandbox's `/etc` that constle may not write there.
    #[error("the sandbox's {path} cannot be written: {why}")]
    EtcFile {
        /// Its path in the sandbox.
        path: String,
        /// Why not.
        why: &'static str,
    },

    /// A command argument, environment name or value holds a NUL byte.
    #[error("{what} contains a NUL byte, which cannot be passed to a program")]
    NulByte {
        /// Which value: "command argument 2", "value of FOO", ….
        what: String,
    },

    /// An environment variable name is empty or contains `=`.
    #[error(
        "environment variable name {name:?} is not valid: it must be non-empty and contain no '='"
    )]
    InvalidEnvName {
        /// The name as given.
        name: String,
    },

    /// `workdir` (or `home`) is not an absolute path.
    #[error("{role} {path:?} is not an absolute path")]
    WorkdirNotAbsolute {
        /// `"workdir"` or `"home"`.
        role: &'static str,
        /// The path as given.
        path: PathBuf,
    },

    /// `workdir` (or `home`) cannot be resolved (usually: it does not
    /// exist).
    #[error("{role} {path:?} cannot be used: {source}; create it first")]
    Workdir {
        /// `"workdir"` or `"home"`.
        role: &'static str,
        /// The path as given.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },

    /// `workdir` (or `home`) names another directory than the one the
    /// caller holds.
    #[error(
        "{role} {path:?} is no longer the directory constle checked before the run (it was moved or replaced); nothing was started"
    )]
    WorkdirReplaced {
        /// `"workdir"` or `"home"`.
        role: &'static str,
        /// The resolved path.
        path: PathBuf,
    },

    /// `workdir` (or `home`) exists but is not a directory.
    #[error("{role} {path:?} is not a directory")]
    WorkdirNotDir {
        /// `"workdir"` or `"home"`.
        role: &'static str,
        /// The resolved path.
        path: PathBuf,
    },

    /// `workdir` (or `home`) would make more than a work directory
    /// writable, or hide a part of the sandbox the agent needs.
    #[error("{role} {path:?} cannot be the sandbox's writable directory: {reason}")]
    WorkdirForbidden {
        /// `"workdir"` or `"home"`.
        role: &'static str,
        /// The resolved path.
        path: PathBuf,
        /// Why not.
        reason: &'static str,
    },

    /// The work directory, the home or the rootfs would show the agent a
    /// private host path, or let it write one.
    #[error(
        "the {role} {dir:?} {relation} {what} ({private:?}): the agent could read or change it; \
         choose a {role} that neither contains nor lies inside it"
    )]
    Exposes {
        /// `"workdir"`, `"home"` or `"rootfs"`.
        role: &'static str,
        /// The directory's real path.
        dir: PathBuf,
        /// `"is"`, `"contains"` or `"lies inside"`.
        relation: &'static str,
        /// What the private path is (`"CONSTLE_HOME (keys and logs)"`).
        what: String,
        /// The private path's real path.
        private: PathBuf,
    },

    /// The work directory's or rootfs's path crosses a symbolic link.
    #[error(
        "the {role} {path:?} goes through a symbolic link (its real path is {real:?}): a link an \
         earlier run planted could point the sandbox anywhere; write the real path"
    )]
    ThroughLink {
        /// `"workdir"`, `"home"` or `"rootfs"`.
        role: &'static str,
        /// The path as given.
        path: PathBuf,
        /// Where it leads.
        real: PathBuf,
    },

    /// A private path cannot be resolved, so where it lies is unknown.
    #[error("{what} {path:?} cannot be resolved: {reason}")]
    Private {
        /// What the private path is.
        what: String,
        /// The path as given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },

    /// A private file has other hard links, which may lie anywhere, the
    /// agent's work directory included.
    #[error(
        "{what} {path:?} has {links} hard links: another name for it may lie where the agent \
         can write; give it a single name (copy it, then remove the other links)"
    )]
    HardLinked {
        /// What the file is.
        what: String,
        /// The path as given.
        path: PathBuf,
        /// How many names the file has.
        links: u64,
    },

    /// `home` is, holds or lies inside the work directory or the rootfs
    /// (on real paths), or the work directory lies where the home is
    /// mounted in the sandbox.
    #[error(
        "the home {home:?} {relation} {what} {other:?}: the same files would be mounted twice, \
         so what the agent writes through one would escape the rules of the other; give the \
         home a directory of its own"
    )]
    HomeOverlaps {
        /// The home's real path.
        home: PathBuf,
        /// `"is"`, `"holds"`, `"lies inside"` or `"would hold"`.
        relation: &'static str,
        /// What the other directory is.
        what: &'static str,
        /// The other directory's real path.
        other: PathBuf,
    },

    /// With a `rootfs`, the workdir's mount point is missing inside it.
    #[error(
        "workdir {path:?} lies under {top:?}, which comes from the rootfs, but {missing:?} \
         does not exist: create that directory in the rootfs"
    )]
    WorkdirMissingInRootfs {
        /// The resolved workdir.
        path: PathBuf,
        /// The top-level directory taken from the rootfs.
        top: PathBuf,
        /// The directory that must exist in the rootfs.
        missing: PathBuf,
    },

    /// `rootfs` cannot be used as the sandbox's `/`.
    #[error("rootfs {path:?} cannot be used: {reason}")]
    Rootfs {
        /// The path as given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },

    /// A door's name is not 1 to 32 of `a-z`, `0-9`, `-`, starting with a
    /// letter or digit.
    #[error(
        "door name {name:?} is not valid: use 1 to 32 of a-z, 0-9 and '-', starting with a letter or digit"
    )]
    InvalidDoorName {
        /// The name as given.
        name: String,
    },

    /// One of the run's own files on the host lies inside a directory the
    /// sandbox shows.
    #[error(
        "the run's {what} {path:?} lies inside the sandbox's {role}, where the agent could reach it; \
         set TMPDIR to a directory outside it"
    )]
    RunFileShown {
        /// "stage", "network channel" or "stdio socket".
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// "work directory", "home" or "rootfs".
        role: &'static str,
    },

    /// More doors than travel in one message.
    #[error("{count} doors: a sandbox has at most {max}")]
    TooManyDoors {
        /// How many the spec has.
        count: usize,
        /// The most there may be.
        max: usize,
    },

    /// Two doors share a name or a listen address.
    #[error("two doors use the same {what} {value:?}")]
    DuplicateDoor {
        /// "name" or "listen address".
        what: &'static str,
        /// The shared value.
        value: String,
    },

    /// A door's listen address is not a loopback address with a port of at
    /// least 1024.
    #[error("door {name:?} cannot listen on {listen}: {reason}")]
    InvalidDoorAddress {
        /// The door.
        name: String,
        /// The address as given.
        listen: std::net::SocketAddrV4,
        /// Why not.
        reason: &'static str,
    },

    /// A host socket (the network's channel, the stdio socket) is missing
    /// or is not a Unix socket.
    #[error(
        "the {name} socket {path:?} cannot be used: {reason}; bind it before building the sandbox"
    )]
    HostSocket {
        /// What it is for: `network` or `stdio`.
        name: String,
        /// The path as given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },

    /// `constle_exe` is missing or not a file.
    #[error("the constle executable {path:?} cannot be bound into the sandbox: {reason}")]
    ConstleExe {
        /// The path as given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },

    /// The stage directory cannot be used.
    #[error("the sandbox's stage directory {path:?} cannot be used: {reason}")]
    Stage {
        /// The path as given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },

    /// The launcher's plan could not be written.
    #[error("the sandbox's plan cannot be written: {reason}")]
    Plan {
        /// Why not.
        reason: String,
    },

    /// No `bwrap` at `/usr/bin`, `/usr/local/bin` or `/bin` (`PATH` is not
    /// searched).
    #[error(
        "bubblewrap (bwrap) is not installed in /usr/bin, /usr/local/bin or /bin (PATH is not \
         searched): install the `bubblewrap` package"
    )]
    BwrapNotFound,

    /// The `bwrap` found, or its directory, could be replaced by someone
    /// other than root or this user.
    #[error(
        "{path:?} could be replaced by users other than root (it or its directory is writable by \
         its group or others, or belongs to another user): bubblewrap runs on the host, outside \
         the sandbox, so it must be root's"
    )]
    BwrapUntrusted {
        /// The bwrap found.
        path: PathBuf,
    },

    /// The system-call filter cannot be built (see
    /// [`seccomp_programs`](crate::seccomp_programs)): the architecture has
    /// no policy, or the policy does not compile.
    #[error("the sandbox's system-call filter cannot be built: {reason}")]
    Seccomp {
        /// Why not.
        reason: String,
    },
}

/// Why a sandbox was never set up (see
/// [`setup_failure`](crate::setup_failure)): what the launcher and bwrap
/// said, then what to change when the cause is known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{said}{}", cause.as_ref().map(|c| format!("; {c}")).unwrap_or_default())]
#[non_exhaustive]
pub struct SetupFailure {
    /// What the launcher and bwrap wrote to stderr (escaped), lines joined
    /// by `; `.
    pub said: String,
    /// What it means, when that is known.
    pub cause: Option<SetupCause>,
}

/// What kept a sandbox from being set up, and so what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SetupCause {
    /// bwrap could not mount a fresh `/proc`: the one constle sees has
    /// files mounted over it, as container engines do by default.
    #[error(
        "this /proc is masked (files are mounted over parts of it, as container engines do by \
         default), so the sandbox cannot mount one of its own: unmask it (docker: --security-opt \
         systempaths=unconfined; podman: --security-opt unmask=ALL, or unmask=/proc/*; \
         Kubernetes: procMount: Unmasked, which needs hostUsers: false); see docs/containers.md"
    )]
    ProcMasked,
    /// The namespaces were refused and constle itself runs under a seccomp
    /// filter, the likely cause whatever bwrap's guess says.
    #[error(
        "constle runs under a seccomp filter (Seccomp: 2 in /proc/self/status), which most likely \
         refuses the system calls that make the sandbox's namespaces (clone with namespace flags, \
         unshare, mount, pivot_root): run the container with the seccomp profile in \
         docs/containers.md (docker or podman: --security-opt seccomp=FILE; Kubernetes: a \
         Localhost seccompProfile), not the engine's default"
    )]
    SeccompFilter,
    /// The namespaces were refused and a sysctl forbids unprivileged user
    /// namespaces.
    #[error(
        "unprivileged user namespaces are turned off on this kernel ({name} is {value}): set \
         {name} to {} on the host (in a container, the host's setting applies)",
        match *name { "user.max_user_namespaces" => "a positive number", "kernel.unprivileged_userns_clone" => "1", _ => "0" }
    )]
    Sysctl {
        /// The sysctl.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// The namespaces were refused, with no seccomp filter on constle and
    /// no sysctl forbidding them.
    #[error(
        "the kernel refused the sandbox's namespaces, though no seccomp filter is on constle and \
         user.max_user_namespaces, kernel.unprivileged_userns_clone and \
         kernel.apparmor_restrict_unprivileged_userns allow them: a security module (AppArmor, \
         SELinux) or the container engine may refuse them; see docs/containers.md"
    )]
    Namespaces,
}
