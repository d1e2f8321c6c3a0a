//! The gate's HTTP side: one [`Gate`] per declared provider, serving the
//! agent on a socket the run hands it, forwarding to the provider.
//!
//! Per request, in order (every refusal in the provider's error shape,
//! [`crate::shape`], recorded through the [`Recorder`] before it is
//! answered, except the meter's, which the meter records):
//!
//! 1. `Host` (and `Origin`, if sent) loopback ([`crate::loopback`]), else
//!    403 `llm_host_refused`.
//! 2. The gates not closed ([`Gate::with_shutoff`]), else 403
//!    `llm_gate_closed`.
//! 3. A method and path the API lists ([`crate::route`]), else 404
//!    `llm_path_not_allowed`. `GET …/models` is answered by the gate with
//!    the declared models. The Responses WebSocket (`GET /v1/responses`
//!    with an Upgrade) goes to [`crate::socket`].
//! 4. The body read (at most [`MAX_BODY_BYTES`]) and [`inspect`]ed.
//! 5. The [`Meter`] reserves the worst case, or refuses (403).
//! 6. The shutoff checked again, then the inspected body is sent to the
//!    upstream base URL plus the endpoint's path, with only the agent
//!    headers in [`FORWARDED_REQUEST_HEADERS`] (and `x-stainless-*`), the
//!    key the gate holds, and `accept-encoding: identity` (so the usage
//!    can be read as it passes).
//! 7. The provider's status and headers come back (less hop-by-hop
//!    headers, `set-cookie`, `content-length`, and any header holding the
//!    key, [`crate::echo`]). An SSE body is relayed event by event as each
//!    completes, and cut before an event holding the key; any other body
//!    once whole (at most [`MAX_BODY_BYTES`]), or, if it holds the key, a
//!    502 `llm_upstream_echoed_key` instead. [`crate::usage`] reads the
//!    usage from what passes. When the body has ended, was cut (the
//!    provider or the agent went away, the shutoff thrown), the call is
//!    settled through the [`Meter`]. Whatever is withheld for holding the
//!    key is recorded through the [`Recorder`].
//!
//! A provider that cannot be reached, or sends no response headers within
//! the response timeout ([`DEFAULT_RESPONSE_TIMEOUT`]), is answered with
//! 502 or 504 in the provider's shape (retryable: that is the provider's
//! failure, not a cap), and the call is settled with no usage.

use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::serve::Listener;
use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;
use zeroize::Zeroizing;

use crate::config::{Api, Prices, Provider};
use crate::echo::{self, Cut, Events};
use crate::error::GateError;
use crate::inspect::{MAX_BODY_BYTES, Refusal, inspect};
use crate::loopback::addressed_to_loopback;
use crate::meter::{Call, Meter, MeterRefusal, Recorder, Unmetered, Unrecorded};
use crate::reason::Reason;
use crate::refused::{Refused, Transport};
use crate::route::{Route, route, upstream_path_and_query};
use crate::shape;
use crate::socket;
use crate::state::{
    Asked, INTAKE_TIMEOUT, Inner, MAX_INTAKE, Remembered, Response, Settlement, json_response,
};
use crate::upstream;
use crate::usage::Tracker;

/// Agent headers forwarded to the provider (besides `x-stainless-*`, the
/// SDKs' telemetry); no other is: not `authorization`, `x-api-key`,
/// `cookie`, `openai-organization` or `openai-project`.
pub const FORWARDED_REQUEST_HEADERS: [&str; 7] = [
    "accept",
    "anthropic-version",
    "anthropic-beta",
    "openai-beta",
    "user-agent",
    "idempotency-key",
    "content-type",
];

/// How long the gate waits for a provider's response headers unless
/// [`Gate::with_response_timeout`] says otherwise: ten minutes, as long as
/// the SDKs themselves wait for a non-streamed answer.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(600);

/// Response headers never relayed: hop-by-hop, cookies, and the length
/// (the relay sets its own framing).
const DROPPED_RESPONSE_HEADERS: [HeaderName; 9] = [
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::SET_COOKIE,
    header::CONTENT_LENGTH,
    HeaderName::from_static("keep-alive"),
];

