//! The gate's HTTP side: one [`Gate`] per declared server, speaking MCP's
//! Streamable HTTP transport to the agent and forwarding to the server.
//!
//! - Every request, first: `Host` loopback, `Origin` absent or loopback
//!   ([`crate::rebinding`]), else 400 or 403 (`mcp_host_refused`,
//!   `mcp_origin_refused`) and nothing reaches the server.
//! - Every request: an `MCP-Protocol-Version` header, if sent, names one of
//!   [`SUPPORTED_REVISIONS`](crate::SUPPORTED_REVISIONS), once; else 400
//!   (`mcp_unsupported_protocol_version`) and nothing reaches the server.
//! - `POST`: the body goes through [`inspect`] (with that revision: from
//!   2025-06-18 on, a batch is refused). A refusal is answered with its
//!   status and JSON-RPC error; nothing reaches the server. A gated
//!   `tools/call` is put to the [`Approver`] (by default [`RefuseGated`]).
//!   Then every `tools/call` of the body goes to the [`Meter`] (by default
//!   [`Unmetered`]), which charges them all or refuses them all. Only then
//!   are exactly the inspected bytes posted to the server's URL.
//! - `GET` (the server-to-client SSE stream) and `DELETE` (session end) are
//!   forwarded without a body.
//! - Any other method: 405.
//! - Once the run's [`Shutoff`] is thrown, every request is refused
//!   (`mcp_gate_closed`: 200 with the request's id, else 503), checked
//!   again right before asking a person, charging and sending, so that a
//!   request held or metered when the switch is thrown is not sent either;
//!   the gate's own answers to server requests stop too.
//! - Every request the gate refuses itself (any refusal above, and a
//!   gated call whose approver could not ask, [`Approval::Failed`]) goes to
//!   the [`Recorder`] (by default [`Unrecorded`]) as a [`RefusedRequest`]
//!   and is answered only once that resolves. A human decision and a spend
//!   refusal are the [`Approver`]'s and the [`Meter`]'s to record.
//!
//! Where the request goes is the gate's [`Transport`]: the server's URL
//! ([`HttpTransport`], built by [`Gate::new`]), or an in-process bridge to a
//! server Constle runs ([`Gate::with_transport`]). Everything above and
//! below happens the same for either: the transport sees only requests the
//! gate would send, and the gate sees only the responses it relays.
//!
//! Only these agent headers are forwarded: `Content-Type`, `Accept`,
//! `Mcp-Session-Id`, `MCP-Protocol-Version`, `Last-Event-ID`. The agent's
//! `Host`, `Authorization`, cookies and everything else stay behind; the
//! server's URL never reaches the agent, not even in an error message (it
//! may carry a credential). No header lifts a refusal. The headers the
//! Agentfile declares for the server ([`crate::credentials`]) are added to
//! every request the gate sends it, whatever the agent sent.
//!
//! What comes back: JSON bodies and each `data` of an SSE stream pass
//! through [`filter_server_message`] (tool lists filtered, server-to-client
//! requests the policy does not allow answered to the server with -32601
//! and never relayed); a message the filter leaves as it is goes to the
//! agent in the server's own bytes. Each filtered tool list goes to the
//! [`Recorder`] ([`OfferedTools`], once per distinct list) before the agent
//! sees it; one it cannot record, or one past [`MAX_OFFERED_LISTS`]
//! distinct lists, is not relayed: a JSON body becomes a 503 JSON-RPC
//! error (`mcp_tools_unrecorded`), an SSE stream is cut before it. A message the gate cannot parse is not
//! relayed: a JSON body becomes a 502 JSON-RPC error, an SSE stream is
//! cut. Other bodies are dropped; the status is kept. A `3xx` answer
//! (no redirect is followed) reaches the agent as its status alone: no
//! body, whatever its type, and none of its headers. Of the server's
//! headers only `Mcp-Session-Id` and `MCP-Protocol-Version` are relayed,
//! each only if sent once and made of visible ASCII (else 502), besides
//! the `Content-Type` the gate sets itself. A JSON body, an SSE event or a
//! relayed header that carries back the value of a header the gate adds is
//! not relayed either (502 `mcp_upstream_echoed_secret`, or the stream
//! cut).
//!
//! # Time
//!
//! A server that accepts a request and never answers must not hold the
//! agent: the response's headers, and a JSON body in full, must arrive
//! within the gate's response timeout ([`DEFAULT_RESPONSE_TIMEOUT`],
//! [`Gate::with_response_timeout`]), else the agent gets a 504 JSON-RPC
//! error (`mcp_upstream_timeout`) naming the server by its id. An SSE
//! stream answering a POST may last longer, but may not fall silent for
//! longer than that bound between two chunks (keep-alive comments count):
//! then it is cut, as if the connection had dropped, and the agent may
//! resume it with `Last-Event-ID`. The GET stream has no bound: it is the
//! standing channel for server-initiated messages, silence is its normal
//! state, and the agent ends it by disconnecting.

use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::serve::Listener;
use bytes::Bytes;
use constle_manifest::McpServer;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

