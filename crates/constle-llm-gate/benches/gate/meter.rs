//! The meters the gates are measured with, beside `Unmetered`: the spend
//! ledger a run charges (`constle_spend`, the embedded store: each hold
//! and each settlement a durable write, lock, fsync and rename), alone or
//! with the audit writes a run makes around each call (a signed
//! `llm_reserved`, written while the call is on its way and on disk
//! before its answer passes; an `llm_call` after its settlement), as
//! `constle-run`'s model meter does.
//!
//! The events have the fields and about the size of the run's, written
//! through the same signed, fsynced `AuditLog`; the run's own meter is
//! private to `constle-run`, so this one stands in for it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use constle_audit::{Appender, AuditLog, Event};
use constle_identity::{Name, SigningIdentity};
use constle_llm_gate::{
    Call, DoneFuture, Held, Meter, MeterRefusal, Reason, Recording, Reservation, ReserveFuture,
    Settled,
};
use constle_spend::{Caps, Hold, Ledger, LedgerConfig, LedgerKey, RunMeter, Source, usd};
use rust_decimal::{Decimal, RoundingStrategy};

/// Charges each call to an embedded ledger under `dir`, and with `audit`
/// records it in a signed log there too.
#[derive(Clone)]
pub struct LedgerMeter(Arc<Inner>);

struct Inner {
    run: RunMeter,
    log: Option<AuditLog>,
    holds: Mutex<HashMap<u64, Hold>>,
    next: AtomicU64,
}

impl LedgerMeter {
    /// A run's meter on a fresh ledger where `config` says, with caps no
    /// call reaches, and with `logs` a signed audit log there.
    pub async fn open(config: LedgerConfig, logs: Option<&Path>) -> LedgerMeter {
        let agent = Name::new("bench-agent").expect("a name");
        let ledger = Ledger::open(&config, LedgerKey::for_name(&agent))
            .await
            .expect("a ledger");
        let far = Some(Decimal::new(1_000_000_000, 0));
        let run = ledger.start_run(Caps {
            per_run: far,
            per_day: far,
            per_month: far,
        });
        let log = logs.map(|logs| {
            let key = SigningIdentity::from_bytes(&[42; 32]);
            let appender = Appender::new(logs, agent, Some(key)).expect("a log");
            AuditLog::start(appender)
        });
        LedgerMeter(Arc::new(Inner {
            run,
            log,
            holds: Mutex::default(),
            next: AtomicU64::new(0),
        }))
    }
}

impl Meter for LedgerMeter {
    fn reserve<'a>(&'a self, call: &'a Call) -> ReserveFuture<'a> {
        Box::pin(self.0.reserve(call))
    }

    fn settle(&self, held: Held, call: Call, settled: Settled) -> DoneFuture<'_> {
        Box::pin(self.0.settle(held, call, settled))
    }
}

impl Inner {
    async fn reserve(&self, call: &Call) -> Result<Reservation, MeterRefusal> {
        let amount = call
            .worst_case_usd
            .round_dp_with_strategy(10, RoundingStrategy::AwayFromZero);
        let source = Source::Llm {
            provider: call.provider.clone(),
            model: call.model.clone(),
        };
        let hold = self
            .run
            .hold(amount, source, jiff::Timestamp::now())
            .await
            .map_err(|err| MeterRefusal {
                reason: Reason::LedgerUnavailable,
                message: err.to_string(),
            })?;
        let totals = hold.totals();
        let event = Event::new("llm_reserved")
            .and_then(|e| e.with("provider", call.provider.as_str()))
            .and_then(|e| e.with("model", call.model.as_str()))
            .and_then(|e| e.with("api", call.kind.as_str()))
            .and_then(|e| e.with("transport", "http"))
            .and_then(|e| e.with("input_tokens_bound", call.input_tokens_bound))
            .and_then(|e| e.with("max_output_tokens", call.output_tokens_bound))
            .and_then(|e| e.with("reserved_usd", usd(amount)))
            .and_then(|e| e.with("run_usd", usd(totals.run)))
            .and_then(|e| e.with("day_usd", usd(totals.day)))
            .and_then(|e| e.with("month_usd", usd(totals.month)));
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.holds.lock().expect("holds").insert(id, hold);
        // As the run's meter: the call leaves while its record is written.
        let recorded = match &self.log {
            Some(log) => {
                let written = log.submit(event.expect("an event"));
                Recording::pending(async move {
                    written
                        .written()
                        .await
                        .map(drop)
                        .map_err(|err| MeterRefusal {
                            reason: Reason::LedgerUnavailable,
                            message: err.to_string(),
                        })
                })
            }
            None => Recording::done(),
        };
        Ok(Reservation {
            held: Held(id),
            recorded,
        })
    }

    async fn settle(&self, held: Held, call: Call, settled: Settled) {
        let Some(hold) = self.holds.lock().expect("holds").remove(&held.0) else {
            return;
        };
        let reserved = hold.amount();
        let Ok(totals) = self.run.settle(hold, settled.cost_usd).await else {
            return;
        };
        let usage = settled.usage.unwrap_or_default();
        self.record(
            Event::new("llm_call")
                .and_then(|e| e.with("provider", call.provider.as_str()))
                .and_then(|e| e.with("model", call.model.as_str()))
                .and_then(|e| e.with("api", call.kind.as_str()))
                .and_then(|e| e.with("transport", "http"))
                .and_then(|e| e.with("streamed", settled.streamed))
                .and_then(|e| e.with("status", settled.status.unwrap_or(0)))
                .and_then(|e| e.with("request_id", settled.request_id.unwrap_or_default()))
                .and_then(|e| e.with("usage_reported", settled.usage.is_some()))
                .and_then(|e| e.with("input_tokens", usage.input))
                .and_then(|e| e.with("output_tokens", usage.output))
                .and_then(|e| e.with("reserved_usd", usd(reserved)))
                .and_then(|e| e.with("cost_usd", usd(settled.cost_usd)))
                .and_then(|e| e.with("run_usd", usd(totals.run)))
                .and_then(|e| e.with("day_usd", usd(totals.day))),
        )
        .await;
    }

    /// Writes `event` and waits until it is on disk, with a log. The last
    /// calls' settlements may come after the bench has removed its
    /// directory, so a failed write here is not the bench's failure.
    async fn record(&self, event: Result<Event, constle_audit::EventError>) {
        if let Some(log) = &self.log {
            let _ = log.submit(event.expect("an event")).written().await;
        }
    }
}
