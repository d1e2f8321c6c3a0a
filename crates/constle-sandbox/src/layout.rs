//! Fixed names and paths of the sandbox.

use std::path::PathBuf;

/// The directory inside the sandbox holding the constle executable and the
/// relays' sockets. Read-only.
pub const RUN_DIR: &str = "/run/constle";

/// Where the constle executable is mounted inside the sandbox.
pub const EXE_INSIDE: &str = "/run/constle/constle";

/// The hidden subcommand that runs inside the sandbox: `constle sandbox-init`.
/// The `constle` binary passes the arguments after it to
/// [`init_main`](crate::init_main).
pub const INIT_SUBCOMMAND: &str = "sandbox-init";

/// The sandbox's host name (own UTS namespace).
pub const HOSTNAME: &str = "constle-sandbox";

/// The agent's `PATH` when [`SandboxSpec::env`](crate::SandboxSpec::env)
/// does not set one. The host's `PATH` is never used: it names host
/// directories (home directories among them) that the sandbox does not have.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The host's system directories mounted read-only (each only if it exists;
/// a symbolic link, as on merged-`/usr` systems, is recreated as the same
/// link). Not used with a rootfs.
pub(crate) const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The parts of the host's `/etc` mounted read-only (each only if it exists;
/// links are followed). Everything else in `/etc` stays out: `shadow`,
/// `gshadow`, `sudoers`, `ssh/`, `ssl/private/`, `environment`,
/// `machine-id`, `hostname`, `hosts`, `resolv.conf`, …. Not used with a
/// rootfs.
pub(crate) const ETC_PATHS: &[&str] = &[
    // user and group names, for `id`, `whoami`, git, Python's getpass
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    // the dynamic linker's configuration
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    // Debian's alternatives (`python`, `awk`, `editor`, … are links here)
    "/etc/alternatives",
    // public CA certificates, for TLS through the proxy
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust/extracted",
    // time zone and OS identification
    "/etc/localtime",
    "/etc/timezone",
    "/etc/os-release",
];

/// Top-level entries of a rootfs that are not mounted: the sandbox brings its
/// own `/proc`, `/dev`, `/tmp` and `/run`, and has no `/sys`.
pub(crate) const ROOTFS_SKIPPED: &[&str] = &["dev", "proc", "run", "sys", "tmp"];

/// Where relay `name`'s host socket appears inside the sandbox.
pub(crate) fn relay_socket_inside(name: &str) -> PathBuf {
    PathBuf::from(format!("{RUN_DIR}/{name}.sock"))
}