use crate::credentials::Credentials;
use crate::error::GateError;
use crate::filter::{FilterError, filter};
use crate::inspect::{Decision, Forward, Inspection, MAX_BODY_BYTES, Refusal, ToolCall, inspect};
use crate::offered::{MAX_OFFERED_LISTS, OfferedTools, Recorded};
use crate::pending::{MAX_PENDING_TOOLS_LISTS, PendingLists};
use crate::policy::ServerPolicy;
use crate::rebinding;
use crate::record::{Recorder, Unrecorded};
use crate::refused::{Asked, RefusedRequest};
use crate::revision::Revision;
use crate::rpc::{Reason, RequestId, error_response, to_bytes};
use crate::shutoff::Shutoff;
use crate::sse;
use crate::transport::{HttpTransport, Transport, TransportBody, TransportError};

/// What the agent gets back: a whole body, or a filtered SSE stream.
type Body = Either<Full<Bytes>, UnsyncBoxBody<Bytes, std::io::Error>>;

type Response = hyper::Response<Body>;

/// Agent headers forwarded to the server; no other is.
pub const FORWARDED_REQUEST_HEADERS: [&str; 5] = [
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// Server headers relayed to the agent (besides the `Content-Type` the
/// gate sets itself), each only if sent once and made of visible ASCII.
pub const RELAYED_RESPONSE_HEADERS: [&str; 2] = ["mcp-session-id", "mcp-protocol-version"];

/// How long the gate waits for a server's response (and between two
/// chunks of an SSE stream answering a POST) unless
/// [`Gate::with_response_timeout`] says otherwise: two minutes.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(120);

// The header lists as header names, made at compile time: looking a
// header up by a `&str` parses the name again on every call.
const FORWARDED: [HeaderName; 5] = [
    HeaderName::from_static(FORWARDED_REQUEST_HEADERS[0]),
    HeaderName::from_static(FORWARDED_REQUEST_HEADERS[1]),
    HeaderName::from_static(FORWARDED_REQUEST_HEADERS[2]),
    HeaderName::from_static(FORWARDED_REQUEST_HEADERS[3]),
    HeaderName::from_static(FORWARDED_REQUEST_HEADERS[4]),
];
const RELAYED: [HeaderName; 2] = [
    HeaderName::from_static(RELAYED_RESPONSE_HEADERS[0]),
    HeaderName::from_static(RELAYED_RESPONSE_HEADERS[1]),
];
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// A human (or other) decision on a gated call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Approval {
    /// Forward the call.
    Approved,
    /// Do not forward; the agent gets a JSON-RPC error with this message
    /// (reason `mcp_gate_refused`). The approver has recorded the decision.
    Refused {
        /// What the agent is told.
        message: String,
    },
    /// Do not forward: the approver could not put the call to anyone (its
    /// arguments have no exact digest, the decision could not be
    /// recorded, the approver set cannot be read, …) and recorded nothing.
    /// The agent gets the same error as for [`Approval::Refused`], and the
    /// gate records the refusal itself ([`Recorder`]), with `detail`.
    Failed {
        /// What the agent is told: what failed, never a host path, a
        /// secret or a URL.
        message: String,
        /// What went wrong, in full, for the operator: recorded with the
        /// refusal ([`RefusedRequest::detail`]), never sent to the agent.
        detail: String,
    },
}

/// The future an [`Approver`] returns.
pub type ApprovalFuture<'a> = Pin<Box<dyn Future<Output = Approval> + Send + 'a>>;

/// What a [`Meter`] says about the calls of one body.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Metered {
    /// Charged (or free): forward.
    Charged,
    /// Not forwarded; each call is answered with this message (reason
    /// `mcp_spend_refused`).
    Refused {
        /// What the agent is told.
        message: String,
    },
}

/// The future a [`Meter`] returns.
pub type MeterFuture<'a> = Pin<Box<dyn Future<Output = Metered> + Send + 'a>>;

/// Charges for `tools/call`s before they are forwarded: the spend caps plug
/// in here. Called after any human decision, with every call of one body,
/// which is forwarded only on [`Metered::Charged`].
pub trait Meter: Send + Sync + 'static {
    /// Charges for `calls`, all or nothing.
    fn charge<'a>(&'a self, calls: Vec<&'a ToolCall>) -> MeterFuture<'a>;
}

/// The default [`Meter`]: nothing is priced.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unmetered;

impl Meter for Unmetered {
    fn charge<'a>(&'a self, _calls: Vec<&'a ToolCall>) -> MeterFuture<'a> {
        Box::pin(std::future::ready(Metered::Charged))
    }
}

/// Decides a [`Decision::Gated`] call before it is forwarded. The human
/// gates (terminal and webhook) plug in here; the call is forwarded only
/// on [`Approval::Approved`], and its bytes are the ones `call` was parsed
/// from.
pub trait Approver: Send + Sync + 'static {
    /// Waits for the decision on `call`.
    fn decide<'a>(&'a self, call: &'a ToolCall) -> ApprovalFuture<'a>;
}

/// The default [`Approver`]: refuses every gated call, since no human gate
/// is wired in yet. Never treats "nobody asked" as approval.
#[derive(Clone, Copy, Debug, Default)]
pub struct RefuseGated;

impl Approver for RefuseGated {
    fn decide<'a>(&'a self, call: &'a ToolCall) -> ApprovalFuture<'a> {
        let message = format!(
            "tool {:?} of MCP server {:?} needs a human approval and no approver is \
             configured, so the Constle gate did not forward the call",
            call.tool, call.server
        );
        Box::pin(async move { Approval::Refused { message } })
    }
}

