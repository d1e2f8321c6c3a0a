//! `sandbox.limits` in a run: the run's cgroups made before anything else
//! starts, watched while the agent runs, and emptied when it ends.

use std::path::PathBuf;
use std::time::Duration;

use constle_audit::{Event, EventError};
use constle_limits::{LimitHit, LimitKind, Limits, RunCgroup};
use constle_manifest::Manifest;

use crate::error::RunError;

/// How often the cgroups' counters are read while the agent runs.
const POLL: Duration = Duration::from_millis(250);

/// The run's cgroups; none when no limit is declared.
pub(crate) struct RunLimits(RunCgroup);

impl RunLimits {
    /// Makes the run's cgroups with the Agentfile's limits, or refuses the
    /// run with why a declared limit cannot be enforced here.
    pub(crate) fn create(manifest: &Manifest) -> Result<RunLimits, RunError> {
        let declared = &manifest.sandbox.limits;
        let limits = Limits {
            memory_bytes: declared.memory_bytes,
            pids: declared.pids,
            cpu_millis: declared.cpu_millis,
        };
        RunCgroup::create(manifest.name.as_str(), &limits)
            .map(RunLimits)
            .map_err(RunError::Limits)
    }

    /// What the sandbox's launcher enters.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.0.procs_files()
    }

    /// A limit reached so far, if any. Counters that cannot be read count
    /// as none: the kernel enforces the limits whether or not they are
    /// reported.
    pub(crate) fn reached_now(&self) -> Option<LimitHit> {
        self.0.hits().ok()?.into_iter().next()
    }

    /// Resolves when a limit is reached; never, when none can be.
    pub(crate) async fn reached(&self) -> LimitHit {
        loop {
            tokio::time::sleep(POLL).await;
            if let Some(hit) = self.reached_now() {
                return hit;
            }
        }
    }

    /// Kills whatever is left in the cgroups and removes them.
    pub(crate) fn end(self) {
        let _ = self.0.kill_all();
        let _ = self.0.remove();
    }
}

/// `limit_reached`: which limit, how often, and its value.
pub(crate) fn limit_event(hit: &LimitHit) -> Result<Event, EventError> {
    let limit = match hit.limit {
        LimitKind::Memory => "memory",
        LimitKind::Pids => "pids",
        _ => "other",
    };
    Event::new("limit_reached")?
        .with("limit", limit)?
        .with("count", i64::try_from(hit.count).unwrap_or(i64::MAX))?
        .with("detail", hit.detail.clone())
}
