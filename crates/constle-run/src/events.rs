//! Writing the run's own events: the ones the supervisor, the stdio
//! servers, the limits and the work-directory checks record.

use std::time::Duration;

use constle_audit::{AuditError, AuditLog, Event, EventError};
use constle_manifest::{Egress, Manifest};

use crate::error::RunError;
use crate::timings::Timings;

/// An event with no fields yet.
pub(crate) fn event(name: &str) -> Event {
    // Every name used here is a literal snake_case word.
    Event::new(name).unwrap_or_else(|_| unreachable!("event names in this module are valid"))
}

/// Submits `event` and waits until it is written.
pub(crate) async fn record(log: &AuditLog, event: Event) -> Result<(), AuditError> {
    log.submit(event).written().await.map(|_| ())
}

/// `event` with the stdio MCP server it concerns, if any (the agent's own
/// events carry no `server`).
pub(crate) fn of_server(event: Event, server: Option<&str>) -> Result<Event, EventError> {
    match server {
        Some(server) => event.with("server", server),
        None => Ok(event),
    }
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
    let started = event("run_started")
        .with("command", manifest.sandbox.command.clone())
        .and_then(|e| e.with("workdir", manifest.sandbox.workdir.display().to_string()))
        .and_then(|e| e.with("egress", egress))
        .and_then(|e| e.with("allowed_hosts", hosts))
        .and_then(|e| e.with("constle_version", env!("CARGO_PKG_VERSION")))
        .and_then(|e| e.with("policy_digest", manifest.policy_digest.to_string()));
    started.unwrap_or_else(|_| event("run_started"))
}

/// `run_finished`, naming the run's `run_started` (which pairs the two for
/// a receipt even when runs of the agent overlap, or one before was killed
/// and never finished).
pub(crate) fn run_finished(
    run_started_seq: u64,
    outcome: &Result<(i32, Timings), RunError>,
    duration: Duration,
) -> Option<Event> {
    let exit_code = outcome.as_ref().map_or(125, |(code, _)| *code);
    let finished = event("run_finished")
        .with("run_started_seq", run_started_seq)
        .and_then(|e| e.with("exit_status", exit_code))
        .and_then(|e| e.with("duration_ms", duration.as_millis() as i64));
    let finished = match outcome {
        Ok((_, timings)) => finished.and_then(|e| e.with("phases_us", timings.to_json())),
        Err(err) => finished.and_then(|e| e.with("error", err.to_string())),
    };
    finished.ok()
}