/// The gate in front of one declared provider.
///
/// ```no_run
/// # async fn run(provider: constle_llm_gate::Provider) -> Result<(), Box<dyn std::error::Error>> {
/// use constle_llm_gate::Gate;
/// let listener = tokio::net::UnixListener::bind("/run/constle/llm-anthropic.sock")?;
/// Gate::new(provider)?.serve(listener).await?;
/// # Ok(()) }
/// ```
pub struct Gate {
    inner: Inner,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("provider", &self.inner.provider.id)
            .field("api", &self.inner.provider.api)
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// A gate forwarding to `provider.upstream` with `provider.key`,
    /// unmetered and unrecorded until told otherwise.
    pub fn new(provider: Provider) -> Result<Gate, GateError> {
        let base = base(&provider.upstream)?;
        let key = key_header(&provider)?;
        let client = upstream::client().map_err(GateError::Client)?;
        let connector = upstream::connector().map_err(GateError::Client)?;
        Ok(Gate {
            inner: Inner {
                provider,
                base,
                key,
                client,
                connector,
                meter: Arc::new(Unmetered),
                recorder: Arc::new(Unrecorded),
                shutoff: CancellationToken::new(),
                response_timeout: DEFAULT_RESPONSE_TIMEOUT,
                responses: Mutex::new(Remembered::default()),
                intake: tokio::sync::Semaphore::new(MAX_INTAKE),
            },
        })
    }

    /// Reserves and settles every call through `meter`.
    #[must_use]
    pub fn with_meter(mut self, meter: impl Meter) -> Gate {
        self.inner.meter = Arc::new(meter);
        self
    }

    /// Records every refusal of the gate's own through `recorder`.
    #[must_use]
    pub fn with_recorder(mut self, recorder: impl Recorder) -> Gate {
        self.inner.recorder = Arc::new(recorder);
        self
    }

    /// Stops forwarding once `shutoff` is cancelled: every request from
    /// then on is refused (`llm_gate_closed`), one reserved but not yet
    /// sent is not sent, and responses still passing are cut (and settled
    /// on what they reported).
    #[must_use]
    pub fn with_shutoff(mut self, shutoff: CancellationToken) -> Gate {
        self.inner.shutoff = shutoff;
        self
    }

    /// Waits at most `timeout` (capped at a day) for a provider's
    /// response headers.
    #[must_use]
    pub fn with_response_timeout(mut self, timeout: Duration) -> Gate {
        self.inner.response_timeout = timeout.min(Duration::from_secs(86_400));
        self
    }

    /// Serves the agent on `listener` (a Unix socket in a run, TCP on
    /// loopback in tests), HTTP/1.1, until the task is dropped.
    pub async fn serve<L: Listener>(self, mut listener: L) -> std::io::Result<()> {
        let inner = Arc::new(self.inner);
        loop {
            let (io, _) = listener.accept().await;
            tokio::spawn(serve_connection(Arc::clone(&inner), io));
        }
    }
}

/// The upstream base as a string without a trailing `/`, checked.
fn base(upstream: &Uri) -> Result<String, GateError> {
    let scheme_ok = matches!(upstream.scheme_str(), Some("http" | "https"));
    if !scheme_ok || upstream.host().is_none() || upstream.query().is_some() {
        return Err(GateError::Url(
            "it must be http or https, with a host and no query".to_owned(),
        ));
    }
    Ok(upstream.to_string().trim_end_matches('/').to_owned())
}

fn key_header(provider: &Provider) -> Result<(HeaderName, HeaderValue), GateError> {
    let key = provider.key.expose();
    if key.is_empty() {
        return Err(GateError::Key);
    }
    // Zeroed on drop: the header value keeps the only other copy.
    let (name, value) = match provider.api {
        Api::Anthropic => (
            HeaderName::from_static("x-api-key"),
            Zeroizing::new(key.to_owned()),
        ),
        Api::OpenAi | Api::OpenAiCompatible => (
            header::AUTHORIZATION,
            Zeroizing::new(format!("Bearer {key}")),
        ),
    };
    let mut header = HeaderValue::from_str(&value).map_err(|_| GateError::Key)?;
    header.set_sensitive(true);
    Ok((name, header))
}

