//! The probes that need namespaces of their own, run in a child process:
//! the constle binary started again as `constle preflight-probe`
//! ([`child`]), which tries each step and prints what happened.
//!
//! Why a child process, and a fresh one: `unshare(CLONE_NEWUSER)` is
//! refused to a process with threads, and whatever it enters it cannot
//! leave, so the process that calls it must be one that exits right after;
//! a re-executed binary is single-threaded and needs no `fork` in a
//! process that may have threads. Its namespaces die with it.

pub(crate) mod child;
mod clone;

use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::ProbeError;
use crate::steps::{PROBE_SUBCOMMAND, Probes};

/// The id the probe process drops to when the run takes the root path:
/// there, the launcher runs bubblewrap as an unprivileged host id, so
/// whether root could make namespaces says nothing. `nobody`.
const UNPRIVILEGED_ID: &str = "65534";

/// Runs the probe process (`constle_exe preflight-probe`) and returns what
/// it found; `as_root`: drop to an unprivileged id first.
pub(crate) fn run(constle_exe: &Path, as_root: bool) -> Result<Probes, ProbeError> {
    let mut command = Command::new(constle_exe);
    command.arg(PROBE_SUBCOMMAND);
    if as_root {
        command.args([child::AS_ARG, UNPRIVILEGED_ID]);
    }
    let out = command
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|source| ProbeError::Spawn {
            exe: constle_exe.display().to_string(),
            source,
        })?;
    match out.status.success() {
        true => Ok(Probes::parse(&String::from_utf8_lossy(&out.stdout))),
        false => Err(ProbeError::Failed {
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        }),
    }
}
