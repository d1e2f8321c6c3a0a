//! What the model gates of a run charge and record. Each call's worst case
//! is held in the ledger before it is forwarded: in the run's shared
//! ledger (the same caps as priced MCP calls), and first in the model-only
//! ledger when `llm.spending` declares caps; `llm_reserved` is written
//! while the call is on its way, and is on disk before any of its answer
//! reaches the agent. When the call has ended, both holds are settled
//! to what it cost and `llm_call` records the settlement. Each refusal, the
//! gate's own or a cap's, is an `llm_refused` entry on disk before the
//! agent gets it, paced like the MCP gates' refusals.
//!
//! A charge or refusal that cannot be recorded closes every model gate
//! and ends the run: no model call goes on unrecorded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use constle_audit::catalogue::{LlmCall, LlmRefused, LlmReserved};
use constle_audit::{AuditLog, Event};
use constle_llm_gate::{
    Call, CancellationToken, DoneFuture, Held, Meter, MeterRefusal, Reason, Recorder, Recording,
    Refused, Reservation, ReserveFuture, Settled,
};
use constle_mcp_gate::Pace;
use constle_spend::{Hold, Refusal, RunMeter, Scope, Source, Totals, usd};
use rust_decimal::{Decimal, RoundingStrategy};
use tokio::sync::mpsc::UnboundedSender;

use crate::spend::SharedMeter;
use crate::stop::ModelStop;

/// The model gates' ledgers and log, before the gates exist.
pub(crate) struct ModelLog {
    shared: SharedMeter,
    own: Option<SharedMeter>,
    log: Arc<AuditLog>,
}

impl ModelLog {
    /// Charges to `shared` (the run's meter, shared with the MCP gates)
    /// and, with `llm.spending` caps, first to `own`; records into `log`.
    pub(crate) fn new(
        shared: SharedMeter,
        own: Option<SharedMeter>,
        log: &Arc<AuditLog>,
    ) -> ModelLog {
        ModelLog {
            shared,
            own,
            log: Arc::clone(log),
        }
    }

    /// The meter and recorder the gates get: what cannot be recorded
    /// closes them (`shutoff`) and ends the run (`stops`).
    pub(crate) fn stopping(
        &self,
        shutoff: &CancellationToken,
        stops: UnboundedSender<ModelStop>,
    ) -> ModelBook {
        ModelBook(Arc::new(Inner {
            shared: Arc::clone(&self.shared),
            own: self.own.clone(),
            log: Arc::clone(&self.log),
            pace: Pace::for_refusals(),
            holds: Mutex::default(),
            next: AtomicU64::new(0),
            unsettled: AtomicUsize::new(0),
            settled: tokio::sync::Notify::new(),
            shutoff: shutoff.clone(),
            stops,
        }))
    }
}

/// The model gates' [`Meter`] and [`Recorder`].
#[derive(Clone)]
pub(crate) struct ModelBook(Arc<Inner>);

struct Inner {
    shared: SharedMeter,
    own: Option<SharedMeter>,
    log: Arc<AuditLog>,
    pace: Pace,
    /// Each forwarded call's holds, until it is settled.
    holds: Mutex<HashMap<u64, Holds>>,
    next: AtomicU64,
    /// Calls forwarded whose settlement is not recorded yet.
    unsettled: AtomicUsize,
    /// Told each time one is.
    settled: tokio::sync::Notify,
    shutoff: CancellationToken,
    stops: UnboundedSender<ModelStop>,
}

/// A call's holds: the model-only ledger's, when it has caps, and the
/// shared one's.
struct Holds {
    own: Option<Hold>,
    shared: Hold,
}

impl ModelBook {
    /// Waits until every call the gates forwarded is settled and recorded
    /// (a gate settles a call once its answer has passed, after the agent
    /// may have exited), or `limit` has passed; says how many are not. A
    /// call never settled stays charged its whole hold.
    pub(crate) async fn drained(&self, limit: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.0.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let open = self.0.unsettled.load(Ordering::Acquire);
            if open == 0 || tokio::time::timeout_at(deadline, notified).await.is_err() {
                return open;
            }
        }
    }
}

impl Meter for ModelBook {
    fn reserve<'a>(&'a self, call: &'a Call) -> ReserveFuture<'a> {
        Box::pin(self.0.reserve(call))
    }

    fn settle(&self, held: Held, call: Call, settled: Settled) -> DoneFuture<'_> {
        Box::pin(self.0.settle(held, call, settled))
    }
}

