//! The Responses API's WebSocket mode (`GET /v1/responses` with an
//! Upgrade), which Codex CLI tries before HTTP.
//!
//! The gate opens its own socket to the provider (`wss://…/responses`,
//! the key in its `Authorization`, the same TLS as the HTTP client, no
//! proxy) before it accepts the agent's, so a provider that cannot be
//! reached is answered 502 as over HTTP. Then, per message from the agent:
//!
//! - `response.create`: inspected exactly as a `POST /v1/responses` body
//!   ([`crate::inspect`]), reserved through the [`crate::Meter`]
//!   ([`Transport::WebSocket`]), and forwarded only if both allow it; a
//!   refusal is an `error` event on the socket in OpenAI's shape (with the
//!   status HTTP would have had), recorded, and the socket stays open. One
//!   response at a time: a `response.create` while one is under way is
//!   refused (`llm_unsupported`).
//! - any other text message, and any binary one, is refused the same way
//!   and never forwarded: the mode defines no other client message.
//!
//! Events from the provider are relayed as they arrive, each checked for
//! the key first ([`crate::echo`]): one holding it closes both sockets
//! (recorded). `response.completed`, `response.incomplete`,
//! `response.failed` and `error` end the call in flight, which is settled
//! to the usage the first three report (an `error`: to its hold). A
//! socket that closes mid-response, or the shutoff, settles it to its
//! hold; the shutoff closes both sockets. Messages in either direction are
//! bounded by [`MAX_BODY_BYTES`].

use std::sync::Arc;
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Message, Role, WebSocketConfig};
use tower_service::Service;

use crate::echo;
use crate::inspect::{MAX_BODY_BYTES, Refusal, inspect};
use crate::meter::Call;
use crate::reason::Reason;
use crate::refused::{Refused, Transport};
use crate::route::Kind;
use crate::shape;
use crate::state::{Asked, Inner, Response, Settlement};
use crate::usage::Tracker;

/// A socket to either side.
type Socket<S> = WebSocketStream<S>;

/// Client messages the mode defines; `response.create` is the only one.
const CREATE: &str = "response.create";

/// Events that end the response in flight.
const FINAL_EVENTS: [&str; 4] = [
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
];

fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_BODY_BYTES))
        .max_frame_size(Some(MAX_BODY_BYTES))
}

/// Answers the agent's upgrade: connects to the provider, then accepts
/// the agent's socket and relays between the two.
pub(crate) async fn upgrade(inner: Arc<Inner>, request: Request<Incoming>) -> Response {
    let asked = Asked {
        method: request.method(),
        path: request.uri().path(),
        kind: Some(Kind::Responses),
        transport: Transport::WebSocket,
    };
    let Some(accept) = accept_key(&request) else {
        let what = "GET /v1/responses that is no WebSocket upgrade";
        let refusal = Refusal::new(Reason::PathNotAllowed, what, None);
        return inner.refuse(&asked, &refusal, false).await;
    };
    let Ok(upstream) = connect(&inner).await else {
        let message = format!(
            "the Constle gate could not open the Responses WebSocket of provider {:?}",
            inner.provider.id
        );
        let status = StatusCode::BAD_GATEWAY;
        let body = shape::body(
            inner.provider.api,
            status,
            "llm_upstream_unreachable",
            &message,
        );
        return crate::state::json_response(status, body.to_string());
    };
    let record = inner.record(&asked, Reason::UpstreamEchoedKey, None);
    tokio::spawn(async move {
        if let Ok(agent) = hyper::upgrade::on(request).await {
            let agent =
                Socket::from_raw_socket(TokioIo::new(agent), Role::Server, Some(config())).await;
            Relay::new(inner, record).run(agent, upstream).await;
        }
    });
    let mut response = hyper::Response::new(http_body_util::Either::Left(
        http_body_util::Full::new(bytes::Bytes::new()),
    ));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    response
}

