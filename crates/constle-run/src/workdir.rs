//! The work directories of a run (the agent's, its kept home, and each
//! declared one of a stdio MCP server) before the sandbox starts and after
//! it is gone: wiring to `constle_workdir`, which decides, and the audit
//! events that record what it did.

use std::path::{Path, PathBuf};

use constle_audit::catalogue::{
    OrOmitted, SetidCleared, WorkdirPrepared, WorkdirQuarantined, WorkdirRestored,
};
use constle_audit::{AuditLog, Event};
use constle_hostids::HostId;
use constle_manifest::Manifest;
use constle_workdir::{Acting, Action, Report, Workdir};
use serde_json::{Value, json};

use crate::error::RunError;
use crate::events::record;

/// How many paths an event lists; the count says how many there were.
const MAX_LISTED: usize = 20;

/// Which of a run's work directories one is.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dir<'a> {
    /// The agent's work directory.
    Agent,
    /// The agent's kept home (`sandbox.home`).
    Home,
    /// A stdio MCP server's declared work directory.
    Server(&'a str),
}

impl Dir<'_> {
    fn server(self) -> Option<String> {
        match self {
            Dir::Server(id) => Some(id.to_owned()),
            Dir::Agent | Dir::Home => None,
        }
    }

    fn is_home(self) -> bool {
        matches!(self, Dir::Home)
    }

    /// The events' `home` field: `true` for the home, left out otherwise.
    fn home_field(self) -> OrOmitted<bool> {
        OrOmitted(self.is_home().then_some(true))
    }
}

/// What the check after the run did in one work directory.
#[derive(Clone, Debug)]
pub struct WorkdirChecked {
    /// The stdio MCP server whose work directory it is; `None`: the
    /// agent's.
    pub server: Option<String>,
    /// Whether it is the agent's kept home (`sandbox.home`) rather than
    /// its work directory.
    pub home: bool,
    /// The work directory.
    pub workdir: PathBuf,
    /// What was found and changed.
    pub report: Report,
}

/// Makes the default work directory (`./work` beside the Agentfile) when
/// the Agentfile names none and there is none yet: mode 0700, this user's
/// (a link or anything else already there is left to the checks before
/// the run). Returns its path when it made it, for the run summary.
pub fn make_default_workdir(manifest: &Manifest) -> Result<Option<PathBuf>, RunError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let sandbox = &manifest.sandbox;
    if sandbox.workdir_declared {
        return Ok(None);
    }
    match std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&sandbox.workdir)
    {
        Ok(()) => Ok(Some(sandbox.workdir.clone())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(source) => Err(RunError::Io {
            what: format!(
                "the Agentfile names no workdir, and the default {} cannot be made",
                sandbox.workdir.display()
            ),
            source,
        }),
    }
}

/// The quarantine of a run: `$CONSTLE_HOME/quarantine/<agent>-<time>-<pid>`.
pub(crate) fn quarantine_root(home: &Path, agent: &str) -> PathBuf {
    let time = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ");
    home.join("quarantine")
        .join(format!("{agent}-{time}-{}", std::process::id()))
}

/// Where the entries of `dir` are set aside.
pub(crate) fn quarantine_of(root: &Path, dir: Dir<'_>) -> PathBuf {
    match dir {
        Dir::Agent => root.join("workdir"),
        Dir::Home => root.join("home"),
        Dir::Server(id) => root.join(format!("mcp-{id}")),
    }
}

/// Makes the kept home (`sandbox.home`) when the Agentfile names one that
/// does not exist yet: mode 0700, this user's, like the default work
/// directory (its parent must exist). Returns its path when it made it,
/// for the run summary.
pub fn make_home(manifest: &Manifest) -> Result<Option<PathBuf>, RunError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let Some(home) = &manifest.sandbox.home else {
        return Ok(None);
    };
    match std::fs::DirBuilder::new().mode(0o700).create(home) {
        Ok(()) => Ok(Some(home.clone())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(source) => Err(RunError::Io {
            what: format!("sandbox.home {} cannot be made", home.display()),
            source,
        }),
    }
}

