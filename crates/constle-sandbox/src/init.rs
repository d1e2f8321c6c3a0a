//! `constle sandbox-init`: the first process inside the sandbox. It starts
//! the agent, reaps every process of the sandbox, and exits with the
//! agent's status.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use nix::sys::resource::{Resource, setrlimit};
use nix::sys::stat::{SFlag, fstat};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::layout::INIT_SUBCOMMAND;

/// `--stdio SOCKET`: the socket the command's stdin and stdout connect to.
pub(crate) const STDIO_FLAG: &str = "--stdio";

/// Exit status when the sandbox could not be set up, or `sandbox-init`
/// itself fails (bad arguments, the stdio socket unreachable).
pub const EXIT_SANDBOX_FAILED: i32 = 125;
/// Exit status when the agent's command exists but cannot be run.
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// Exit status when the agent's command is not found.
pub const EXIT_NOT_FOUND: i32 = 127;

#[derive(Debug, thiserror::Error)]
enum InitError {
    #[error(
        "{0}\nusage: constle {INIT_SUBCOMMAND} [--stdio SOCKET] -- COMMAND [ARG]...\n\
         (this subcommand runs inside the sandbox; `constle run` starts it)"
    )]
    Usage(String),
    #[error("cannot close the file descriptors inherited from the host: {0}")]
    Fds(io::Error),
    #[error("cannot start init's runtime: {0}")]
    Runtime(io::Error),
    #[error("cannot connect the command's stdin and stdout to {socket:?}: {source}")]
    Stdio { socket: PathBuf, source: io::Error },
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        program: OsString,
        source: io::Error,
    },
    #[error("cannot wait for the agent: {0}")]
    Wait(io::Error),
    #[error("cannot turn core dumps off: {0}")]
    Limit(io::Error),
}

impl InitError {
    fn exit_code(&self) -> i32 {
        match self {
            InitError::Spawn { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                EXIT_NOT_FOUND
            }
            InitError::Spawn { .. } => EXIT_CANNOT_EXECUTE,
            _ => EXIT_SANDBOX_FAILED,
        }
    }
}

/// Runs `constle sandbox-init ARGS`; `args` are the arguments after the
/// subcommand. Returns the process's exit status; the binary exits with it.
///
/// In order:
/// 1. closes every file descriptor above 2 that the host let through
///    (any descriptor without close-on-exec: Rust never creates one, so each
///    came from outside and may reach host files, such as a directory);
/// 2. makes itself non-dumpable, so the agent (same user) cannot trace it
///    or open its `/proc/PID/fd`;
/// 3. starts the agent with stdin `/dev/null`, stdout and stderr inherited,
///    and the sandbox's environment; with `--stdio SOCKET`, connects to
///    the Unix socket twice first: the second connection is the command's
///    stdin and stdout (a stdio MCP server's protocol channel), and on the
///    first it says `started`, or `failed: <why>` when the command could
///    not be started;
/// 4. reaps every process that ends in the sandbox, and exits with the
///    agent's status: its exit code, or 128 + the signal that
///    killed it.
///
/// Failures of its own exit with [`EXIT_SANDBOX_FAILED`] (125) after a
/// message on stderr. A command that is not found gives
/// [`EXIT_NOT_FOUND`] (127), one that cannot be executed
/// [`EXIT_CANNOT_EXECUTE`] (126). The agent may exit with these codes too.
pub fn init_main(args: Vec<OsString>) -> i32 {
    match init(args) {
        Ok(code) => code,
        Err(err) => {
            let _ = writeln!(io::stderr().lock(), "constle {INIT_SUBCOMMAND}: {err}");
            err.exit_code()
        }
    }
}

fn init(args: Vec<OsString>) -> Result<i32, InitError> {
    let args = parse_args(args)?;
    close_inherited_fds().map_err(InitError::Fds)?;
    // Best effort: without it init is only as exposed as the agent.
    let _ = nix::sys::prctl::set_dumpable(false);
    // No core files, for good: a crashing agent must not make the kernel
    // write its memory anywhere. (A host whose core_pattern is a pipe, as
    // with systemd-coredump or apport, still has its handler started by the
    // kernel, which ignores this limit for pipes; the handler is told the
    // limit, 0, and the agent's unprivileged uid.)
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(|e| InitError::Limit(e.into()))?;
    hold_lifeline()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(InitError::Runtime)?;
    runtime.block_on(run(args))
}