async fn serve_connection<I>(inner: Arc<Inner>, io: I)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| {
        let inner = Arc::clone(&inner);
        async move { Ok::<_, Infallible>(handle(inner, request).await) }
    });
    // A connection that breaks ends here; the agent may open another.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
        .await;
}

/// The request to the provider for `inspected` at `path_and_query`,
/// with the agent headers the gate forwards and its key.
fn upstream_request(
    inner: &Inner,
    path_and_query: &str,
    agent: &HeaderMap,
    body: Vec<u8>,
) -> Result<Request<Full<Bytes>>, hyper::http::Error> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(format!("{}{path_and_query}", inner.base))
        .body(Full::new(Bytes::from(body)))?;
    let headers = request.headers_mut();
    *headers = forwarded(agent);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    headers.insert(inner.key.0.clone(), inner.key.1.clone());
    Ok(request)
}

/// The agent headers the gate forwards.
fn forwarded(agent: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in agent {
        let name_str = name.as_str();
        if FORWARDED_REQUEST_HEADERS.contains(&name_str) || name_str.starts_with("x-stainless-") {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

async fn handle(inner: Arc<Inner>, request: Request<Incoming>) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    let mut asked = Asked {
        method: &parts.method,
        path,
        kind: None,
        transport: Transport::Http,
    };
    if !addressed_to_loopback(&parts.headers) {
        let what = "a request not addressed to loopback (Host or Origin)";
        let refusal = Refusal::new(Reason::HostRefused, what, None);
        return inner.refuse(&asked, &refusal, false).await;
    }
    if let Some(refusal) = inner.closed() {
        return inner.refuse(&asked, &refusal, false).await;
    }
    let query = parts.uri.query();
    let Some(route) = route(inner.provider.api, &parts.method, path, query) else {
        let what = format!(
            "{} {path}, not an endpoint of the {} API the gate serves",
            parts.method,
            inner.provider.api.as_str()
        );
        let refusal = Refusal::new(Reason::PathNotAllowed, &what, None);
        return inner.refuse(&asked, &refusal, false).await;
    };
    let (kind, upstream_path) = match route {
        Route::Models => return inner.models(),
        Route::ResponsesSocket => {
            return socket::upgrade(inner, Request::from_parts(parts, body)).await;
        }
        Route::Call {
            kind,
            upstream_path,
        } => (kind, upstream_path),
    };
    asked.kind = Some(kind);
    let started = Instant::now();
    // Held until the body is inspected and rewritten: the turn bounds the
    // memory the bodies take while they are read and parsed.
    let turn = inner.intake.acquire().await;
    let read = tokio::time::timeout(INTAKE_TIMEOUT, read_limited(body)).await;
    let body = match read.unwrap_or(Err(false)) {
        Ok(body) => body,
        Err(too_large) => {
            let what = if too_large {
                format!("a body larger than {MAX_BODY_BYTES} bytes")
            } else {
                "a body the gate could not read".to_owned()
            };
            let refusal = Refusal::new(Reason::BodyUnreadable, &what, None);
            return inner.refuse(&asked, &refusal, too_large).await;
        }
    };
    let too_large = body.len() > MAX_BODY_BYTES;
    let inspected = match inspect(&inner.provider, kind, &body, &|id| inner.previous(id)) {
        Ok(inspected) => inspected,
        Err(refusal) => return inner.refuse(&asked, &refusal, too_large).await,
    };
    drop((body, turn));
    let path_and_query = upstream_path_and_query(upstream_path, query);
    let call = Call {
        provider: inner.provider.id.clone(),
        model: inspected.model,
        kind,
        transport: asked.transport,
        input_tokens_bound: inspected.input_tokens_bound,
        output_tokens_bound: inspected.output_tokens_bound,
        worst_case_usd: inspected.worst_case_usd,
        stream: inspected.stream,
    };
    let upstream = upstream_request(&inner, &path_and_query, &parts.headers, inspected.body);
    forward(inner, &asked, call, inspected.prices, upstream, started).await
}

/// Reads the agent's body, at most one chunk past [`MAX_BODY_BYTES`];
/// `Err(true)` when it is longer, `Err(false)` when it broke.
async fn read_limited(mut body: Incoming) -> Result<Bytes, bool> {
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| false)?;
        if let Ok(chunk) = frame.into_data() {
            buf.extend_from_slice(&chunk);
            if buf.len() > MAX_BODY_BYTES {
                return Err(true);
            }
        }
    }
    Ok(Bytes::from(buf))
}