impl Recorder for ModelBook {
    fn refused<'a>(&'a self, refused: &'a Refused) -> DoneFuture<'a> {
        Box::pin(async {
            tokio::time::sleep_until(self.0.pace.turn()).await;
            let event = LlmRefused {
                provider: refused.provider.clone(),
                http_method: Some(refused.method.clone()).into(),
                path: Some(refused.path.clone()).into(),
                api: refused.kind.map(|kind| kind.as_str().to_owned()),
                transport: refused.transport.as_str().to_owned(),
                model: refused.model.clone(),
                reason: refused.reason.as_str().to_owned(),
                reserved_usd: None.into(),
                cap: None.into(),
                cap_usd: None.into(),
                error: None.into(),
            };
            // The refusal stands whether or not it was recorded.
            let _ = self
                .0
                .record(&refused.provider, "a refusal", event.into())
                .await;
        })
    }
}

impl Inner {
    async fn reserve(self: &Arc<Self>, call: &Call) -> Result<Reservation, MeterRefusal> {
        // The ledger counts in 10⁻¹⁰ USD; a worst case is never rounded down.
        let amount = call
            .worst_case_usd
            .round_dp_with_strategy(10, RoundingStrategy::AwayFromZero);
        let source = Source::Llm {
            provider: call.provider.clone(),
            model: call.model.clone(),
        };
        let now = jiff::Timestamp::now();
        match self.hold_both(amount, source, now).await {
            Ok(holds) => Ok(self.reserved(call, amount, holds)),
            Err((scope, refusal)) => Err(self.refuse(call, amount, scope, refusal).await),
        }
    }

    /// Holds `amount` in the model-only ledger, when it has caps, and in
    /// the shared one, both at once (a call waits for one durable write,
    /// not two); or the refusal and the ledger it came from (`None`: the
    /// shared one; the model-only ledger's is told first). A refused call
    /// is never forwarded, so the other ledger's hold is released.
    async fn hold_both(
        &self,
        amount: Decimal,
        source: Source,
        now: jiff::Timestamp,
    ) -> Result<Holds, (Option<Scope>, Refusal)> {
        let own = async {
            match &self.own {
                Some(own) => hold(own, amount, source.clone(), now).await.map(Some),
                None => Ok(None),
            }
        };
        let shared = hold(&self.shared, amount, source.clone(), now);
        match tokio::join!(own, shared) {
            (Ok(own), Ok(shared)) => Ok(Holds { own, shared }),
            (Err(refusal), shared) => {
                if let (Ok(hold), Ok(meter)) = (shared, self.shared.as_ref()) {
                    let _ = meter.settle(hold, Decimal::ZERO).await;
                }
                Err((Some(Scope::Llm), refusal))
            }
            (Ok(own), Err(refusal)) => {
                if let (Some(hold), Some(meter)) = (own, self.own_meter()) {
                    let _ = meter.settle(hold, Decimal::ZERO).await;
                }
                Err((None, refusal))
            }
        }
    }

