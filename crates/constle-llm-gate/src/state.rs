//! What one provider's gate holds while it serves ([`Inner`]), and what
//! its transports share: refusing in the provider's shape and recording
//! it, remembering completed Responses, and settling each reserved call
//! ([`Settlement`]) however it ends. Moved out of [`crate::http`] so that
//! each transport can build on it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{Either, Full};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, StatusCode};
use rust_decimal::Decimal;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::{Prices, Provider};
use crate::inspect::Refusal;
use crate::meter::{Call, Held, Meter, Recorder, Recording, Settled};
use crate::reason::Reason;
use crate::refused::{Refused, Transport};
use crate::route::Kind;
use crate::shape;
use crate::upstream::{Client, Connector};
use crate::usage::Tracker;

/// What the agent gets back: a whole body, or the provider's, relayed.
pub(crate) type Body = Either<Full<Bytes>, UnsyncBoxBody<Bytes, std::io::Error>>;

pub(crate) type Response = hyper::Response<Body>;

/// How many completed Responses the gate remembers for
/// `previous_response_id`; the oldest is forgotten past it (and a call
/// continuing it is then refused, never let through unbounded).
pub const MAX_REMEMBERED_RESPONSES: usize = 4096;

pub(crate) struct Inner {
    pub(crate) provider: Provider,
    /// The upstream base, without a trailing `/`.
    pub(crate) base: String,
    /// The header carrying the key, marked sensitive.
    pub(crate) key: (HeaderName, HeaderValue),
    pub(crate) client: Client,
    /// The Responses WebSocket's way to the provider.
    pub(crate) connector: Connector,
    pub(crate) meter: Arc<dyn Meter>,
    pub(crate) recorder: Arc<dyn Recorder>,
    pub(crate) shutoff: CancellationToken,
    pub(crate) response_timeout: Duration,
    pub(crate) responses: Mutex<Remembered>,
    /// Turns to read and inspect a body ([`MAX_INTAKE`] at once).
    pub(crate) intake: tokio::sync::Semaphore,
}

/// How many bodies the gate reads and inspects at once. A body is up to
/// [`crate::MAX_BODY_BYTES`], and its parsed form several times that, all
/// in constle's memory, which no limit of the sandbox's covers: without
/// a bound, an agent opening many connections at once could take the
/// host's memory. The agent's calls beyond it wait their turn.
pub const MAX_INTAKE: usize = 4;

/// How long one body may take to arrive; one slower is refused, so that
/// a connection trickling bytes holds no turn for long.
pub const INTAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The completed Responses this gate saw, by id: their tokens, which a
/// call continuing one reads again.
#[derive(Default)]
pub(crate) struct Remembered {
    pub(crate) tokens: HashMap<String, u64>,
    pub(crate) order: VecDeque<String>,
}

impl Remembered {
    pub(crate) fn insert(&mut self, id: String, tokens: u64) {
        if self.tokens.insert(id.clone(), tokens).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > MAX_REMEMBERED_RESPONSES {
            if let Some(oldest) = self.order.pop_front() {
                self.tokens.remove(&oldest);
            }
        }
    }
}

/// What one request asked, for its record if it is refused.
pub(crate) struct Asked<'a> {
    pub(crate) method: &'a Method,
    pub(crate) path: &'a str,
    pub(crate) kind: Option<Kind>,
    pub(crate) transport: Transport,
}

impl Inner {
    pub(crate) fn remembered(&self) -> std::sync::MutexGuard<'_, Remembered> {
        // A holder that panicked left a whole entry or none.
        self.responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn previous(&self, id: &str) -> Option<u64> {
        self.remembered().tokens.get(id).copied()
    }

    /// What the audit log keeps of refusing `asked` for `reason`.
    pub(crate) fn record(
        &self,
        asked: &Asked<'_>,
        reason: Reason,
        model: Option<String>,
    ) -> Refused {
        let mut record = Refused::new(&self.provider.id, reason, asked.method.as_str(), asked.path);
        record.kind = asked.kind;
        record.model = model;
        record.transport = asked.transport;
        record
    }

    /// Records `refusal` of `asked`, then answers it.
    pub(crate) async fn refuse(
        &self,
        asked: &Asked<'_>,
        refusal: &Refusal,
        too_large: bool,
    ) -> Response {
        let record = self.record(asked, refusal.reason, refusal.model.clone());
        self.recorder.refused(&record).await;
        let status = shape::status(self.provider.api, refusal.reason, too_large);
        self.error(status, refusal.reason.as_str(), &refusal.message)
    }

    /// An error in the provider's shape, which no client retries.
    pub(crate) fn error(&self, status: StatusCode, code: &str, message: &str) -> Response {
        let body = shape::body(self.provider.api, status, code, message);
        let mut response = json_response(status, body.to_string());
        response
            .headers_mut()
            .insert("x-should-retry", HeaderValue::from_static("false"));
        response
    }

    pub(crate) fn closed(&self) -> Option<Refusal> {
        self.shutoff.is_cancelled().then(|| {
            Refusal::new(
                Reason::GateClosed,
                "a call after the run stopped model calls",
                None,
            )
        })
    }

    /// The declared models, as OpenAI's `GET /v1/models` lists models.
    pub(crate) fn models(&self) -> Response {
        let data: Vec<Value> = self
            .provider
            .models
            .keys()
            .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "constle"}))
            .collect();
        json_response(
            StatusCode::OK,
            json!({"object": "list", "data": data}).to_string(),
        )
    }
}

/// Settles one reserved call when dropped: after the response has passed,
/// was cut, or never came. In `Drop`, so that no way out of a call (an
/// agent that hangs up mid-stream included) leaves a reservation open.
pub(crate) struct Settlement {
    pub(crate) inner: Arc<Inner>,
    pub(crate) held: Option<Held>,
    /// The reservation's record, waited for before the answer passes.
    pub(crate) recorded: Recording,
    pub(crate) call: Option<Call>,
    pub(crate) prices: Prices,
    pub(crate) started: Instant,
    /// Whether the request left for the provider: one that did not costs
    /// nothing.
    pub(crate) sent: bool,
    pub(crate) streamed: bool,
    pub(crate) status: Option<u16>,
    pub(crate) request_id: Option<String>,
    pub(crate) tracker: Option<Tracker>,
}

impl Drop for Settlement {
    fn drop(&mut self) {
        let (Some(held), Some(call)) = (self.held.take(), self.call.take()) else {
            return;
        };
        let reading = self.tracker.take().map(Tracker::finish).unwrap_or_default();
        // A response continued later is read again; its tokens bound that.
        if let (Some(id), Some(usage)) = (&reading.completed, reading.usage) {
            self.inner.remembered().insert(id.clone(), usage.total());
        }
        let cost_usd = match reading.usage {
            _ if !self.sent => Decimal::ZERO,
            Some(usage) => usage.cost(&self.prices).unwrap_or(call.worst_case_usd),
            None => call.worst_case_usd,
        };
        let settled = Settled {
            usage: reading.usage,
            cost_usd,
            streamed: self.streamed,
            status: self.status,
            request_id: self.request_id.take(),
            duration: self.started.elapsed(),
        };
        let meter = Arc::clone(&self.inner.meter);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { meter.settle(held, call, settled).await });
        }
    }
}

pub(crate) fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = hyper::Response::new(Either::Left(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
