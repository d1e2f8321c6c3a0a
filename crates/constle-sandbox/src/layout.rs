//! Fixed names and paths of the sandbox.

use std::net::Ipv4Addr;

/// The directory inside the sandbox holding the constle executable and the
/// stdio socket. Read-only.
pub const RUN_DIR: &str = "/run/constle";

/// Where the constle executable is mounted inside the sandbox.
pub const EXE_INSIDE: &str = "/run/constle/constle";

/// Where the socket of [`CommandIo::Socket`](crate::CommandIo::Socket) is
/// mounted inside the sandbox.
pub const STDIO_INSIDE: &str = "/run/constle/stdio";

/// The most descriptors that travel from the launcher to the host in one
/// message (the kernel's bound, `SCM_MAX_FD`, is 253).
pub(crate) const MAX_SOCKETS: usize = 64;

/// How many descriptors a name service sends
/// ([`NameSockets`](crate::NameSockets)).
pub(crate) const NAME_SOCKETS: usize = 6;

/// The hidden subcommand that runs inside the sandbox: `constle sandbox-init`.
/// The `constle` binary passes the arguments after it to
/// [`init_main`](crate::init_main).
pub const INIT_SUBCOMMAND: &str = "sandbox-init";

/// The hidden subcommand that launches the sandbox on the host:
/// `constle sandbox-exec`. The `constle` binary passes the arguments after
/// it to [`launch_main`](crate::launch_main).
pub const LAUNCH_SUBCOMMAND: &str = "sandbox-exec";

/// The agent's uid and gid inside the sandbox, whoever starts constle.
pub const AGENT_ID: u32 = 1000;

/// The sandbox's host name (own UTS namespace).
pub const HOSTNAME: &str = "constle-sandbox";

/// The agent's `PATH` when [`SandboxSpec::env`](crate::SandboxSpec::env)
/// does not set one. The host's `PATH` is never used: it names host
/// directories (home directories among them) that the sandbox does not have.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The agent's home directory inside the sandbox: a fresh tmpfs (mode
/// 0700, the agent's), empty at each start and gone with the sandbox, so
/// that tools which keep caches and settings under `HOME` (npm, pip, git)
/// work without flags. It is `HOME` when
/// [`SandboxSpec::env`](crate::SandboxSpec::env) does not set one, and the
/// agent's home in the sandbox's own `/etc/passwd`.
pub const AGENT_HOME: &str = "/home/agent";

/// The host's system directories mounted read-only (each only if it exists;
/// a symbolic link, as on merged-`/usr` systems, is recreated as the same
/// link). Not used with a rootfs.
pub(crate) const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The parts of the host's `/etc` mounted read-only (each only if it exists;
/// links are followed). Everything else in `/etc` stays out: `shadow`,
/// `gshadow`, `sudoers`, `ssh/`, `ssl/private/`, `environment`,
/// `machine-id`, `hostname`, `hosts`, `resolv.conf`, and the host's
/// `passwd` and `group` (the sandbox gets its own, [`passwd`] and
/// [`group`]). Not used with a rootfs.
pub(crate) const ETC_PATHS: &[&str] = &[
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
    // Debian's JDKs keep their security configuration here
    // (`conf/security` links into it): without it no JVM starts
    "/etc/java-17-openjdk",
    "/etc/java-21-openjdk",
    // time zone and OS identification
    "/etc/localtime",
    "/etc/timezone",
    "/etc/os-release",
];

/// The files in the sandbox's `/etc` a caller may write
/// ([`SandboxSpec::etc_files`](crate::SandboxSpec::etc_files)): the
/// system-wide settings of the agent CLIs constle knows, which point them
/// at the model gate. Nothing of the host's `/etc` is among them, so none
/// can cover a file the sandbox needs.
pub const WRITABLE_ETC_FILES: &[&str] = &["/etc/codex/config.toml"];

/// The DNS server's address inside the sandbox, with a name service
/// (`/etc/resolv.conf`'s, and the one resolvers try when they find no
/// configuration).
pub const NAME_SERVER: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// The only port a placeholder accepts connections on.
pub const CAPTURED_PORT: u16 = 443;

/// The sandbox's `/etc/resolv.conf`, with a name service: the resolver
/// constle serves on the sandbox's loopback, asked once, with no search
/// domains (so a name is asked for as written).
pub(crate) fn resolv_conf() -> String {
    format!("nameserver {}\noptions attempts:1\n", NAME_SERVER)
}

/// The sandbox's `/etc/hosts`, with a name service: `localhost`, which no
/// resolver is asked about.
pub(crate) fn hosts() -> String {
    "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n".to_owned()
}

/// The sandbox's `/etc/passwd`: root, the agent (at home in
/// [`AGENT_HOME`]) and nobody.
pub(crate) fn passwd() -> String {
    format!(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n\
         agent:x:{AGENT_ID}:{AGENT_ID}:constle agent:{AGENT_HOME}:/bin/sh\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
}

/// The sandbox's `/etc/group`, to match [`passwd`].
pub(crate) fn group() -> String {
    format!("root:x:0:\nagent:x:{AGENT_ID}:\nnogroup:x:65534:\n")
}

/// Parts of the sandbox's own `/proc` that are made read-only: the kernel's
/// settings (`sys`: `core_pattern`, `modprobe`, …) and its trigger. The
/// agent is never host root, so it cannot write them anyway; this is the
/// second layer. (`irq`, `bus` and `fs` are left as they are: writable by
/// host root only, and each mount costs bubblewrap a fraction of a
/// millisecond more per run.)
pub(crate) const PROC_READ_ONLY: &[&str] = &["/proc/sys", "/proc/sysrq-trigger"];

/// Files of `/proc` covered with `/dev/null`, where the kernel has them:
/// kernel memory, and timer and scheduler details that name processes
/// outside the sandbox.
pub(crate) const PROC_MASKED: &[&str] = &[
    "/proc/kcore",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
];

/// Top-level entries of a rootfs that are not mounted: the sandbox brings its
/// own `/proc`, `/dev`, `/tmp`, `/run` and `/home` (which holds only
/// [`AGENT_HOME`]), and has no `/sys`. A rootfs's `/home` is users' data,
/// not system files, and mounted read-only it would leave no place for the
/// agent's writable home.
pub(crate) const ROOTFS_SKIPPED: &[&str] = &["dev", "home", "proc", "run", "sys", "tmp"];