/// The HTTP gate in front of one declared MCP server.
///
/// ```no_run
/// # async fn run(server: &constle_manifest::McpServer, gates: &constle_manifest::HumanGates)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// use constle_mcp_gate::{Gate, ServerPolicy};
/// let listener = tokio::net::UnixListener::bind("/run/constle/mcp-accounting.sock")?;
/// let env = |name: &str| std::env::var(name).ok();
/// Gate::new(server, ServerPolicy::new(server, gates), &env)?.serve(listener).await?;
/// # Ok(()) }
/// ```
pub struct Gate {
    policy: ServerPolicy,
    transport: Arc<dyn Transport>,
    credentials: Credentials,
    approver: Arc<dyn Approver>,
    meter: Arc<dyn Meter>,
    recorder: Arc<dyn Recorder>,
    response_timeout: Duration,
    shutoff: Shutoff,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("server", &self.policy.server().as_str())
            .field("headers", &self.credentials)
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// A gate forwarding to `server.url` under `policy`, refusing gated
    /// calls ([`RefuseGated`]) until [`Gate::with_approver`] says otherwise,
    /// waiting [`DEFAULT_RESPONSE_TIMEOUT`] for responses. The client
    /// follows no redirects and uses no proxy.
    ///
    /// The values of `server.headers` are read now, through `env` (host
    /// variable look-ups; `None`: unset): a header whose variable is unset,
    /// empty or unusable is a [`GateError::Header`], naming the header and
    /// the variable, never the value.
    pub fn new(
        server: &McpServer,
        policy: ServerPolicy,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Gate, GateError> {
        let url = server.url().ok_or_else(|| {
            GateError::Url(format!(
                "server {} has no url: Constle runs it, and its gate needs the stdio bridge",
                server.id
            ))
        })?;
        let credentials = Credentials::resolve(server, env)?;
        let transport = HttpTransport::new(url.as_str())?;
        Ok(Gate {
            credentials,
            ..Gate::with_transport(policy, transport)
        })
    }

    /// A gate forwarding through `transport` under `policy`, with the
    /// defaults of [`Gate::new`] and no declared headers: every rule of the
    /// gate applies the same, whatever the transport.
    pub fn with_transport(policy: ServerPolicy, transport: impl Transport) -> Gate {
        Gate {
            policy,
            transport: Arc::new(transport),
            credentials: Credentials::none(),
            approver: Arc::new(RefuseGated),
            meter: Arc::new(Unmetered),
            recorder: Arc::new(Unrecorded),
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            shutoff: Shutoff::new(),
        }
    }

    /// Also keeps from the agent any answer holding one of `secrets`, the
    /// way answers holding a declared header's value are kept: for the
    /// values a stdio server's environment holds (`env_secret_refs`).
    #[must_use]
    pub fn withholding(mut self, secrets: impl IntoIterator<Item = String>) -> Gate {
        self.credentials = self.credentials.withholding(secrets);
        self
    }

    /// Puts gated calls to `approver`.
    #[must_use]
    pub fn with_approver(mut self, approver: impl Approver) -> Gate {
        self.approver = Arc::new(approver);
        self
    }

    /// Charges calls to `meter` before forwarding them.
    #[must_use]
    pub fn with_meter(mut self, meter: impl Meter) -> Gate {
        self.meter = Arc::new(meter);
        self
    }

    /// Records every request the gate refuses itself with `recorder`,
    /// before the refusal is answered (see [`RefusedRequest`] for which).
    #[must_use]
    pub fn with_recorder(mut self, recorder: impl Recorder) -> Gate {
        self.recorder = Arc::new(recorder);
        self
    }

    /// Closes with `shutoff`, which the gate checks right before anything
    /// it would send to the server: once it is thrown, every request is
    /// refused (`mcp_gate_closed`), held and metered ones included, and
    /// nothing more reaches the server. By default a gate has a switch of
    /// its own that nothing throws.
    #[must_use]
    pub fn with_shutoff(mut self, shutoff: Shutoff) -> Gate {
        self.shutoff = shutoff;
        self
    }

    /// Waits at most `timeout` (capped at a day) for a server's response
    /// (see the module docs: headers and a JSON body in full; the silence
    /// between two chunks of an SSE stream answering a POST). The wait for
    /// a human decision is not counted.
    #[must_use]
    pub fn with_response_timeout(mut self, timeout: Duration) -> Gate {
        // Bounded so that a deadline computed from it cannot overflow.
        self.response_timeout = timeout.min(Duration::from_secs(86_400));
        self
    }

    /// Serves the agent on `listener` (a [`tokio::net::UnixListener`] in
    /// production, a [`tokio::net::TcpListener`] on 127.0.0.1 in tests),
    /// HTTP/1.1 on every path, until the task is dropped. Failed accepts
    /// are retried ([`Listener`]), so it never returns an error.
    pub async fn serve<L: Listener>(self, mut listener: L) -> std::io::Result<()> {
        let inner = Arc::new(Inner {
            policy: self.policy,
            transport: self.transport,
            credentials: self.credentials,
            approver: self.approver,
            meter: self.meter,
            recorder: self.recorder,
            response_timeout: self.response_timeout,
            shutoff: self.shutoff,
            tools_lists: Mutex::new(PendingLists::new(MAX_PENDING_TOOLS_LISTS)),
            offered: tokio::sync::Mutex::new(Recorded::default()),
        });
        loop {
            let (io, _) = listener.accept().await;
            tokio::spawn(serve_connection(Arc::clone(&inner), io));
        }
    }
}

/// One agent connection, request after request (keep-alive), each one
/// handled to the end before the next is read. A framework router on top
/// of hyper added nothing here (every path gets the same handler) but a
/// share of the CPU time of every call.
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
        .await;
}

