//! The signals that end a run.

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::error::{RunError, io};

/// SIGINT, SIGTERM and SIGHUP. Taken over before anything of the run
/// starts, so that a signal during start-up ends the run through the same
/// teardown instead of killing constle between two child processes.
pub(crate) struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl StopSignals {
    pub(crate) fn take_over() -> Result<StopSignals, RunError> {
        let stream = |kind| signal(kind).map_err(io("cannot handle signals"));
        Ok(StopSignals {
            interrupt: stream(SignalKind::interrupt())?,
            terminate: stream(SignalKind::terminate())?,
            hangup: stream(SignalKind::hangup())?,
        })
    }

    /// The next stop signal's name and number.
    pub(crate) async fn recv(&mut self) -> (&'static str, i32) {
        tokio::select! {
            _ = self.interrupt.recv() => ("SIGINT", 2),
            _ = self.terminate.recv() => ("SIGTERM", 15),
            _ = self.hangup.recv() => ("SIGHUP", 1),
        }
    }
}