/// The `Sec-WebSocket-Accept` for a valid version-13 upgrade request.
fn accept_key(request: &Request<Incoming>) -> Option<HeaderValue> {
    let headers = request.headers();
    let has = |name: header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    let upgrade = has(header::UPGRADE, "websocket") && has(header::CONNECTION, "upgrade");
    let version = headers.get(header::SEC_WEBSOCKET_VERSION)?.as_bytes() == b"13";
    let key = headers.get(header::SEC_WEBSOCKET_KEY)?;
    (upgrade && version).then(|| derive_accept_key(key.as_bytes()).parse().ok())?
}

type Upstream = Socket<TokioIo<hyper_rustls::MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>>>;

/// Opens the provider's Responses WebSocket with the key.
async fn connect(inner: &Inner) -> Result<Upstream, Box<dyn std::error::Error + Send + Sync>> {
    let url = format!("{}/responses", inner.base);
    let uri: hyper::Uri = url.parse()?;
    let ws_url = match url.split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}"),
        Some((_, rest)) => format!("ws://{rest}"),
        None => return Err("no scheme".into()),
    };
    let host = uri.authority().ok_or("no host")?.as_str().to_owned();
    let mut request = Request::get(ws_url)
        .header(header::HOST, host)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_VERSION, "13")
        .header(header::SEC_WEBSOCKET_KEY, generate_key())
        .body(())?;
    request
        .headers_mut()
        .insert(inner.key.0.clone(), inner.key.1.clone());
    let mut connector = inner.connector.clone();
    let stream = tokio::time::timeout(inner.response_timeout, connector.call(uri)).await??;
    let handshake =
        tokio_tungstenite::client_async_with_config(request, TokioIo::new(stream), Some(config()));
    let (socket, _) = tokio::time::timeout(inner.response_timeout, handshake).await??;
    Ok(socket)
}

/// One agent socket and its provider socket.
struct Relay {
    inner: Arc<Inner>,
    /// What is recorded if the provider echoes the key.
    echoed: Refused,
    /// The call under way, if any.
    call: Option<Settlement>,
}

/// What to do after one message.
enum Next {
    Go,
    Close,
}

impl Relay {
    fn new(inner: Arc<Inner>, echoed: Refused) -> Relay {
        Relay {
            inner,
            echoed,
            call: None,
        }
    }

