//! The server's process as the bridge sees it: how one is started
//! ([`Launch`]), what a started one is ([`Process`]), and what the bridge
//! reports about its life ([`ServerEvent`]).

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::pin::Pin;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

/// A started server: its stdin and stdout, and the process to wait for and
/// kill.
pub struct Process {
    /// The server's stdin.
    pub input: Pin<Box<dyn AsyncWrite + Send>>,
    /// The server's stdout.
    pub output: Pin<Box<dyn AsyncRead + Send>>,
    /// The process; killing it ends the server (for a sandboxed server,
    /// the sandbox's launcher, whose death takes the sandbox along).
    pub child: tokio::process::Child,
    /// Whatever must live exactly as long as the process (its sandbox's
    /// lifeline): dropped once it is gone.
    pub hold: Box<dyn Any + Send + Sync>,
}

impl fmt::Debug for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.child.id())
            .finish_non_exhaustive()
    }
}

/// The future a [`Launch`] returns.
pub type LaunchFuture = Pin<Box<dyn Future<Output = io::Result<Process>> + Send>>;

/// Starts the server: once when the bridge starts, and again for each new
/// session (see the crate docs).
pub trait Launch: Send + Sync + 'static {
    /// Starts one server process.
    fn launch(&self) -> LaunchFuture;
}

/// What the bridge reports about the server's processes, in order.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServerEvent {
    /// A process started, with its host pid.
    Started {
        /// The pid of [`Process::child`].
        pid: Option<u32>,
    },
    /// It could not be started: why (never holds a secret from the
    /// server's environment: the launcher's own error).
    NotStarted {
        /// The launcher's error.
        error: String,
    },
    /// A process is gone, and why.
    Exited {
        /// Why it ended.
        cause: ExitCause,
        /// Its exit status, when it could be had.
        status: Option<ExitStatus>,
    },
}

/// Why a server process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExitCause {
    /// It exited by itself, or closed its stdout.
    Exited,
    /// A request went unanswered for the response timeout: it was stopped.
    Unresponsive(Duration),
    /// The agent ended its session (`DELETE`): it was stopped.
    SessionEnded,
    /// The agent started a new session (`initialize`): it was stopped.
    SessionReplaced,
    /// The run ended: it was stopped.
    RunEnded,
}

impl ExitCause {
    /// A stable word for the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitCause::Exited => "exited",
            ExitCause::Unresponsive(_) => "unresponsive",
            ExitCause::SessionEnded => "session_ended",
            ExitCause::SessionReplaced => "session_replaced",
            ExitCause::RunEnded => "run_ended",
        }
    }
}

/// How a process ended, for the agent's error message: `exited with
/// status 3`, `was stopped: it did not answer within 120 s`, ….
pub(crate) fn describe(cause: ExitCause, status: Option<ExitStatus>) -> String {
    let stopped = |why: String| format!("was stopped: {why}");
    match cause {
        ExitCause::Exited => match status {
            Some(status) => match (status.code(), status.signal()) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(signal)) => format!("was killed by signal {signal}"),
                _ => "exited".into(),
            },
            None => "exited".into(),
        },
        ExitCause::Unresponsive(after) => stopped(format!(
            "it did not answer within {} s",
            after.as_secs_f64()
        )),
        ExitCause::SessionEnded => stopped("its session ended".into()),
        ExitCause::SessionReplaced => stopped("a new session started".into()),
        ExitCause::RunEnded => stopped("the run ended".into()),
    }
}
