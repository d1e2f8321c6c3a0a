//! Where a run's time went, for `run_finished.phases_us` and the run
//! benchmark.

use std::time::{Duration, Instant};

/// The phases' durations; the proxy's start overlaps the others.
#[derive(Default)]
pub(crate) struct Timings {
    /// Squid started until it accepted connections; the sandbox starts
    /// meanwhile. Zero without egress, and when the agent was done first
    /// (Squid's start is then abandoned).
    pub proxy_start: Duration,
    /// The agent's work directory checked before the sandbox starts and
    /// put right after it is gone.
    pub workdir: Duration,
    /// bwrap spawned until the agent exited: sandbox start plus the agent.
    pub sandbox: Duration,
    /// Stopping the agent, the stdio servers (their work directories'
    /// checks included) and the proxy, recording the last decisions.
    pub teardown: Duration,
}

impl Timings {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        serde_json::json!({
            "proxy_start": micros(self.proxy_start),
            "workdir": micros(self.workdir),
            "sandbox": micros(self.sandbox),
            "teardown": micros(self.teardown),
        })
    }
}

/// A stopwatch read in laps: each lap is the time since the one before.
pub(crate) struct Laps(Instant);

impl Laps {
    pub(crate) fn start() -> Laps {
        Laps(Instant::now())
    }

    pub(crate) fn lap(&mut self) -> Duration {
        let now = Instant::now();
        std::mem::replace(&mut self.0, now).elapsed()
    }
}
