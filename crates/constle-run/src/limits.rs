//! `sandbox.limits` in a run: the run's cgroups made before anything else
//! starts, watched while the agent runs, and emptied when it ends; and the
//! same limits for each stdio MCP server, in cgroups of its own. Also
//! `sandbox.tmpfs`, the sizes of every sandbox's file systems in memory.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use constle_audit::AuditLog;
use constle_audit::catalogue::LimitReached;
use constle_limits::{LimitHit, LimitKind, Limits, RunCgroup};
use constle_manifest::Manifest;
use constle_sandbox::TmpfsSizes;
use tokio::task::JoinHandle;

use crate::error::RunError;
use crate::events::record;

/// The sizes of a sandbox's file systems in memory: the Agentfile's
/// `sandbox.tmpfs`, the sandbox's defaults where it is silent.
pub(crate) fn tmpfs_sizes(manifest: &Manifest) -> TmpfsSizes {
    let declared = manifest.sandbox.tmpfs;
    let default = TmpfsSizes::DEFAULT;
    TmpfsSizes {
        tmp: declared.tmp.unwrap_or(default.tmp),
        home: declared.home.unwrap_or(default.home),
        shm: declared.shm.unwrap_or(default.shm),
    }
}

/// How often the cgroups' counters are read while the agent runs.
const POLL: Duration = Duration::from_millis(250);

/// The run's cgroups; none when no limit is declared.
pub(crate) struct RunLimits(RunCgroup);

impl RunLimits {
    /// Makes the run's cgroups with the Agentfile's limits, or refuses the
    /// run with why a declared limit cannot be enforced here.
    pub(crate) fn create(manifest: &Manifest) -> Result<RunLimits, RunError> {
        RunLimits::labelled(manifest, manifest.name.as_str())
    }

    /// The cgroups of stdio MCP server `id`, with the same limits as the
    /// agent's: the server's use counts against its own, not the agent's.
    pub(crate) fn for_server(manifest: &Manifest, id: &str) -> Result<RunLimits, RunError> {
        // A cgroup label is at most 64 bytes; agent names are ASCII.
        let agent = manifest.name.as_str();
        let room = 64usize.saturating_sub(id.len() + "-mcp-".len());
        let label = format!("{}-mcp-{id}", &agent[..agent.len().min(room)]);
        RunLimits::labelled(manifest, &label)
    }

    fn labelled(manifest: &Manifest, label: &str) -> Result<RunLimits, RunError> {
        let declared = &manifest.sandbox.limits;
        let limits = Limits {
            memory_bytes: declared.memory_bytes,
            pids: declared.pids,
            cpu_millis: declared.cpu_millis,
        };
        RunCgroup::create(label, &limits)
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

/// A stdio server's limits, watched while it runs: the first time each
/// limit is reached is recorded (`limit_reached` with `server`), and the
/// run goes on. Memory ends the server's process (the kernel's OOM
/// killer), which its bridge reports as an exit.
pub(crate) struct ServerLimits {
    limits: Arc<RunLimits>,
    recorded: Arc<tokio::sync::Mutex<HashSet<LimitKind>>>,
    watch: JoinHandle<()>,
    log: Arc<AuditLog>,
    server: String,
}

impl ServerLimits {
    pub(crate) fn watch(limits: RunLimits, log: &Arc<AuditLog>, server: &str) -> ServerLimits {
        let limits = Arc::new(limits);
        let recorded = Arc::default();
        let watch = tokio::spawn({
            let (limits, recorded, log) =
                (Arc::clone(&limits), Arc::clone(&recorded), Arc::clone(log));
            let server = server.to_owned();
            async move {
                loop {
                    tokio::time::sleep(POLL).await;
                    if record_new(&limits, &recorded, &log, &server).await.is_err() {
                        return;
                    }
                }
            }
        });
        ServerLimits {
            limits,
            recorded,
            watch,
            log: Arc::clone(log),
            server: server.to_owned(),
        }
    }

    /// Once the server is stopped: records a limit reached since the last
    /// look, then empties and removes the cgroups.
    pub(crate) async fn end(self) -> Result<(), RunError> {
        self.watch.abort();
        // Gone once awaited: its hold on the cgroups with it.
        let _ = self.watch.await;
        let recorded = record_new(&self.limits, &self.recorded, &self.log, &self.server).await;
        if let Ok(limits) = Arc::try_unwrap(self.limits) {
            limits.end();
        }
        recorded
    }
}

/// Records each limit `limits` reached that is not in `recorded` yet.
async fn record_new(
    limits: &RunLimits,
    recorded: &tokio::sync::Mutex<HashSet<LimitKind>>,
    log: &AuditLog,
    server: &str,
) -> Result<(), RunError> {
    let Ok(hits) = limits.0.hits() else {
        return Ok(());
    };
    let mut recorded = recorded.lock().await;
    for hit in hits {
        if recorded.insert(hit.limit) {
            record(log, limit_event(&hit, Some(server)).into()).await?;
        }
    }
    Ok(())
}

/// `sandbox.limits.wall_clock_seconds`, counted from `since` (when the
/// run began): when the run must end, if it has such a limit.
pub(crate) fn wall_clock_deadline(manifest: &Manifest, since: Instant) -> Option<WallClock> {
    let seconds = manifest.sandbox.limits.wall_clock_seconds?;
    Some(WallClock {
        seconds,
        deadline: since + Duration::from_secs(seconds.into()),
    })
}

/// A run's wall-clock limit.
pub(crate) struct WallClock {
    seconds: u32,
    deadline: Instant,
}

/// Resolves when the run has lasted as long as `limit` allows: never,
/// without one. Then records `limit_reached` (`limit: wall_clock`) and
/// says why the run ends.
pub(crate) async fn wall_clock_reached(
    limit: Option<&WallClock>,
    log: &AuditLog,
) -> Result<i32, RunError> {
    let Some(limit) = limit else {
        return std::future::pending().await;
    };
    tokio::time::sleep_until(limit.deadline.into()).await;
    let event = LimitReached {
        limit: "wall_clock".to_owned(),
        count: 1,
        detail: format!("{} s", limit.seconds),
        server: None.into(),
    };
    record(log, event.into()).await?;
    Err(RunError::LimitReached(format!(
        "the wall-clock limit ({} s) was reached",
        limit.seconds
    )))
}

/// `limit_reached`: which limit, how often, and its value; and the stdio
/// MCP server whose limit it was, if any.
pub(crate) fn limit_event(hit: &LimitHit, server: Option<&str>) -> LimitReached {
    let limit = match hit.limit {
        LimitKind::Memory => "memory",
        LimitKind::Pids => "pids",
        _ => "other",
    };
    LimitReached {
        limit: limit.to_owned(),
        count: hit.count,
        detail: hit.detail.clone(),
        server: server.map(str::to_owned).into(),
    }
}
