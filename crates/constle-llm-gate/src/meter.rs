//! Where the run plugs in: the [`Meter`] that reserves each call's worst
//! case against the spend ledger and settles it afterwards (and records
//! `llm_call`), and the [`Recorder`] that records the gate's own refusals
//! (`llm_refused`). The gate holds no ledger and writes no log itself.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rust_decimal::Decimal;

use crate::reason::Reason;
use crate::refused::{Refused, Transport};
use crate::route::Kind;
use crate::usage::Usage;

/// One model call the gate would forward, as the meter sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Call {
    /// The provider's id.
    pub provider: String,
    /// The declared model the call names.
    pub model: String,
    /// The endpoint.
    pub kind: Kind,
    /// HTTP or a WebSocket message.
    pub transport: Transport,
    /// The most input tokens it can be charged.
    pub input_tokens_bound: u64,
    /// The most output tokens.
    pub output_tokens_bound: u64,
    /// The worst case in USD: what to reserve.
    pub worst_case_usd: Decimal,
    /// Whether the agent asked for a stream.
    pub stream: bool,
}

/// A reservation the meter holds for a call, handed back to
/// [`Meter::settle`]. Which one it is, is the meter's own business.
#[derive(Debug, PartialEq, Eq)]
pub struct Held(pub u64);

/// What [`Meter::reserve`] gives a call it lets through: the hold, and
/// the record of the reservation, which may still be on its way to disk.
#[derive(Debug)]
pub struct Reservation {
    /// The hold, for [`Meter::settle`].
    pub held: Held,
    /// The reservation's record.
    pub recorded: Recording,
}

impl From<Held> for Reservation {
    /// A reservation already recorded (or with nothing to record).
    fn from(held: Held) -> Reservation {
        Reservation {
            held,
            recorded: Recording::done(),
        }
    }
}

/// A reservation's record on its way to disk. The call leaves while it
/// is written (a signed, fsynced entry: waiting for it first would add a
/// disk flush to every call's first token), but nothing of the answer
/// reaches the agent before it has resolved `Ok`: on `Err` the gate
/// answers the refusal instead, and the call is settled to its whole
/// hold.
pub struct Recording(Option<Written>);

/// The record's write, as [`Recording::pending`] keeps it.
type Written = Pin<Box<dyn Future<Output = Result<(), MeterRefusal>> + Send + Sync>>;

impl Recording {
    /// Already recorded.
    pub fn done() -> Recording {
        Recording(None)
    }

    /// Recorded once `written` resolves `Ok`.
    pub fn pending(
        written: impl Future<Output = Result<(), MeterRefusal>> + Send + Sync + 'static,
    ) -> Recording {
        Recording(Some(Box::pin(written)))
    }

    /// Waits for the record (at once, once it has been waited for).
    pub(crate) async fn wait(&mut self) -> Result<(), MeterRefusal> {
        match self.0.take() {
            Some(written) => written.await,
            None => Ok(()),
        }
    }
}

impl fmt::Debug for Recording {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.0.is_some() { "pending" } else { "done" };
        f.debug_tuple("Recording").field(&state).finish()
    }
}

/// How a forwarded call ended, for [`Meter::settle`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settled {
    /// The provider's final usage, if it arrived (see [`crate::Usage`]);
    /// `None`: the call is charged its whole reservation.
    pub usage: Option<Usage>,
    /// What to charge: the usage at the model's prices, or the
    /// reservation when no usage came.
    pub cost_usd: Decimal,
    /// Whether the response was a stream (SSE, or WebSocket events).
    pub streamed: bool,
    /// The provider's HTTP status; `None` when no response came (the
    /// provider unreachable, no answer in time, the gates closed).
    pub status: Option<u16>,
    /// The provider's request id (`request-id`, `x-request-id`), if sent
    /// and made of visible ASCII.
    pub request_id: Option<String>,
    /// From the call's arrival to the response's end.
    pub duration: Duration,
}

/// Why the meter would not let a call through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterRefusal {
    /// [`Reason::SpendRefused`] (a cap would be passed) or
    /// [`Reason::LedgerUnavailable`] (fail closed).
    pub reason: Reason,
    /// What the agent is told: what was refused and why, ending
    /// "; the Constle gate did not forward it". The meter records the
    /// refusal itself.
    pub message: String,
}

/// The future [`Meter::reserve`] returns.
pub type ReserveFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Reservation, MeterRefusal>> + Send + 'a>>;

/// The future [`Meter::settle`] and [`Recorder::refused`] return.
pub type DoneFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Charges model calls: the spend ledger and caps plug in here.
///
/// [`Meter::reserve`] is called before anything is forwarded; the call is
/// forwarded only on `Ok`, and its answer relayed only once the
/// [`Reservation`]'s record has resolved `Ok`. Every `Ok` is followed by exactly one
/// [`Meter::settle`], once the response has ended, was cut, or never
/// came (which also records the call, `llm_call`). Settlement may come
/// after the agent has its answer: a stream is settled when its last byte
/// has passed.
pub trait Meter: Send + Sync + 'static {
    /// Reserves `call.worst_case_usd`, or refuses.
    fn reserve<'a>(&'a self, call: &'a Call) -> ReserveFuture<'a>;

    /// Settles `held` (reserved for `call`) to `settled.cost_usd`.
    fn settle(&self, held: Held, call: Call, settled: Settled) -> DoneFuture<'_>;
}

/// A [`Meter`] that reserves nothing and charges nothing: for tests and
/// tools that only need the gate's rules.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unmetered;

impl Meter for Unmetered {
    fn reserve<'a>(&'a self, _call: &'a Call) -> ReserveFuture<'a> {
        Box::pin(std::future::ready(Ok(Held(0).into())))
    }

    fn settle(&self, _held: Held, _call: Call, _settled: Settled) -> DoneFuture<'_> {
        Box::pin(std::future::ready(()))
    }
}

/// Records what the gate refuses itself: the audit log plugs in here. The
/// gate answers a refusal only once [`Recorder::refused`] has resolved, so
/// the record is on disk before the agent hears of it.
pub trait Recorder: Send + Sync + 'static {
    /// Records `refused`.
    fn refused<'a>(&'a self, refused: &'a Refused) -> DoneFuture<'a>;
}

/// A [`Recorder`] that records nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unrecorded;

impl Recorder for Unrecorded {
    fn refused<'a>(&'a self, _refused: &'a Refused) -> DoneFuture<'a> {
        Box::pin(std::future::ready(()))
    }
}
