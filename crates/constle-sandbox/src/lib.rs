//! The sandbox an agent runs in, and the relay inside it that is the agent's
//! only way out.
//!
//! Constle assumes the agent is compromised. The agent runs under
//! [bubblewrap](https://github.com/containers/bubblewrap) (`bwrap`) with its
//! own network namespace holding nothing but loopback: dialling any IPv4 or
//! IPv6 address fails with `Network is unreachable`, and no packet leaves.
//! The only ways out are Unix sockets that the host binds (the egress proxy,
//! MCP gates) and mounts in; the relay, the constle binary itself started as
//! `constle sandbox-init`, listens on `127.0.0.1` inside and forwards every
//! connection to its socket.
//!
//! ```text
//!  host                                 sandbox (bwrap)
//!  ────                                 ───────────────
//!  proxy ◄── /tmp/…/proxy.sock ══ro══► /run/constle/proxy.sock ◄── relay ◄── 127.0.0.1:3128 ◄── agent
//!  constle binary ═══════════════ro══► /run/constle/constle (runs the relay, then the agent)
//! ```
//!
//! - [`bwrap_command`] turns a [`SandboxSpec`] into the `bwrap` command,
//!   after checking it ([`SandboxError`]).
//! - [`init_main`] is what the hidden `constle sandbox-init` subcommand runs
//!   inside the sandbox.
//! - [`seccomp_programs`] is the seccomp filter for the sandbox, as the
//!   programs bwrap's `--add-seccomp-fd` installs.
//!
//! # Wiring it up
//!
//! The `constle` binary dispatches the hidden subcommand first thing, before
//! any other argument parsing:
//!
//! ```no_run
//! let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
//! if args.get(1).is_some_and(|a| a == constle_sandbox::INIT_SUBCOMMAND) {
//!     std::process::exit(constle_sandbox::init_main(args[2..].to_vec()));
//! }
//! ```
//!
//! and `constle run` builds the sandbox once the host sockets are bound:
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use constle_sandbox::{Relay, SandboxSpec, bwrap_command};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let spec = SandboxSpec {
//!     command: vec!["python3".into(), "agent.py".into()],
//!     workdir: "/home/me/agent".into(),
//!     env: BTreeMap::from([
//!         ("HTTPS_PROXY".into(), "http://127.0.0.1:3128".into()),
//!         ("HTTP_PROXY".into(), "http://127.0.0.1:3128".into()),
//!     ]),
//!     rootfs: None,
//!     relays: vec![Relay {
//!         name: "proxy".into(),
//!         listen: "127.0.0.1:3128".parse()?,
//!         host_socket: "/tmp/constle-run-1234/proxy.sock".into(),
//!     }],
//!     constle_exe: std::env::current_exe()?,
//! };
//! let status = bwrap_command(&spec)?.status()?; // the agent's status
//! # Ok(())
//! # }
//! ```
//!
//! # What the agent gets
//!
//! - **Namespaces**: its own network (loopback only), PID (it sees only the
//!   sandbox's processes), IPC, UTS (host name [`HOSTNAME`]), cgroup, mount
//!   and user namespaces; creating further user namespaces is disabled.
//!   Abstract Unix sockets belong to the network namespace, so the host's are
//!   out of reach too.
//! - **Privileges**: every capability dropped, `no_new_privs` set (by bwrap),
//!   a new session (no controlling terminal, so no `TIOCSTI` keystroke
//!   injection into the host's terminal), stdin `/dev/null`.
//! - **Lifetime**: the sandbox dies with the process that spawned `bwrap`
//!   (see [`bwrap_command`] for the per-thread catch), and everything in it
//!   dies with the agent: when the agent exits, the sandbox's PID namespace is
//!   torn down, background processes included.
//! - **Environment**: exactly [`SandboxSpec::env`], nothing from the host,
//!   plus `PATH=`[`DEFAULT_PATH`] when the spec has no `PATH`, and `PWD`
//!   (the work directory, set by bwrap after changing into it).
//! - **File descriptors**: 0, 1 and 2 only. Any other descriptor the host
//!   let through (one without close-on-exec, say a directory, which would
//!   let the agent walk the host's file tree) is closed by `sandbox-init`
//!   before the agent starts, and `sandbox-init` is not dumpable, so the
//!   agent cannot reach the relay's own descriptors through `/proc`.
//! - **Files**: read-only `/usr`, the `/bin`, `/sbin`, `/lib*` directories or
//!   links, and a short list of files from `/etc` (user and group names,
//!   dynamic linker, alternatives, public CA certificates, time zone,
//!   `os-release`; never `shadow`, `ssh/`, `ssl/private/` or `environment`);
//!   a fresh `/proc` and a minimal `/dev`; a private, empty `/tmp`; the work
//!   directory, the only writable host path, as current directory; and
//!   `/run/constle/` with the constle binary and the relay sockets,
//!   read-only. Nothing else: no home directory (so no `$CONSTLE_HOME`, keys
//!   or logs), no `/sys`, no `/var`, no `/run` of the host. Everything else,
//!   `/` included, is read-only. With [`SandboxSpec::rootfs`] the system
//!   directories and `/etc` files come from the rootfs instead (each of its
//!   top-level entries, read-only).
//!
//! # Limits
//!
//! - Needs bubblewrap 0.8 or later (`--disable-userns`); an older `bwrap`
//!   refuses the invocation, so the run fails rather than starts weaker.
//! - With a rootfs, the rootfs must provide what the constle binary needs
//!   to start (its C library and dynamic linker), or constle must be built
//!   statically.
//! - When constle runs as root, the agent is root in its user namespace,
//!   mapped to the host's root: without capabilities, but the owner of
//!   root-owned files it can see. Everything it can see is read-only apart
//!   from the work directory, `/tmp` and `/dev`, which are its own.
//! - [`seccomp_programs`] builds the system-call filter (`docs/sandbox.md`,
//!   "System calls"), but [`bwrap_command`] does not install it yet: until
//!   the launcher passes it to bwrap, the kernel's system call surface is
//!   what an unprivileged process in user namespaces has.
//! - Stopping the sandbox is killing `bwrap`; the agent gets `SIGKILL`, not
//!   a chance to clean up.
//! - bwrap 0.8 sets its parent-death signal once its namespaces are set up
//!   (a few milliseconds after it starts) and does not check afterwards
//!   whether the parent already died. If the caller dies inside that
//!   window, the sandbox runs on until the agent exits.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod bwrap;
mod error;
mod init;
mod layout;
mod seccomp;
mod spec;
mod splice;
mod wire;

pub use bwrap::bwrap_command;
pub use error::SandboxError;
pub use init::{EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, EXIT_SANDBOX_FAILED, init_main};
pub use layout::{DEFAULT_PATH, EXE_INSIDE, HOSTNAME, INIT_SUBCOMMAND, RUN_DIR};
pub use seccomp::seccomp_programs;
pub use spec::{Relay, SandboxSpec};
pub use splice::{SpliceSocket, splice_bidirectional};