struct Inner {
    policy: ServerPolicy,
    transport: Arc<dyn Transport>,
    credentials: Credentials,
    approver: Arc<dyn Approver>,
    meter: Arc<dyn Meter>,
    recorder: Arc<dyn Recorder>,
    response_timeout: Duration,
    shutoff: Shutoff,
    /// Ids of the `tools/list` requests forwarded and not yet answered:
    /// their responses must be tool lists, filtered wherever they arrive
    /// (POST body, SSE, a resumed GET stream).
    tools_lists: Mutex<PendingLists>,
    /// The tool lists recorded. Held while one is recorded, so that two
    /// answers with one list record it once, and neither is relayed before.
    offered: tokio::sync::Mutex<Recorded>,
}

impl Inner {
    fn tools_lists(&self) -> std::sync::MutexGuard<'_, PendingLists> {
        // A holder that panicked can at worst leave one id too many or too
        // few, and tool lists are filtered whatever the ids say.
        self.tools_lists
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `id` answers a forwarded `tools/list`; forgets it if so, as
    /// a request is answered once.
    fn take_tools_list(&self, id: &RequestId) -> bool {
        self.tools_lists().take(id)
    }

    fn remember_tools_lists(&self, ids: impl IntoIterator<Item = RequestId>) {
        let mut pending = self.tools_lists();
        for id in ids {
            pending.insert(id);
        }
    }

    /// Answers `asked` with `response`, a refusal for `reason`, once the
    /// recorder has it: on disk before the agent hears of it.
    async fn refuse(&self, asked: Asked<'_>, reason: Reason, response: Response) -> Response {
        self.record_refusal(self.refused(asked, reason), response)
            .await
    }

    /// The record of `asked`, refused for `reason`.
    fn refused(&self, asked: Asked<'_>, reason: Reason) -> RefusedRequest {
        RefusedRequest::new(self.policy.server().as_str(), asked, reason)
    }

    /// Answers with `response` once the recorder has `refused`.
    async fn record_refusal(&self, refused: RefusedRequest, response: Response) -> Response {
        self.recorder.refused(&refused).await;
        response
    }

    /// Records `list` unless it is on record already; the message to answer
    /// the agent with instead of relaying it, if it cannot be recorded.
    async fn offer(&self, list: &OfferedTools) -> Result<(), String> {
        let mut recorded = self.offered.lock().await;
        if recorded.contains(&list.digest) {
            return Ok(());
        }
        let server = self.policy.server().as_str();
        if recorded.is_full() {
            return Err(format!(
                "MCP server {server:?} offered more than {MAX_OFFERED_LISTS} different tool lists in this run; the Constle gate relays no new one"
            ));
        }
        match self.recorder.offered(list).await {
            Ok(()) => {
                recorded.insert(list.digest.clone());
                Ok(())
            }
            Err(_) => Err(format!(
                "the Constle gate could not record the tool list of MCP server {server:?}, so it did not relay it"
            )),
        }
    }

    /// The refusal of `asked`, once the gates are closed
    /// ([`Gate::with_shutoff`]). Checked right before each step that could
    /// reach the server or cost anything: asking a person, charging,
    /// sending.
    async fn refuse_if_closed(&self, asked: Asked<'_>) -> Option<Response> {
        let why = self.shutoff.closed()?;
        let status = match asked.id {
            Some(_) => StatusCode::OK,
            None => StatusCode::SERVICE_UNAVAILABLE,
        };
        let message = format!("the Constle gate forwards nothing more: {why}");
        let response = rpc_error(status, asked.id, Reason::GateClosed, &message);
        Some(self.refuse(asked, Reason::GateClosed, response).await)
    }

    /// Answers server-to-client requests the agent never sees; nothing,
    /// once the gates are closed.
    fn answer_server(&self, body: Vec<u8>, agent_headers: &HeaderMap) {
        if self.shutoff.closed().is_some() {
            return;
        }
        let mut headers = forwarded(agent_headers);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.remove(LAST_EVENT_ID);
        let request = self.request(Method::POST, headers, Bytes::from(body));
        let sent = tokio::time::timeout(self.response_timeout, self.transport.send(request));
        tokio::spawn(async move {
            // The server's answer to an error response carries nothing.
            let _ = sent.await;
        });
    }

    /// A request to the server (the transport knows where it is), with
    /// the declared headers.
    fn request(&self, method: Method, mut headers: HeaderMap, body: Bytes) -> Request<Bytes> {
        self.credentials.add_to(&mut headers);
        let mut request = Request::new(body);
        *request.method_mut() = method;
        *request.headers_mut() = headers;
        request
    }

