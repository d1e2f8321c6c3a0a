//! Writing the run's own events: the ones the supervisor, the stdio
//! servers, the limits and the work-directory checks record.

use std::time::Duration;

use constle_audit::catalogue::{RunFinished, RunStarted};
use constle_audit::{AuditError, AuditLog, Event};
use constle_manifest::{Egress, Manifest};

use crate::error::RunError;
use crate::timings::Timings;

/// Submits `event` and waits until it is written.
pub(crate) async fn record(log: &AuditLog, event: Event) -> Result<(), AuditError> {
    log.submit(event).written().await.map(|_| ())
}

/// `run_started`: what runs, where, and under which policy.
pub(crate) fn run_started(manifest: &Manifest) -> Event {
    let network = &manifest.sandbox.network;
    let egress = match network.egress {
        Egress::None => "none",
        Egress::Restricted => "restricted",
        Egress::Open => "open",
    };
    let hosts: Vec<String> = network
        .allowed_hosts
        .iter()
        .map(ToString::to_string)
        .collect();
    RunStarted {
        command: manifest.sandbox.command.clone(),
        workdir: manifest.sandbox.workdir.display().to_string(),
        egress: egress.to_owned(),
        allowed_hosts: hosts,
        constle_version: env!("CARGO_PKG_VERSION").to_owned(),
        policy_digest: manifest.policy_digest.to_string(),
    }
    .into()
}

/// `run_finished`, naming the run's `run_started` (which pairs the two for
/// a receipt even when runs of the agent overlap, or one before was killed
/// and never finished).
pub(crate) fn run_finished(
    run_started_seq: u64,
    outcome: &Result<(i32, Timings), RunError>,
    duration: Duration,
) -> Event {
    let (exit_status, phases_us, error) = match outcome {
        Ok((code, timings)) => (*code, Some(timings.to_json()), None),
        Err(err) => (125, None, Some(err.to_string())),
    };
    RunFinished {
        run_started_seq,
        exit_status,
        duration_ms: duration.as_millis(),
        phases_us: phases_us.into(),
        error: error.into(),
    }
    .into()
}