    async fn run<A>(mut self, mut agent: Socket<A>, mut upstream: Upstream)
    where
        A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let shutoff = self.inner.shutoff.clone();
        loop {
            let next = tokio::select! {
                message = agent.next() => match message {
                    Some(Ok(message)) => self.agent_sent(message, &mut agent, &mut upstream).await,
                    _ => Next::Close,
                },
                message = upstream.next() => match message {
                    Some(Ok(message)) => self.provider_sent(message, &mut agent).await,
                    _ => Next::Close,
                },
                () = shutoff.cancelled() => Next::Close,
            };
            if matches!(next, Next::Close) {
                break;
            }
        }
        // A call still under way is settled to its hold when dropped.
        self.call = None;
        let _ = agent.close(None).await;
        let _ = upstream.close(None).await;
    }

    async fn agent_sent<A>(
        &mut self,
        message: Message,
        agent: &mut Socket<A>,
        upstream: &mut Upstream,
    ) -> Next
    where
        A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let (bytes, refusal) = match message {
            Message::Text(text) => (Some(text), None),
            Message::Binary(_) => (None, Some("a binary message")),
            Message::Close(_) => return Next::Close,
            // Pings are answered by the socket itself.
            _ => return Next::Go,
        };
        let (refusal, recorded) = match (bytes, refusal) {
            (Some(text), _) => match self.create(text.as_bytes()).await {
                Ok(body) => {
                    return match upstream.send(Message::text(body)).await {
                        Ok(()) => Next::Go,
                        Err(_) => Next::Close,
                    };
                }
                Err(refused) => refused,
            },
            (None, Some(what)) => (Refusal::new(Reason::Unsupported, what, None), false),
            (None, None) => return Next::Go,
        };
        self.refuse(&refusal, recorded, agent).await
    }

    /// Inspects and reserves one client message; the body to forward, or
    /// the refusal (and whether the meter has recorded it).
    async fn create(&mut self, text: &[u8]) -> Result<String, (Refusal, bool)> {
        let kind = serde_json::from_slice::<Value>(text)
            .ok()
            .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned));
        if kind.as_deref() != Some(CREATE) {
            let what = "a WebSocket message other than response.create";
            return Err((Refusal::new(Reason::Unsupported, what, None), false));
        }
        if self.call.is_some() {
            let what = "a response.create while a response is under way";
            return Err((Refusal::new(Reason::Unsupported, what, None), false));
        }
        if let Some(refusal) = self.inner.closed() {
            return Err((refusal, false));
        }
        let inner = Arc::clone(&self.inner);
        let started = Instant::now();
        let turn = inner.intake.acquire().await;
        let inspected = inspect(&inner.provider, Kind::Responses, text, &|id| {
            inner.previous(id)
        })
        .map_err(|refusal| (refusal, false))?;
        drop(turn);
        let call = Call {
            provider: inner.provider.id.clone(),
            model: inspected.model.clone(),
            kind: Kind::Responses,
            transport: Transport::WebSocket,
            input_tokens_bound: inspected.input_tokens_bound,
            output_tokens_bound: inspected.output_tokens_bound,
            worst_case_usd: inspected.worst_case_usd,
            stream: true,
        };
        let reservation = inner.meter.reserve(&call).await.map_err(|refused| {
            let refusal = Refusal {
                reason: refused.reason,
                message: refused.message,
                model: Some(call.model.clone()),
            };
            (refusal, true)
        })?;
        let body = String::from_utf8(inspected.body).unwrap_or_default();
        self.call = Some(Settlement {
            inner: Arc::clone(&inner),
            held: Some(reservation.held),
            recorded: reservation.recorded,
            call: Some(call),
            prices: inspected.prices,
            started,
            sent: true,
            streamed: true,
            status: Some(StatusCode::SWITCHING_PROTOCOLS.as_u16()),
            request_id: None,
            tracker: Some(Tracker::new(inner.provider.api, Kind::Responses, true)),
        });
        Ok(body)
    }

    /// Answers `refusal` with an `error` event, after recording it (a
    /// meter's refusal the meter has recorded).
    async fn refuse<A>(&self, refusal: &Refusal, recorded: bool, agent: &mut Socket<A>) -> Next
    where
        A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        if !recorded {
            let mut record = self.echoed.clone();
            record.reason = refusal.reason;
            record.model.clone_from(&refusal.model);
            self.inner.recorder.refused(&record).await;
        }
        let api = self.inner.provider.api;
        let status = shape::status(api, refusal.reason, false);
        let body = shape::body(api, status, refusal.reason.as_str(), &refusal.message);
        let event = json!({"type": "error", "status": status.as_u16(), "error": body["error"]});
        match agent.send(Message::text(event.to_string())).await {
            Ok(()) => Next::Go,
            Err(_) => Next::Close,
        }
    }

    /// The refusal to answer instead of the call's answer if its
    /// reservation could not be recorded (the gates are closing then).
    async fn unrecorded(&mut self) -> Option<Refusal> {
        let call = self.call.as_mut()?;
        let refused = call.recorded.wait().await.err()?;
        Some(Refusal {
            reason: refused.reason,
            message: refused.message,
            model: call.call.as_ref().map(|c| c.model.clone()),
        })
    }

    async fn provider_sent<A>(&mut self, message: Message, agent: &mut Socket<A>) -> Next
    where
        A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let Message::Text(text) = message else {
            return match message {
                Message::Close(_) => Next::Close,
                _ => Next::Go,
            };
        };
        if let Some(refusal) = self.unrecorded().await {
            self.refuse(&refusal, true, agent).await;
            return Next::Close;
        }
        if echo::holds(text.as_bytes(), self.inner.provider.key.expose().as_bytes()) {
            self.inner.recorder.refused(&self.echoed).await;
            return Next::Close;
        }
        let event = serde_json::from_slice::<Value>(text.as_bytes()).unwrap_or(Value::Null);
        let ends = event
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| FINAL_EVENTS.contains(&t));
        if let Some(tracker) = self.call.as_mut().and_then(|c| c.tracker.as_mut()) {
            tracker.event(&event);
        }
        if ends {
            self.call = None;
        }
        match agent.send(Message::Text(text)).await {
            Ok(()) => Next::Go,
            Err(_) => Next::Close,
        }
    }
}
