//! What the caller decides about a run beyond the Agentfile, and what it
//! gets back.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::RunError;
use crate::workdir::WorkdirChecked;

/// What the caller decides about a run beyond the Agentfile.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// `$CONSTLE_HOME`: keys and logs.
    pub home: PathBuf,
    /// The Agentfile the manifest was read from: never visible to the agent.
    pub agentfile: PathBuf,
    /// Resolve names for the proxy from this file only (`--hosts-file`).
    pub hosts_file: Option<PathBuf>,
    /// The `constle` binary: the sandbox's launcher, and its init inside.
    pub constle_exe: PathBuf,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// The agent's exit code, or 128 + the signal that ended the run.
    pub exit_code: i32,
    /// From start to finish.
    pub duration: Duration,
}

/// How a run ended, and what the checks after it did in each work
/// directory (whether the run succeeded or not).
#[derive(Debug)]
pub struct RunEnd {
    /// The agent's exit, or why the run failed.
    pub outcome: Result<RunReport, RunError>,
    /// The agent's work directory and each declared one of a stdio MCP
    /// server, as far as the run got.
    pub workdirs: Vec<WorkdirChecked>,
}