    /// A JSON-RPC error naming the server by its id, never by its URL.
    fn upstream_error(&self, failure: Upstream<'_>, id: Option<&RequestId>) -> Response {
        let server = self.policy.server().as_str();
        let (status, reason, message) = match failure {
            Upstream::Unreachable => (
                StatusCode::BAD_GATEWAY,
                Reason::UpstreamUnreachable,
                format!("the Constle gate could not reach MCP server {server:?}"),
            ),
            Upstream::Timeout => (
                StatusCode::GATEWAY_TIMEOUT,
                Reason::UpstreamTimeout,
                format!(
                    "MCP server {server:?} did not answer within {} s; the Constle gate gave up",
                    self.response_timeout.as_secs_f64()
                ),
            ),
            Upstream::EchoedSecret => (
                StatusCode::BAD_GATEWAY,
                Reason::UpstreamEchoedSecret,
                format!(
                    "MCP server {server:?} sent back a secret it holds (a header the Constle gate adds for it, or a value of its env_secret_refs); it was not relayed"
                ),
            ),
            Upstream::Exited(why) => (
                StatusCode::BAD_GATEWAY,
                Reason::ServerExited,
                format!(
                    "MCP server {server:?} is not running ({why}); the Constle gate could not forward the request"
                ),
            ),
            Upstream::Malformed(what) => (
                StatusCode::BAD_GATEWAY,
                Reason::UpstreamMalformed,
                format!(
                    "MCP server {server:?} sent {what} the Constle gate cannot check; it was not relayed"
                ),
            ),
        };
        rpc_error(status, id, reason, &message)
    }
}