/// Reserves, sends and relays one inspected call.
async fn forward(
    inner: Arc<Inner>,
    asked: &Asked<'_>,
    call: Call,
    prices: Prices,
    upstream: Result<Request<Full<Bytes>>, hyper::http::Error>,
    started: Instant,
) -> Response {
    let kind = call.kind;
    let model = call.model.clone();
    let reservation = match inner.meter.reserve(&call).await {
        Ok(reservation) => reservation,
        Err(refused) => return meter_refusal(&inner, &refused),
    };
    let mut settle = Settlement {
        inner: Arc::clone(&inner),
        held: Some(reservation.held),
        recorded: reservation.recorded,
        call: Some(call),
        prices,
        started,
        sent: false,
        streamed: false,
        status: None,
        request_id: None,
        tracker: None,
    };
    if let Some(refusal) = inner.closed() {
        return inner.refuse(asked, &refusal, false).await;
    }
    let Ok(request) = upstream else {
        return upstream_failure(&inner, StatusCode::BAD_GATEWAY);
    };
    settle.sent = true;
    let sent = tokio::time::timeout(inner.response_timeout, inner.client.request(request));
    let response = match sent.await {
        Ok(Ok(response)) => response,
        Ok(Err(_)) => return upstream_failure(&inner, StatusCode::BAD_GATEWAY),
        Err(_) => return upstream_failure(&inner, StatusCode::GATEWAY_TIMEOUT),
    };
    if let Err(refused) = settle.recorded.wait().await {
        return meter_refusal(&inner, &refused);
    }
    let (mut parts, body) = response.into_parts();
    let echoed = inner.record(asked, Reason::UpstreamEchoedKey, Some(model));
    if echo::drop_headers_holding(&mut parts.headers, inner.provider.key.expose().as_bytes()) {
        inner.recorder.refused(&echoed).await;
    }
    settle.status = Some(parts.status.as_u16());
    settle.request_id = request_id(&parts.headers);
    settle.streamed = is_event_stream(&parts.headers);
    settle.tracker = Some(Tracker::new(inner.provider.api, kind, settle.streamed));
    for name in &DROPPED_RESPONSE_HEADERS {
        parts.headers.remove(name);
    }
    if settle.streamed {
        relay_events(parts, body, settle, echoed)
    } else {
        relay_whole(parts, body, settle, echoed).await
    }
}

/// The meter's refusal, in the provider's shape.
fn meter_refusal(inner: &Inner, refused: &MeterRefusal) -> Response {
    let status = shape::status(inner.provider.api, refused.reason, false);
    inner.error(status, refused.reason.as_str(), &refused.message)
}

