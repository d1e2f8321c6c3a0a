//! Checkpoints during a run (docs/spec/log-checkpoints.md §6): with
//! witnesses, one round before the agent starts; rounds as the schedule
//! says while it runs; one after `run_finished`. Each round's entries go
//! through the run's log writer, and each witness that fails is a warning
//! on the terminal, unless the quorum is required: then the run stops.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use constle_audit::AuditLog;
use constle_checkpoints::{Checkpointer, Schedule, Trigger, Witnessing};
use constle_identity::{KeyKind, KeyStore};
use constle_manifest::Manifest;
use jiff::civil::Date;
use jiff::tz::TimeZone;

use crate::error::RunError;

/// How often the log's size is looked at while the agent runs.
const TICK: Duration = Duration::from_secs(1);

/// A run's checkpoints: the rounds' maker and their schedule.
pub(crate) struct RunCheckpoints {
    checkpointer: Checkpointer,
    schedule: Schedule,
}

impl RunCheckpoints {
    /// For a signed log (`identity.did`); `None` for an unsigned one. Keys
    /// and witness keys are read here, before anything starts.
    pub(crate) fn open(manifest: &Manifest, home: &Path) -> Result<Option<Self>, RunError> {
        let Some(config) = Witnessing::from_manifest(manifest)? else {
            return Ok(None);
        };
        let did = config.log_key.did().clone();
        let missing = |source| RunError::KeyMissing {
            did: did.to_string(),
            source,
        };
        let signer = KeyStore::open(home)
            .and_then(|store| store.find(KeyKind::Agent, &did))
            .map_err(missing)?;
        let schedule = Schedule::new(
            config.every_entries,
            config.every,
            0,
            Instant::now(),
            today(),
        );
        let dir = home.join("logs");
        let checkpointer = Checkpointer::new(config, signer, &dir, manifest.name.clone())?;
        Ok(Some(RunCheckpoints {
            checkpointer,
            schedule,
        }))
    }

    /// With witnesses, the round before the agent starts: a required
    /// quorum that cannot be had stops the run here.
    pub(crate) async fn first(&mut self, log: &AuditLog) -> Result<(), RunError> {
        if self.checkpointer.config().witnesses.is_empty() {
            let size = self.checkpointer.log_size().unwrap_or(0);
            self.schedule.done(size, Instant::now(), today());
            return Ok(());
        }
        self.stop_if_unwitnessed(Trigger::RunStart, log).await
    }

    /// The rounds while the agent runs; returns only when one missed a
    /// required quorum, with the reason.
    pub(crate) async fn watch(&mut self, log: &AuditLog) -> RunError {
        loop {
            tokio::time::sleep(TICK).await;
            let Ok(size) = self.checkpointer.log_size() else {
                continue;
            };
            if let Some(trigger) = self.schedule.due(size, Instant::now(), today())
                && let Err(stop) = self.stop_if_unwitnessed(trigger, log).await
            {
                return stop;
            }
        }
    }

    /// The round after `run_finished`.
    pub(crate) async fn last(&mut self, log: &AuditLog) -> Result<(), RunError> {
        self.stop_if_unwitnessed(Trigger::RunEnd, log).await
    }

    /// One round, recorded; the run's stop when its quorum is required and
    /// missed (or the checkpoint could not be made).
    async fn stop_if_unwitnessed(
        &mut self,
        trigger: Trigger,
        log: &AuditLog,
    ) -> Result<(), RunError> {
        let required = self.checkpointer.config().required;
        // The schedule records when the round read the log, not when it
        // ended: a round begun before 00:00 UTC does not close the new day.
        let (began, day) = (Instant::now(), today());
        let round = match self.checkpointer.round(trigger).await {
            Ok(round) => round,
            Err(err) => {
                let reason = format!("no checkpoint could be made: {err}");
                warn(&reason);
                return match required {
                    true => Err(RunError::Unwitnessed(reason)),
                    false => Ok(()),
                };
            }
        };
        let pending: Vec<_> = round.events.into_iter().map(|e| log.submit(e)).collect();
        let mut size = round.size;
        for entry in pending {
            size = size.max(entry.written().await?.seq + 1);
        }
        self.schedule.done(size, began, day);
        for warning in &round.warnings {
            warn(warning);
        }
        match round.stop {
            Some(reason) => Err(RunError::Unwitnessed(reason)),
            None => Ok(()),
        }
    }
}

fn today() -> Date {
    jiff::Timestamp::now()
        .to_zoned_datetime(TimeZone::UTC)
        .date()
}

/// On the host's standard error, like the run's other messages.
fn warn(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "constle: warning: {message}");
}