/// Why a server's answer is not relayed.
enum Upstream<'a> {
    /// No connection, or it broke.
    Unreachable,
    /// No answer within the response timeout.
    Timeout,
    /// The server is not running: how it ended.
    Exited(&'a str),
    /// Something the gate cannot check: what it was.
    Malformed(&'a str),
    /// The value of a header the gate adds, sent back.
    EchoedSecret,
}

/// What the gate knows about one forwarded request when the answer comes.
struct Exchange {
    agent_headers: HeaderMap,
    /// The id to answer an error with (a single request's).
    reply_id: Option<RequestId>,
    /// When the headers and a JSON body must have arrived.
    deadline: Instant,
    /// The most silence allowed between two chunks of an SSE answer.
    sse_idle: Option<Duration>,
}

async fn handle(inner: Arc<Inner>, request: Request<Incoming>) -> Response {
    let (parts, body) = request.into_parts();
    if let Err(refused) = rebinding::check(&parts.headers, &parts.uri) {
        let response = rpc_error(refused.status(), None, refused.reason(), refused.message());
        let asked = Asked::http(&parts.method);
        return inner.refuse(asked, refused.reason(), response).await;
    }
    let headers = parts.headers;
    let method = parts.method;
    if method != Method::POST && method != Method::GET && method != Method::DELETE {
        let mut response = rpc_error(
            StatusCode::METHOD_NOT_ALLOWED,
            None,
            Reason::InvalidMessage,
            "the Constle gate accepts only POST, GET and DELETE",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
        let asked = Asked::http(&method);
        return inner.refuse(asked, Reason::InvalidMessage, response).await;
    }
    let revision = match protocol_version(&headers) {
        Ok(revision) => revision,
        Err(message) => {
            let reason = Reason::UnsupportedProtocolVersion;
            let response = rpc_error(StatusCode::BAD_REQUEST, None, reason, &message);
            return inner.refuse(Asked::http(&method), reason, response).await;
        }
    };
    if method == Method::POST {
        return post(inner, headers, revision, body).await;
    }
    let request = inner.request(method.clone(), forwarded(&headers), Bytes::new());
    // The GET stream is the server's standing channel: silence is normal.
    let sse_idle = (method != Method::GET).then_some(inner.response_timeout);
    exchange(inner, request, headers, Named::default(), sse_idle).await
}

/// The revision the agent's `MCP-Protocol-Version` names, if it sent one;
/// an error message if it names none the gate serves, or comes twice.
fn protocol_version(headers: &HeaderMap) -> Result<Option<Revision>, String> {
    let mut values = headers.get_all(&PROTOCOL_VERSION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("MCP-Protocol-Version is sent more than once".to_string());
    }
    Revision::from_header(value.as_bytes())
        .map(Some)
        .map_err(|err| err.to_string())
}

async fn post(
    inner: Arc<Inner>,
    headers: HeaderMap,
    revision: Option<Revision>,
    body: Incoming,
) -> Response {
    let Ok(body) = read_limited(body).await else {
        let reason = Reason::InvalidMessage;
        let message = "the Constle gate could not read the request body";
        let response = rpc_error(StatusCode::BAD_REQUEST, None, reason, message);
        return inner
            .refuse(Asked::http(&Method::POST), reason, response)
            .await;
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let inspection = inspect(&inner.policy, &body, content_type, revision);
    // Not held while a refusal waits for the recorder: a flood of refused
    // bodies may wait, but not with 4 MiB each.
    drop(body);
    let forward = match inspection {
        Inspection::Refuse(refusal) => return refuse_inspected(&inner, &refusal).await,
        Inspection::Forward(forward) => forward,
    };
    let asked = asked(&forward);
    let named = Named::of(asked);
    if let Some(call) = forward.gated() {
        if let Some(closed) = inner.refuse_if_closed(asked).await {
            return closed;
        }
        let refused = |message: &str| {
            rpc_error(
                StatusCode::OK,
                Some(&call.request_id),
                Reason::GateRefused,
                message,
            )
        };
        match inner.approver.decide(call).await {
            Approval::Approved => {}
            Approval::Refused { message } => return refused(&message),
            Approval::Failed { message, detail } => {
                let record = inner
                    .refused(asked, Reason::GateRefused)
                    .with_detail(detail);
                return inner.record_refusal(record, refused(&message)).await;
            }
        }
    }
    let calls: Vec<&ToolCall> = forward
        .decisions()
        .iter()
        .filter_map(|d| match d {
            Decision::Call(call) | Decision::Gated(call) => Some(call),
            _ => None,
        })
        .collect();
    if let Some(closed) = inner.refuse_if_closed(asked).await {
        return closed;
    }
    if !calls.is_empty()
        && let Metered::Refused { message } = inner.meter.charge(calls).await
    {
        return refuse_all(&forward, Reason::SpendRefused, &message);
    }
    inner.remember_tools_lists(forward.tools_list_ids());
    let mut upstream_headers = forwarded(&headers);
    mirror(&forward, &mut upstream_headers);
    let request = inner.request(
        Method::POST,
        upstream_headers,
        Bytes::from(forward.into_bytes()),
    );
    let sse_idle = Some(inner.response_timeout);
    exchange(inner, request, headers, named, sse_idle).await
}

/// Answers an inspected body the gate refused, once it is recorded.
async fn refuse_inspected(inner: &Inner, refusal: &Refusal) -> Response {
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let response = json_response(status, refusal.body().to_vec());
    let asked = Asked {
        http_method: &Method::POST,
        method: refusal.method(),
        tool: refusal.tool(),
        id: refusal.request_id(),
    };
    inner.refuse(asked, refusal.reason(), response).await
}

/// What a body the gate would forward asks, for a refusal after all; its
/// id is the one to answer a single request's errors with (none for a
/// batch, a notification or a response).
fn asked(forward: &Forward) -> Asked<'_> {
    let mut asked = Asked::http(&Method::POST);
    match forward.decisions() {
        _ if forward.is_batch() => {}
        [Decision::Pass { method, id }] => {
            asked.method = Some(method);
            asked.id = id.as_ref();
        }
        [Decision::Call(call) | Decision::Gated(call)] => {
            asked.method = Some("tools/call");
            asked.tool = Some(&call.tool);
            asked.id = Some(&call.request_id);
        }
        _ => {}
    }
    asked
}

/// What a forwarded request asked, for the record of a refusal after all
/// (owned: the body it was read from is on its way); the id is the one to
/// answer a single request's errors with.
#[derive(Default)]
struct Named {
    method: Option<String>,
    tool: Option<String>,
    id: Option<RequestId>,
}

impl Named {
    fn of(asked: Asked<'_>) -> Named {
        Named {
            method: asked.method.map(str::to_owned),
            tool: asked.tool.map(str::to_owned),
            id: asked.id.cloned(),
        }
    }
}

/// Sends `request` to the server, unless the gates are closed by now, and
/// relays its answer, within the response timeout.
async fn exchange(
    inner: Arc<Inner>,
    request: Request<Bytes>,
    agent_headers: HeaderMap,
    named: Named,
    sse_idle: Option<Duration>,
) -> Response {
    let http_method = request.method().clone();
    let reply_id = named.id;
    let asked = Asked {
        http_method: &http_method,
        method: named.method.as_deref(),
        tool: named.tool.as_deref(),
        id: reply_id.as_ref(),
    };
    if let Some(closed) = inner.refuse_if_closed(asked).await {
        return closed;
    }
    let deadline = Instant::now() + inner.response_timeout;
    let upstream = match tokio::time::timeout_at(deadline, inner.transport.send(request)).await {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(TransportError::Refused {
            status,
            reason,
            message,
        })) => {
            let response = rpc_error(status, asked.id, reason, &message);
            return inner.refuse(asked, reason, response).await;
        }
        Ok(Err(TransportError::Unreachable)) => {
            return inner.upstream_error(Upstream::Unreachable, reply_id.as_ref());
        }
        Ok(Err(TransportError::Exited { why })) => {
            return inner.upstream_error(Upstream::Exited(&why), reply_id.as_ref());
        }
        Err(_) => return inner.upstream_error(Upstream::Timeout, reply_id.as_ref()),
    };
    let exchange = Exchange {
        agent_headers,
        reply_id,
        deadline,
        sse_idle,
    };
    relay(inner, upstream, exchange).await
}

/// Reads at most one chunk past [`MAX_BODY_BYTES`], so the caller sees
/// that the body is too large without the gate reading all of it. A body
/// that came in one chunk, as small ones do, is not copied.
async fn read_limited<B>(mut body: B) -> Result<Bytes, B::Error>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    let mut first = Bytes::new();
    let mut rest = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(chunk) = frame?.into_data() else {
            continue; // trailers carry nothing the gate relays
        };
        if first.is_empty() {
            first = chunk;
        } else {
            if rest.is_empty() {
                rest.extend_from_slice(&first);
            }
            rest.extend_from_slice(&chunk);
        }
        if first.len().max(rest.len()) > MAX_BODY_BYTES {
            break;
        }
    }
    Ok(if rest.is_empty() { first } else { rest.into() })
}