/// Checks and locks `path` for a sandbox that runs as `host_id` (a root
/// run) or as this user, and records what was kept from the agent.
pub(crate) async fn prepare(
    path: &Path,
    host_id: Option<&HostId>,
    log: &AuditLog,
    dir: Dir<'_>,
) -> Result<Workdir, RunError> {
    let acting = match host_id {
        Some(_) => Acting::Owner,
        None => Acting::this_user(),
    };
    let prepared = match dir {
        Dir::Home => Workdir::prepare_home(path, acting),
        Dir::Agent | Dir::Server(_) => Workdir::prepare(path, acting),
    };
    let workdir = prepared.map_err(|source| RunError::Workdir {
        server: dir.server(),
        home: dir.is_home(),
        source,
    })?;
    let (kept, recovered) = (workdir.kept_read_only(), workdir.recovered());
    if kept + recovered > 0 {
        let prepared = WorkdirPrepared {
            kept_read_only: kept,
            recovered,
            server: dir.server().into(),
            home: dir.home_field(),
        };
        record(log, prepared.into()).await?;
    }
    Ok(workdir)
}

/// Puts `workdir` right once its sandbox is gone, and records what it did.
pub(crate) async fn finish(
    workdir: Workdir,
    quarantine: &Path,
    log: &AuditLog,
    dir: Dir<'_>,
) -> Result<WorkdirChecked, RunError> {
    let path = workdir.path().to_path_buf();
    let report = workdir
        .finish(quarantine)
        .map_err(|source| RunError::Workdir {
            server: dir.server(),
            home: dir.is_home(),
            source,
        })?;
    for event in events(&report, dir) {
        record(log, event).await?;
    }
    Ok(WorkdirChecked {
        server: dir.server(),
        home: dir.is_home(),
        workdir: path,
        report,
    })
}

/// `workdir_quarantined`, `workdir_restored` and `setid_cleared`, each when
/// it has something to say.
fn events(report: &Report, dir: Dir<'_>) -> Vec<Event> {
    let mut events = Vec::new();
    if !report.set_aside.is_empty() {
        events.push(quarantined(report, dir).into());
    }
    if !report.write_opened.is_empty() || report.root_changed.is_some() || report.returned > 0 {
        events.push(restored(report, dir).into());
    }
    if !report.setid_cleared.is_empty() {
        let cleared = SetidCleared {
            count: report.setid_cleared.len(),
            paths: paths(&report.setid_cleared),
            server: dir.server().into(),
            home: dir.home_field(),
        };
        events.push(cleared.into());
    }
    events
}

fn quarantined(report: &Report, dir: Dir<'_>) -> WorkdirQuarantined {
    let items: Vec<Value> = report
        .set_aside
        .iter()
        .take(MAX_LISTED)
        .map(|item| {
            let (action, removed) = match &item.action {
                Action::Moved => ("moved", None),
                Action::Restored => ("moved, the earlier version put back", None),
                Action::Rewritten { removed } => ("rewritten without settings", Some(removed)),
            };
            json!({
                "path": item.path.to_string_lossy(),
                "what": item.what,
                "action": action,
                "removed": removed,
                "kept": item.kept,
            })
        })
        .collect();
    let quarantine = report
        .quarantine
        .as_ref()
        .map(|q| q.to_string_lossy().into_owned());
    WorkdirQuarantined {
        count: report.set_aside.len(),
        items: Value::Array(items),
        quarantine,
        server: dir.server().into(),
        home: dir.home_field(),
    }
}

fn restored(report: &Report, dir: Dir<'_>) -> WorkdirRestored {
    WorkdirRestored {
        write_removed: report.write_opened.len(),
        paths: paths(&report.write_opened),
        root_was: report.root_changed.clone(),
        read_only_returned: report.returned,
        server: dir.server().into(),
        home: dir.home_field(),
    }
}

fn paths(found: &[PathBuf]) -> Vec<String> {
    found
        .iter()
        .take(MAX_LISTED)
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}