    /// Submits `llm_reserved` and keeps the holds for the settlement; the
    /// call may leave while the entry is written, its answer waits for it.
    fn reserved(self: &Arc<Self>, call: &Call, amount: Decimal, holds: Holds) -> Reservation {
        let totals = holds.shared.totals();
        let event = LlmReserved {
            provider: call.provider.clone(),
            model: call.model.clone(),
            api: call.kind.as_str().to_owned(),
            transport: call.transport.as_str().to_owned(),
            input_tokens_bound: call.input_tokens_bound,
            max_output_tokens: call.output_tokens_bound,
            reserved_usd: usd(amount),
            run_usd: usd(totals.run),
            day_usd: Some(usd(totals.day)),
            month_usd: Some(usd(totals.month)),
        };
        let written = self.log.submit(event.into());
        self.unsettled.fetch_add(1, Ordering::AcqRel);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, holds);
        let book = Arc::clone(self);
        let provider = call.provider.clone();
        // Unrecorded, its answer never passes; the call is settled to its
        // whole hold, and the run ends.
        let recorded = async move {
            let error = written.written().await.err();
            error.map_or(Ok(()), |error| {
                book.stop(&provider, "a reservation", error.to_string());
                Err(MeterRefusal {
                    reason: Reason::LedgerUnavailable,
                    message: "the reservation could not be recorded in the audit log; the Constle gate did not pass on its answer".into(),
                })
            })
        };
        Reservation {
            held: Held(id),
            recorded: Recording::pending(recorded),
        }
    }

    /// Records `llm_refused` for a refusal of `scope`'s ledger (`None`:
    /// the shared one) and says what the agent is told.
    async fn refuse(
        &self,
        call: &Call,
        amount: Decimal,
        scope: Option<Scope>,
        refusal: Refusal,
    ) -> MeterRefusal {
        let message = refusal.message_in(scope);
        let (reason, cap, cap_usd, error) = match refusal {
            Refusal::Cap { cap, limit, .. } => (
                Reason::SpendRefused,
                Some(format!(
                    "{}{}",
                    scope.map_or("", Scope::section),
                    cap.field()
                )),
                Some(usd(limit)),
                None,
            ),
            Refusal::Failed { error, .. } => (Reason::LedgerUnavailable, None, None, Some(error)),
        };
        let event = LlmRefused {
            provider: call.provider.clone(),
            http_method: None.into(),
            path: None.into(),
            api: Some(call.kind.as_str().to_owned()),
            transport: call.transport.as_str().to_owned(),
            model: Some(call.model.clone()),
            reason: reason.as_str().to_owned(),
            reserved_usd: Some(usd(amount)).into(),
            cap: cap.into(),
            cap_usd: cap_usd.into(),
            error: error.into(),
        };
        tokio::time::sleep_until(self.pace.turn()).await;
        let _ = self.record(&call.provider, "a refusal", event.into()).await;
        MeterRefusal { reason, message }
    }

    async fn settle(&self, held: Held, call: Call, settled: Settled) {
        self.settle_and_record(held, call, settled).await;
        self.unsettled.fetch_sub(1, Ordering::AcqRel);
        self.settled.notify_waiters();
    }

    async fn settle_and_record(&self, held: Held, call: Call, settled: Settled) {
        let holds = self
            .holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&held.0);
        let Some(Holds { own, shared }) = holds else {
            return;
        };
        let reserved = shared.amount();
        let cost = settled.cost_usd;
        if let (Some(hold), Some(meter)) = (own, self.own_meter()) {
            let _ = meter.settle(hold, cost).await;
        }
        // The shared meter holds every forwarded call's hold.
        let Ok(meter) = self.shared.as_ref() else {
            return;
        };
        let totals = meter
            .settle(shared, cost)
            .await
            .map_err(|err| (meter.run_total(), err.to_string()));
        let event = call_event(&call, &settled, reserved, totals);
        let _ = self.record(&call.provider, "a call", event.into()).await;
    }

    fn own_meter(&self) -> Option<&RunMeter> {
        self.own.as_deref()?.as_ref().ok()
    }

    /// Writes `event` for the gate of `provider`; if it cannot, what must
    /// not go on is a run whose model calls leave no trace.
    async fn record(&self, provider: &str, what: &'static str, event: Event) -> Result<(), ()> {
        let Err(error) = self.log.submit(event).written().await else {
            return Ok(());
        };
        self.stop(provider, what, error.to_string());
        Err(())
    }

    /// Closes the gates and ends the run: `what` could not be recorded.
    fn stop(&self, provider: &str, what: &'static str, error: String) {
        self.shutoff.cancel();
        let _ = self.stops.send(ModelStop {
            provider: provider.to_owned(),
            what,
            error,
        });
    }
}

/// Holds `amount` in `meter`, or the refusal.
async fn hold(
    meter: &SharedMeter,
    amount: Decimal,
    source: Source,
    now: jiff::Timestamp,
) -> Result<Hold, Refusal> {
    match meter.as_ref() {
        Ok(meter) => meter.hold(amount, source, now).await.map_err(Refusal::from),
        Err(error) => Err(Refusal::ledger_unavailable(error.clone())),
    }
}

/// `llm_call`: the call, its usage, and the settlement.
fn call_event(
    call: &Call,
    settled: &Settled,
    reserved: Decimal,
    totals: Result<Totals, (Decimal, String)>,
) -> LlmCall {
    let usage = settled.usage.unwrap_or_default();
    let (run, day, month, error) = match totals {
        Ok(totals) => (
            totals.run,
            Some(usd(totals.day)),
            Some(usd(totals.month)),
            None,
        ),
        Err((run, error)) => (run, None, None, Some(error)),
    };
    LlmCall {
        provider: call.provider.clone(),
        model: call.model.clone(),
        api: call.kind.as_str().to_owned(),
        transport: call.transport.as_str().to_owned(),
        streamed: settled.streamed,
        status: settled.status,
        request_id: settled.request_id.clone(),
        usage_reported: settled.usage.is_some(),
        input_tokens: usage.input,
        cached_input_tokens: usage.cached_input,
        cache_write_tokens: usage.cache_write,
        output_tokens: usage.output,
        reserved_usd: usd(reserved),
        cost_usd: usd(settled.cost_usd),
        duration_ms: u64::try_from(settled.duration.as_millis()).unwrap_or(u64::MAX),
        run_usd: usd(run),
        day_usd: day,
        month_usd: month,
        error: error.into(),
    }
}