/// When stdin is a pipe, it is the caller's lifeline: the caller holds its
/// write end and never writes, so it reaches its end exactly when the
/// caller is gone, and then the sandbox ends (as pid 1, init takes every
/// process of it along). bubblewrap's parent-death signal does the same
/// but is set only once bwrap is under way; a caller that died before
/// that would otherwise leave the sandbox running.
fn hold_lifeline() -> Result<(), InitError> {
    let is_pipe = fstat(io::stdin())
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFIFO);
    if !is_pipe {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("lifeline".into())
        .spawn(|| {
            until_closed(io::stdin().lock());
            let _ = writeln!(
                io::stderr().lock(),
                "constle {INIT_SUBCOMMAND}: the process that started the sandbox is gone; \
                 the sandbox ends"
            );
            std::process::exit(EXIT_SANDBOX_FAILED);
        })
        .map(drop)
        .map_err(InitError::Runtime)
}

/// Reads `from` to its end (or a lasting error), discarding.
fn until_closed(mut from: impl io::Read) {
    let mut buf = [0u8; 64];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// `sandbox-init`'s arguments.
#[derive(Debug)]
struct InitArgs {
    /// The socket whose connection is the command's stdin and stdout.
    stdio: Option<PathBuf>,
    command: Vec<OsString>,
}

fn parse_args(args: Vec<OsString>) -> Result<InitArgs, InitError> {
    let mut args = args.into_iter();
    let mut stdio = None;
    loop {
        match args.next() {
            None => return Err(InitError::Usage("missing `--` before the command".into())),
            Some(arg) if arg == "--" => break,
            Some(arg) if arg == STDIO_FLAG && stdio.is_none() => {
                let socket = args
                    .next()
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .ok_or_else(|| InitError::Usage("`--stdio` needs an absolute path".into()))?;
                stdio = Some(socket);
            }
            Some(arg) => return Err(InitError::Usage(format!("unexpected argument {arg:?}"))),
        }
    }
    let command: Vec<OsString> = args.collect();
    if command.first().is_none_or(|c| c.is_empty()) {
        return Err(InitError::Usage("no command after `--`".into()));
    }
    Ok(InitArgs { stdio, command })
}

/// The command's stdin and stdout: `/dev/null` and init's own; or, with
/// `--stdio`, both one connection to the socket, made after a first one
/// that says whether the command started ([`report_start`]).
fn command_io(stdio: Option<&Path>) -> Result<CommandIo, InitError> {
    let Some(socket) = stdio else {
        return Ok(CommandIo {
            stdin: Stdio::null(),
            stdout: Stdio::inherit(),
            report: None,
        });
    };
    let failed = |source| InitError::Stdio {
        socket: socket.to_path_buf(),
        source,
    };
    let connect = || std::os::unix::net::UnixStream::connect(socket).map_err(failed);
    let report = connect()?;
    let stream = connect()?;
    let input = stream.try_clone().map_err(failed)?;
    Ok(CommandIo {
        stdin: Stdio::from(OwnedFd::from(input)),
        stdout: Stdio::from(OwnedFd::from(stream)),
        report: Some(report),
    })
}

struct CommandIo {
    stdin: Stdio,
    stdout: Stdio,
    /// With `--stdio`: where the start of the command is reported.
    report: Option<std::os::unix::net::UnixStream>,
}

/// Tells the caller of a `--stdio` sandbox whether its command started:
/// `started`, or `failed: <why>` (a command that does not exist, or cannot
/// be executed), so that a server that cannot start fails the run before
/// the agent starts instead of looking like one that exited.
fn report_start(
    report: Option<std::os::unix::net::UnixStream>,
    spawned: &Result<std::process::Child, io::Error>,
) {
    let Some(mut report) = report else { return };
    let said = match spawned {
        Ok(_) => "started\n".to_owned(),
        Err(e) => format!("failed: {e}\n"),
    };
    let _ = report.write_all(said.as_bytes());
}

/// Closes every descriptor above 2 without close-on-exec.
///
/// Sound without `unsafe` in this crate: Rust's standard library and tokio
/// open every descriptor with close-on-exec, so one without it is owned by
/// no object of this process and closing it cannot invalidate one.
fn close_inherited_fds() -> io::Result<()> {
    let cloexec = i64::from(nix::fcntl::OFlag::O_CLOEXEC.bits());
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // The listing's own descriptor is gone by now: skip what vanished.
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|line| line.strip_prefix("flags:"))
            .and_then(|v| i64::from_str_radix(v.trim(), 8).ok())
            .ok_or_else(|| io::Error::other(format!("no flags in /proc/self/fdinfo/{fd}")))?;
        if flags & cloexec == 0 {
            nix::unistd::close(fd).map_err(io::Error::from)?;
        }
    }
    Ok(())
}