fn forwarded(agent: &HeaderMap) -> HeaderMap {
    // Room for these and the mirrored ones without growing.
    let mut headers = HeaderMap::with_capacity(FORWARDED.len() + 2);
    for name in &FORWARDED {
        for value in agent.get_all(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

/// `Mcp-Method` and `Mcp-Name` (SEP-2243, revision 2026-07-28), which
/// servers may check against the body: rebuilt from the parsed message,
/// never taken from the agent, so no header can name another call than the
/// body holds. A batch gets none (it has no single method). `Mcp-Name` is
/// set for `tools/call` only: other methods' names are not parsed here.
/// The agent's own are not forwarded ([`FORWARDED_REQUEST_HEADERS`]).
fn mirror(forward: &Forward, headers: &mut HeaderMap) {
    let (method, name) = match forward.decisions() {
        [Decision::Pass { method, .. }] if !forward.is_batch() => (method.as_str(), None),
        [Decision::Call(call) | Decision::Gated(call)] if !forward.is_batch() => {
            ("tools/call", Some(call.tool.as_str()))
        }
        _ => return,
    };
    let mut put = |header: HeaderName, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(header, value);
        }
    };
    put(MCP_METHOD, method);
    if let Some(name) = name {
        put(MCP_NAME, name);
    }
}

/// The server's headers the agent may see; the name of the first that
/// cannot be relayed: sent twice (which one would the agent use?), empty,
/// or not visible ASCII (what MCP allows in a session id).
fn relayed_headers(upstream: &HeaderMap) -> Result<HeaderMap, &'static str> {
    let mut headers = HeaderMap::new();
    for (name, shown) in RELAYED.iter().zip(RELAYED_RESPONSE_HEADERS) {
        let mut values = upstream.get_all(name).iter();
        let Some(value) = values.next() else {
            continue;
        };
        let visible = !value.is_empty() && value.as_bytes().iter().all(u8::is_ascii_graphic);
        if values.next().is_some() || !visible {
            return Err(shown);
        }
        headers.insert(name.clone(), value.clone());
    }
    Ok(headers)
}

async fn relay(
    inner: Arc<Inner>,
    upstream: hyper::Response<TransportBody>,
    exchange: Exchange,
) -> Response {
    let reply_id = exchange.reply_id.as_ref();
    let status = upstream.status();
    if status.is_redirection() {
        // The status alone: the gate follows no redirect, and its body,
        // its `Location` or any other header could carry what the server
        // put there to the agent.
        let mut response = empty();
        *response.status_mut() = status;
        return response;
    }
    let headers = match relayed_headers(upstream.headers()) {
        Ok(headers) => headers,
        Err(name) => {
            let what = format!("a {name} header (twice, empty or not visible ASCII)");
            return inner.upstream_error(Upstream::Malformed(&what), reply_id);
        }
    };
    if headers
        .values()
        .any(|v| inner.credentials.appear_in(v.as_bytes()))
    {
        return inner.upstream_error(Upstream::EchoedSecret, reply_id);
    }
    let content_type = upstream
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    let mut response = match content_type.as_deref() {
        Some("text/event-stream") => relay_sse(inner, upstream.into_body(), exchange),
        Some("application/json") => match relay_json(&inner, upstream.into_body(), &exchange).await
        {
            Ok(response) => response,
            Err(failure) => return failure,
        },
        // Anything else is not relayed; the status is.
        _ => empty(),
    };
    *response.status_mut() = status;
    response.headers_mut().extend(headers);
    response
}