/// The provider could not be reached or did not answer in time; the
/// caller's [`Settlement`] settles the call with no usage when dropped.
fn upstream_failure(inner: &Inner, status: StatusCode) -> Response {
    let message = format!(
        "the Constle gate could not get an answer from provider {:?}",
        inner.provider.id
    );
    let code = if status == StatusCode::GATEWAY_TIMEOUT {
        "llm_upstream_timeout"
    } else {
        "llm_upstream_unreachable"
    };
    let body = shape::body(inner.provider.api, status, code, &message);
    json_response(status, body.to_string())
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// The provider's request id, if sent once and visible ASCII.
fn request_id(headers: &HeaderMap) -> Option<String> {
    ["request-id", "x-request-id"].iter().find_map(|name| {
        let value = headers.get(*name)?.to_str().ok()?;
        let visible =
            !value.is_empty() && value.len() <= 256 && value.bytes().all(|b| b.is_ascii_graphic());
        visible.then(|| value.to_owned())
    })
}

/// A response that is not a stream, relayed once it is whole and known
/// not to hold the key (else a 502 in the provider's shape, recorded).
async fn relay_whole(
    parts: hyper::http::response::Parts,
    body: Incoming,
    mut settle: Settlement,
    echoed: Refused,
) -> Response {
    let inner = Arc::clone(&settle.inner);
    let read = tokio::select! {
        read = read_limited(body) => read,
        () = inner.shutoff.cancelled() => Err(false),
    };
    let Ok(body) = read else {
        return upstream_failure(&inner, StatusCode::BAD_GATEWAY);
    };
    if let Some(tracker) = settle.tracker.as_mut() {
        tracker.push(&body);
    }
    if echo::holds(&body, inner.provider.key.expose().as_bytes()) {
        inner.recorder.refused(&echoed).await;
        let what = format!(
            "an answer from provider {:?} that held its key; the Constle gate did not relay it",
            inner.provider.id
        );
        let status = shape::status(inner.provider.api, Reason::UpstreamEchoedKey, false);
        return inner.error(status, Reason::UpstreamEchoedKey.as_str(), &what);
    }
    let mut out = hyper::Response::new(Either::Left(Full::new(body)));
    *out.status_mut() = parts.status;
    *out.headers_mut() = parts.headers;
    out
}

/// An SSE response, relayed event by event as each completes, while the
/// settlement's tracker reads it.
fn relay_events(
    parts: hyper::http::response::Parts,
    body: Incoming,
    settle: Settlement,
    echoed: Refused,
) -> Response {
    let relay = EventRelay {
        body,
        settle,
        events: Events::default(),
        echoed,
        done: false,
    };
    let frames = futures_util::stream::unfold(relay, EventRelay::next);
    let mut out = hyper::Response::new(Either::Right(StreamBody::new(frames).boxed_unsync()));
    *out.status_mut() = parts.status;
    *out.headers_mut() = parts.headers;
    out
}

/// One SSE stream from the provider on its way to the agent.
struct EventRelay {
    body: Incoming,
    settle: Settlement,
    events: Events,
    /// Recorded if the stream is cut for holding the key.
    echoed: Refused,
    done: bool,
}

impl EventRelay {
    /// The next run of whole events for the agent; `None` once the stream
    /// has ended, was cut (an event holding the key, the shutoff), or the
    /// agent went away (then this is dropped, and the call settled).
    async fn next(mut self) -> Option<(Result<Frame<Bytes>, std::io::Error>, EventRelay)> {
        let inner = Arc::clone(&self.settle.inner);
        let key = inner.provider.key.expose().as_bytes();
        while !self.done {
            let frame = tokio::select! {
                frame = self.body.frame() => frame,
                () = inner.shutoff.cancelled() => return None,
            };
            let passed = match frame {
                Some(Ok(frame)) => match frame.data_ref() {
                    Some(chunk) => self.events.push(chunk, key),
                    None => continue,
                },
                Some(Err(err)) => {
                    self.done = true;
                    return Some((Err(std::io::Error::other(err)), self));
                }
                None => {
                    self.done = true;
                    std::mem::take(&mut self.events).finish(key)
                }
            };
            if let Some(tracker) = self.settle.tracker.as_mut() {
                tracker.push(&passed.bytes);
            }
            if let Some(cut) = passed.cut {
                self.done = true;
                if cut == Cut::Echoed {
                    inner.recorder.refused(&self.echoed).await;
                }
            }
            if !passed.bytes.is_empty() {
                return Some((Ok(Frame::data(passed.bytes)), self));
            }
        }
        None
    }
}
