//! The sandbox an agent runs in, and the doors that are its only ways out.
//!
//! Constle assumes the agent is compromised. The agent runs under
//! [bubblewrap](https://github.com/containers/bubblewrap) (`bwrap`) with its
//! own network namespace holding nothing but loopback: dialling any IPv4 or
//! IPv6 address fails with `Network is unreachable`, and no packet leaves.
//! The only ways out are doors ([`Door`]): TCP listeners on `127.0.0.1`
//! that the launcher binds in that namespace before the agent exists and
//! hands to the host ([`Network`], [`receive_sockets`]), where the egress
//! proxy's bridge and the gates accept on them. Nothing in the sandbox
//! holds them; the agent reaches them only as a peer.
//!
//! ```text
//!  host                                       sandbox (bwrap, the launcher's network namespace)
//!  ────                                       ─────────────────────────────────────────────────
//!  proxy bridge ◄── accepts on ── listener 127.0.0.1:3128 ◄── agent
//!  constle binary ══════════ro══► /run/constle/constle (pid 1: runs the agent)
//! ```
//!
//! - [`sandbox_command`] checks a [`SandboxSpec`] ([`SandboxError`]) and
//!   returns the command that runs it: the constle binary as the launcher.
//! - [`launch_main`] is the launcher, the hidden `constle sandbox-exec`
//!   subcommand: on the host, it checks the spec again on the objects it
//!   then mounts, confines itself when started as root, and becomes `bwrap`.
//! - [`init_main`] is what the hidden `constle sandbox-init` subcommand runs
//!   inside the sandbox, as its pid 1.
//! - [`seccomp_programs`] is the sandbox's seccomp filter, as the programs
//!   bwrap's `--add-seccomp-fd` installs (the launcher passes them).
//! - [`sandbox_end`] tells, once the launched process exited, the sandbox's
//!   command's exit from a sandbox that was never set up
//!   ([`SandboxEnd`]), and [`setup_failure`] says why not and what to
//!   change ([`SetupFailure`]).
//!
//! # Wiring it up
//!
//! The `constle` binary dispatches both hidden subcommands first thing,
//! before any other argument parsing:
//!
//! ```no_run
//! let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
//! if args.get(1).is_some_and(|a| a == constle_sandbox::INIT_SUBCOMMAND) {
//!     std::process::exit(constle_sandbox::init_main(args[2..].to_vec()));
//! }
//! if args.get(1).is_some_and(|a| a == constle_sandbox::LAUNCH_SUBCOMMAND) {
//!     std::process::exit(constle_sandbox::launch_main(args[2..].to_vec()));
//! }
//! ```
//!
//! and `constle run` builds the sandbox once the channel is bound:
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use constle_sandbox::{CommandIo, Door, Network, Private, SandboxSpec, TmpfsSizes, sandbox_command};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let spec = SandboxSpec {
//!     command: vec!["python3".into(), "agent.py".into()],
//!     workdir: "/home/me/agent/work".into(),
//!     env: BTreeMap::from([
//!         ("HTTPS_PROXY".into(), "http://127.0.0.1:3128".into()),
//!         ("HTTP_PROXY".into(), "http://127.0.0.1:3128".into()),
//!     ]),
//!     rootfs: None,
//!     stdio: CommandIo::Inherit,
//!     constle_exe: std::env::current_exe()?,
//!     private: vec![Private {
//!         what: "CONSTLE_HOME (keys and logs)".into(),
//!         path: "/home/me/.constle".into(),
//!     }],
//!     stage: "/tmp/constle-stage-1234".into(),
//!     cgroup_procs: vec![],
//!     host_id: None,
//!     tmpfs: TmpfsSizes::DEFAULT,
//!     workdir_inode: None,
//!     etc_files: BTreeMap::new(),
//!     home: None,
//!     home_inode: None,
//!     network: Some(Network {
//!         channel: "/tmp/constle-run-1234/network.sock".into(),
//!         doors: vec![Door {
//!             name: "proxy".into(),
//!             listen: "127.0.0.1:3128".parse()?,
//!         }],
//!         name_service: None,
//!     }),
//! };
//! let status = sandbox_command(&spec)?.status()?;
//! match constle_sandbox::sandbox_end(&spec, status) {
//!     constle_sandbox::SandboxEnd::Ran(code) => println!("the agent exited with {code}"),
//!     // Its stderr (here inherited) said why: bwrap's or the launcher's.
//!     constle_sandbox::SandboxEnd::NotSetUp => println!("the sandbox was never set up"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # What the agent gets
//!
//! - **Identity**: uid and gid [`AGENT_ID`] (`agent` in the sandbox's own
//!   `/etc/passwd`), which on the host is the user who started constle, or
//!   when that user is root with `CAP_SYS_ADMIN`, [`SandboxSpec::host_id`],
//!   an id of this sandbox's own (`constle_hostids`): no id inside maps to
//!   the host's root. Root without `CAP_SYS_ADMIN` (a container's default
//!   root) starts the sandbox as any user would, so the agent is root
//!   outside it, without capabilities. Every capability dropped, `no_new_privs` set, and a
//!   seccomp filter (see `seccomp`) on it and everything it starts.
//! - **Namespaces**: its own network (loopback, and the doors and name
//!   service the host serves there), PID (it sees only the
//!   sandbox's processes; pid 1 is constle's non-dumpable init, which reaps
//!   orphans and which no signal from inside can stop), IPC, UTS (host name
//!   [`HOSTNAME`]), cgroup, mount and user namespaces; creating further user
//!   namespaces is disabled. Abstract Unix sockets belong to the network
//!   namespace, so the host's are out of reach too.
//! - **Session**: a new one with no controlling terminal (so no `TIOCSTI`
//!   into the host's terminal), stdin `/dev/null`; stdout and stderr are
//!   whatever the caller gives (`constle run` gives pipes). With
//!   [`CommandIo::Socket`] (a stdio MCP server in a sandbox of its own),
//!   stdin and stdout are instead one connection to a Unix socket the
//!   caller listens on, which `sandbox-init` makes before it starts the
//!   command; the caller's lifeline stays on the sandbox command's stdin
//!   either way.
//! - **Lifetime**: the sandbox dies with the process that spawned it (see
//!   [`sandbox_command`] for the per-thread catch), and everything in it
//!   dies with the agent: when the agent exits, pid 1 exits and the PID
//!   namespace is torn down, background processes included.
//! - **Environment**: exactly [`SandboxSpec::env`], nothing from the host,
//!   plus `PATH=`[`DEFAULT_PATH`] when the spec has no `PATH`,
//!   `HOME=`[`AGENT_HOME`] when it has no `HOME`, and `PWD` (the work
//!   directory, set by bwrap after changing into it).
//! - **File descriptors**: 0, 1 and 2 only (0 and 1 the channel's socket
//!   with [`CommandIo::Socket`]). Any other descriptor the host
//!   let through is closed by `sandbox-init` before the agent starts, and
//!   `sandbox-init` is not dumpable, so the agent cannot reach its
//!   descriptors through `/proc`.
//! - **Files**: read-only `/usr`, the `/bin`, `/sbin`, `/lib*` directories or
//!   links, a short list of files from `/etc` (dynamic linker,
//!   alternatives, public CA certificates, time zone, `os-release`; never
//!   `shadow`, `ssh/`, `ssl/private/` or `environment`) and the sandbox's own
//!   `passwd` and `group`; a fresh `/proc` with `/proc/sys` and the kernel's
//!   triggers read-only; a minimal `/dev`; a private, empty `/tmp`; the
//!   agent's own home [`AGENT_HOME`], an empty tmpfs of mode 0700 that
//!   belongs to it (or, with [`SandboxSpec::home`], a host directory kept
//!   from run to run, checked and mounted as the work directory is); the
//!   work directory, the only writable host path, as
//!   current directory; and `/run/constle/` with the constle binary (and
//!   the stdio socket), read-only. Nothing else: no home directory of the host
//!   (so no `$CONSTLE_HOME`, keys or logs), no `/sys`, no `/var`, no `/run`
//!   of the host. Everything else, `/` included, is read-only. With
//!   [`SandboxSpec::rootfs`] the system directories and `/etc` come from the
//!   rootfs instead (each of its top-level entries, read-only, but for the
//!   `/dev`, `/proc`, `/run`, `/tmp` and `/home` the sandbox brings
//!   itself). The work directory and the rootfs are checked on their real
//!   paths and mounted by descriptor: neither may contain or lie inside a
//!   [`SandboxSpec::private`] path, and a link swapped in after the check
//!   changes nothing.
//!
//! # Limits
//!
//! - Needs bubblewrap 0.8 or later and unprivileged user namespaces; an
//!   older `bwrap` refuses the invocation, so the run fails rather than
//!   starts weaker.
//! - As root with `CAP_SYS_ADMIN`, the work directory must be on a file
//!   system that supports idmapped mounts (ext4, xfs, btrfs, tmpfs since
//!   Linux 6.3, …; not overlayfs), in the user namespace that mounted it;
//!   mounts below the work directory are not shown then.
//! - With a rootfs, the rootfs must provide what the constle binary needs
//!   to start (its C library and dynamic linker), or constle must be built
//!   statically, and its own `/etc/passwd` (the sandbox's is not used).
//! - Stopping the sandbox is killing the launched process (`bwrap`); the
//!   agent gets `SIGKILL`, not a chance to clean up.
//! - bwrap 0.8 sets its parent-death signal once its namespaces are set up
//!   (a few milliseconds after it starts) and does not check afterwards
//!   whether the parent already died. A caller that dies inside that
//!   window leaves the sandbox running, unless it gave the sandbox a
//!   lifeline (see [`sandbox_command`]), as `constle run` does.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod bwrap;
mod descriptors;
mod error;
mod init;
mod launch;
mod layout;
mod netns;
mod plan;
mod private;
mod resolve;
mod seccomp;
mod setup;
mod spec;
mod splice;
mod stdio;

pub use bwrap::find_bwrap;
pub use bwrap::sandbox_command;
pub use error::{SandboxError, SetupCause, SetupFailure};
pub use init::{EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, EXIT_SANDBOX_FAILED, init_main};
pub use launch::launch_main;
pub use layout::{
    AGENT_HOME, AGENT_ID, CAPTURED_PORT, DEFAULT_PATH, EXE_INSIDE, HOSTNAME, INIT_SUBCOMMAND,
    LAUNCH_SUBCOMMAND, NAME_SERVER, RUN_DIR, STDIO_INSIDE, WRITABLE_ETC_FILES,
};
pub use netns::{NameSockets, NamespaceSockets, receive_sockets};
pub use private::Private;
pub use seccomp::seccomp_programs;
pub use setup::{SandboxEnd, sandbox_end, setup_failure};
pub use spec::{
    CommandIo, Door, MAX_DOORS, MIN_TMPFS_BYTES, NameService, Network, SandboxSpec, TmpfsSizes,
};
pub use splice::{SpliceSocket, splice_bidirectional};
pub use stdio::accept_stdio;