fn relay_sse(inner: Arc<Inner>, upstream: TransportBody, exchange: Exchange) -> Response {
    let stream = SseRelay {
        inner,
        upstream,
        parser: sse::Parser::default(),
        idle: exchange.sse_idle,
        agent_headers: exchange.agent_headers,
        done: false,
    };
    let frames = futures_util::stream::unfold(stream, SseRelay::next);
    let mut response = Response::new(Either::Right(StreamBody::new(frames).boxed_unsync()));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The server's JSON body, filtered, within the deadline; the error to
/// answer with instead if it cannot be read or checked in time.
async fn relay_json(
    inner: &Inner,
    upstream: TransportBody,
    exchange: &Exchange,
) -> Result<Response, Response> {
    let reply_id = exchange.reply_id.as_ref();
    let body = match tokio::time::timeout_at(exchange.deadline, read_limited(upstream)).await {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => return Err(inner.upstream_error(Upstream::Unreachable, reply_id)),
        Err(_) => return Err(inner.upstream_error(Upstream::Timeout, reply_id)),
    };
    if body.is_empty() {
        return Ok(empty());
    }
    let message = match filter(&inner.policy, &body, |id| inner.take_tools_list(id)) {
        Ok(message) => message,
        Err(err) => {
            let what = format!("a response ({err})");
            return Err(inner.upstream_error(Upstream::Malformed(&what), reply_id));
        }
    };
    if let Some(to_server) = message.to_server {
        inner.answer_server(to_server, &exchange.agent_headers);
    }
    if message
        .to_agent
        .as_deref()
        .is_some_and(|bytes| inner.credentials.appear_in(bytes))
    {
        return Err(inner.upstream_error(Upstream::EchoedSecret, reply_id));
    }
    for list in &message.offered {
        if let Err(why) = inner.offer(list).await {
            let status = StatusCode::SERVICE_UNAVAILABLE;
            return Err(rpc_error(status, reply_id, Reason::ToolsUnrecorded, &why));
        }
    }
    Ok(match message.to_agent {
        Some(Cow::Borrowed(same)) => json_response(StatusCode::OK, body.slice_ref(same)),
        Some(Cow::Owned(filtered)) => json_response(StatusCode::OK, filtered),
        None => empty(),
    })
}

/// One SSE stream from the server, filtered event by event.
struct SseRelay {
    inner: Arc<Inner>,
    upstream: TransportBody,
    parser: sse::Parser,
    idle: Option<Duration>,
    agent_headers: HeaderMap,
    done: bool,
}

impl SseRelay {
    async fn next(mut self) -> Option<(Result<Frame<Bytes>, std::io::Error>, SseRelay)> {
        while !self.done {
            let frame = match self.idle {
                Some(idle) => tokio::time::timeout(idle, self.upstream.frame()).await,
                None => Ok(self.upstream.frame().await),
            };
            // Silence past the bound ends the stream like a dropped
            // connection; the agent may resume it with Last-Event-ID.
            let frame = match frame {
                Ok(Some(Ok(frame))) => frame,
                Ok(None | Some(Err(_))) | Err(_) => return None,
            };
            let Ok(chunk) = frame.into_data() else {
                continue; // trailers carry nothing the gate relays
            };
            let events = match self.parser.push(&chunk) {
                Ok(events) => events,
                Err(sse::TooLong) => return None,
            };
            let (mut out, offered) = self.filter(events);
            for (start, list) in offered {
                // The list and what follows it are not relayed (fail closed).
                if self.inner.offer(&list).await.is_err() {
                    out.truncate(start);
                    self.done = true;
                    break;
                }
            }
            if !out.is_empty() {
                return Some((Ok(Frame::data(Bytes::from(out))), self));
            }
        }
        None
    }

    /// The events to write to the agent, with the tool lists among them
    /// and where each one's event starts; on a message that cannot be
    /// checked, or that carries a declared header's value back, the ones
    /// before it, and the stream ends (fail closed).
    fn filter(&mut self, events: Vec<sse::Event>) -> (Vec<u8>, Vec<(usize, OfferedTools)>) {
        let mut out = Vec::new();
        let mut offered = Vec::new();
        for event in events {
            let start = out.len();
            let relayed = self.write_event(&event, &mut out);
            match relayed {
                Ok(lists) if !self.inner.credentials.appear_in(&out[start..]) => {
                    offered.extend(lists.into_iter().map(|list| (start, list)));
                }
                _ => {
                    out.truncate(start);
                    self.done = true;
                    break;
                }
            }
        }
        (out, offered)
    }

    /// Writes `event` as the agent may see it, and says which tool lists
    /// it holds; an error, and nothing written, if its message cannot be
    /// checked.
    fn write_event(
        &self,
        event: &sse::Event,
        out: &mut Vec<u8>,
    ) -> Result<Vec<OfferedTools>, FilterError> {
        let data = match &event.data {
            Some(data) if !data.iter().all(u8::is_ascii_whitespace) => data,
            _ => {
                event.write(None, out);
                return Ok(Vec::new());
            }
        };
        let inner = &self.inner;
        let message = filter(&inner.policy, data, |id| inner.take_tools_list(id))?;
        if let Some(to_server) = message.to_server {
            inner.answer_server(to_server, &self.agent_headers);
        }
        event.write(message.to_agent.as_deref(), out);
        Ok(message.offered)
    }
}

/// Answers every request in `forward` with an error: `reason` for its
/// `tools/call`s, [`Reason::BatchRefused`] for the rest of a batch.
fn refuse_all(forward: &Forward, reason: Reason, message: &str) -> Response {
    let answers: Vec<serde_json::Value> = forward
        .decisions()
        .iter()
        .filter_map(|d| match d {
            Decision::Call(call) | Decision::Gated(call) => Some(error_response(
                Some(&call.request_id),
                reason.code(),
                message,
                reason,
            )),
            Decision::Pass { id: Some(id), .. } => Some(error_response(
                Some(id),
                Reason::BatchRefused.code(),
                &format!("not forwarded: a call in this batch was refused: {message}"),
                Reason::BatchRefused,
            )),
            _ => None,
        })
        .collect();
    let body = match answers.as_slice() {
        [single] if !forward.is_batch() => single.clone(),
        _ => serde_json::Value::Array(answers),
    };
    json_response(StatusCode::OK, to_bytes(&body))
}

fn rpc_error(
    status: StatusCode,
    id: Option<&RequestId>,
    reason: Reason,
    message: &str,
) -> Response {
    let body = to_bytes(&error_response(id, reason.code(), message, reason));
    json_response(status, body)
}

fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response {
    let mut response = Response::new(Either::Left(Full::new(body.into())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn empty() -> Response {
    Response::new(Either::Left(Full::new(Bytes::new())))
}