async fn run(args: InitArgs) -> Result<i32, InitError> {
    let InitArgs { stdio, command } = args;
    // Before the agent exists, so that no exit goes unnoticed.
    let mut children = Reaper::new()?;
    let io = command_io(stdio.as_deref())?;
    let spawned = std::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(io.stdin)
        .stdout(io.stdout)
        .spawn();
    report_start(io.report, &spawned);
    let agent = spawned.map_err(|source| InitError::Spawn {
        program: command[0].clone(),
        source,
    })?;
    children.wait_for(Pid::from_raw(agent.id() as i32)).await
}

/// As the sandbox's pid 1, init inherits every process whose parent exits
/// and must reap it, or zombies would pile up (each holding a pid). The
/// agent's own exit is found among them.
struct Reaper {
    sigchld: tokio::signal::unix::Signal,
}

impl Reaper {
    fn new() -> Result<Reaper, InitError> {
        let sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
            .map_err(InitError::Wait)?;
        Ok(Reaper { sigchld })
    }

    /// Reaps every exited process until `agent` is among them: its status.
    async fn wait_for(&mut self, agent: Pid) -> Result<i32, InitError> {
        loop {
            while let Some((pid, code)) = reap_one()? {
                if pid == agent {
                    return Ok(code);
                }
            }
            self.sigchld.recv().await;
        }
    }
}

/// One exited child, if any, and its exit code (128 + signal if killed).
fn reap_one() -> Result<Option<(Pid, i32)>, InitError> {
    match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(pid, code)) => Ok(Some((pid, code))),
        Ok(WaitStatus::Signaled(pid, signal, _)) => Ok(Some((pid, 128 + signal as i32))),
        Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => Ok(None),
        // Stopped or continued children are not exits; look again.
        Ok(_) => reap_one(),
        Err(errno) => Err(InitError::Wait(errno.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_arguments() {
        let args = parse_args(os(&["--", "sh", "-c", "--stdio"])).unwrap();
        assert_eq!(args.stdio, None);
        assert_eq!(args.command, os(&["sh", "-c", "--stdio"]));
        let args = parse_args(os(&["--stdio", "/run/constle/stdio", "--", "srv"])).unwrap();
        assert_eq!(args.stdio, Some(PathBuf::from("/run/constle/stdio")));

        for bad in [
            &[][..],
            &["sh"],
            &["--"],
            &["--", ""],
            &[
                "--relay",
                "proxy,127.0.0.1:3128,/run/constle/proxy.sock",
                "--",
                "sh",
            ],
            &["--bogus", "--", "sh"],
            &["--stdio", "relative", "--", "sh"],
            &["--stdio", "/a", "--stdio", "/b", "--", "sh"],
            &["--stdio"],
        ] {
            let err = parse_args(os(bad)).unwrap_err();
            assert_eq!(err.exit_code(), EXIT_SANDBOX_FAILED, "{bad:?}");
        }
    }

    #[test]
    fn usage_errors_exit_125() {
        assert_eq!(init_main(os(&["--", ""])), EXIT_SANDBOX_FAILED);
    }
}
