//! The gate's HTTP side: one [`Gate`] per declared server, speaking MCP's
//! Streamable HTTP transport to the agent and forwarding to the server.
//!
//! - `POST`: the body goes through [`inspect`]. A refusal is answered with
//!   its status and JSON-RPC error; nothing reaches the server. A gated
//!   `tools/call` is put to the [`Approver`] (by default [`RefuseGated`]).
//!   Otherwise exactly the inspected bytes are posted to the server's URL.
//! - `GET` (the server-to-client SSE stream) and `DELETE` (session end) are
//!   forwarded without a body.
//! - Any other method: 405.
//!
//! Only these agent headers are forwarded: `Content-Type`, `Accept`,
//! `Mcp-Session-Id`, `MCP-Protocol-Version`, `Last-Event-ID`. The agent's
//! `Host`, `Authorization`, cookies and everything else stay behind; the
//! server's URL never reaches the agent. No header changes a decision.
//!
//! What comes back: JSON bodies and each `data` of an SSE stream pass
//! through [`filter_server_message`] (`tools/list` results filtered,
//! server-to-client requests the policy does not allow answered to the
//! server with -32601 and never relayed). A message the gate cannot parse
//! is not relayed: a JSON body becomes a 502 JSON-RPC error, an SSE stream
//! is cut. Other bodies are dropped; the status is kept. Of the server's
//! headers only `Content-Type`, `Mcp-Session-Id` and `MCP-Protocol-Version`
//! are relayed.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::serve::Listener;
use constle_manifest::McpServer;
use futures_util::StreamExt;

use crate::filter::filter_server_message;
use crate::inspect::{Decision, Inspection, MAX_BODY_BYTES, ToolCall, inspect};
use crate::policy::ServerPolicy;
use crate::rpc::{Reason, RequestId, error_response, to_bytes};
use crate::sse;

/// Agent headers forwarded to the server; no other is.
pub const FORWARDED_REQUEST_HEADERS: [&str; 5] = [
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// Server headers relayed to the agent (besides the `Content-Type` the
/// gate sets itself).
pub const RELAYED_RESPONSE_HEADERS: [&str; 2] = ["mcp-session-id", "mcp-protocol-version"];

/// A human (or other) decision on a gated call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Approval {
    /// Forward the call.
    Approved,
    /// Do not forward; the agent gets a JSON-RPC error with this message
    /// (reason `mcp_gate_refused`).
    Refused {
        /// What the agent is told.
        message: String,
    },
}

/// The future an [`Approver`] returns.
pub type ApprovalFuture<'a> = Pin<Box<dyn Future<Output = Approval> + Send + 'a>>;

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

/// Why a [`Gate`] could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum GateError {
    /// The server's URL is not one the HTTP client accepts.
    Url(String),
    /// The HTTP client could not be set up.
    Client(reqwest::Error),
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateError::Url(why) => write!(f, "the MCP server URL cannot be used: {why}"),
            GateError::Client(err) => write!(f, "cannot set up the gate's HTTP client: {err}"),
        }
    }
}

impl std::error::Error for GateError {}

/// The HTTP gate in front of one declared MCP server.
///
/// ```no_run
/// # async fn run(server: &constle_manifest::McpServer, gates: &constle_manifest::HumanGates)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// use constle_mcp_gate::{Gate, ServerPolicy};
/// let listener = tokio::net::UnixListener::bind("/run/constle/mcp-accounting.sock")?;
/// Gate::new(server, ServerPolicy::new(server, gates))?.serve(listener).await?;
/// # Ok(()) }
/// ```
pub struct Gate {
    policy: ServerPolicy,
    url: reqwest::Url,
    client: reqwest::Client,
    approver: Arc<dyn Approver>,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("server", &self.policy.server().as_str())
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// A gate forwarding to `server.url` under `policy`, refusing gated
    /// calls ([`RefuseGated`]) until [`Gate::with_approver`] says otherwise.
    /// The client follows no redirects and uses no proxy.
    pub fn new(server: &McpServer, policy: ServerPolicy) -> Result<Gate, GateError> {
        let url = reqwest::Url::parse(server.url.as_str())
            .map_err(|err| GateError::Url(err.to_string()))?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(GateError::Client)?;
        Ok(Gate {
            policy,
            url,
            client,
            approver: Arc::new(RefuseGated),
        })
    }

    /// Puts gated calls to `approver`.
    #[must_use]
    pub fn with_approver(mut self, approver: impl Approver) -> Gate {
        self.approver = Arc::new(approver);
        self
    }

    /// The gate as an axum [`Router`] answering on every path.
    pub fn router(self) -> Router {
        let inner = Arc::new(Inner {
            policy: self.policy,
            url: self.url,
            client: self.client,
            approver: self.approver,
            tools_list_ids: Mutex::new(HashSet::new()),
        });
        Router::new().fallback(handle).with_state(inner)
    }

    /// Serves the agent on `listener` (a [`tokio::net::UnixListener`] in
    /// production, a [`tokio::net::TcpListener`] on 127.0.0.1 in tests)
    /// until the task is dropped or accepting fails for good.
    pub async fn serve<L>(self, listener: L) -> std::io::Result<()>
    where
        L: Listener,
        L::Addr: fmt::Debug,
    {
        axum::serve(listener, self.router()).await
    }
}

struct Inner {
    policy: ServerPolicy,
    url: reqwest::Url,
    client: reqwest::Client,
    approver: Arc<dyn Approver>,
    /// Ids of every `tools/list` request forwarded: their responses are
    /// filtered wherever they arrive (POST body, SSE, a resumed GET stream).
    tools_list_ids: Mutex<HashSet<RequestId>>,
}

impl Inner {
    fn is_tools_list(&self, id: &RequestId) -> bool {
        match self.tools_list_ids.lock() {
            Ok(ids) => ids.contains(id),
            Err(poisoned) => poisoned.into_inner().contains(id),
        }
    }

    fn remember_tools_list(&self, ids: impl IntoIterator<Item = RequestId>) {
        let mut set = match self.tools_list_ids.lock() {
            Ok(set) => set,
            Err(poisoned) => poisoned.into_inner(),
        };
        set.extend(ids);
    }

    /// Answers server-to-client requests the agent never sees.
    fn answer_server(&self, body: Vec<u8>, agent_headers: &HeaderMap) {
        let mut headers = forwarded(agent_headers);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.remove(HeaderName::from_static("last-event-id"));
        let request = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .body(body);
        tokio::spawn(async move {
            // The server's answer to an error response carries nothing.
            let _ = request.send().await;
        });
    }
}

async fn handle(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    let method = parts.method;
    if method == Method::POST {
        post(inner, headers, body).await
    } else if method == Method::GET || method == Method::DELETE {
        let upstream = inner
            .client
            .request(method, inner.url.clone())
            .headers(forwarded(&headers))
            .send()
            .await;
        match upstream {
            Ok(response) => relay(inner, response, headers, None).await,
            Err(_) => unreachable_server(&inner, None),
        }
    } else {
        let mut response = rpc_error(
            StatusCode::METHOD_NOT_ALLOWED,
            None,
            Reason::InvalidMessage,
            "the Constle gate accepts only POST, GET and DELETE",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
        response
    }
}

async fn post(inner: Arc<Inner>, headers: HeaderMap, body: Body) -> Response {
    let Ok(body) = read_limited(body).await else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            Reason::InvalidMessage,
            "the Constle gate could not read the request body",
        );
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let forward = match inspect(&inner.policy, &body, content_type) {
        Inspection::Refuse(refusal) => {
            let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
            return json_response(status, refusal.body().to_vec());
        }
        Inspection::Forward(forward) => forward,
    };
    if let Some(call) = forward.gated() {
        match inner.approver.decide(call).await {
            Approval::Approved => {}
            Approval::Refused { message } => {
                return rpc_error(
                    StatusCode::OK,
                    Some(&call.request_id),
                    Reason::GateRefused,
                    &message,
                );
            }
        }
    }
    inner.remember_tools_list(forward.tools_list_ids());
    let reply_id = if forward.is_batch() {
        None
    } else {
        forward.decisions().first().and_then(|d| match d {
            Decision::Pass { id, .. } => id.clone(),
            Decision::Call(call) | Decision::Gated(call) => Some(call.request_id.clone()),
            _ => None,
        })
    };
    let upstream = inner
        .client
        .post(inner.url.clone())
        .headers(forwarded(&headers))
        .body(forward.into_bytes())
        .send()
        .await;
    match upstream {
        Ok(response) => relay(inner, response, headers, reply_id).await,
        Err(_) => unreachable_server(&inner, reply_id.as_ref()),
    }
}

/// Reads at most one byte more than [`MAX_BODY_BYTES`], so [`inspect`]
/// sees that the body is too large without the gate reading all of it.
async fn read_limited(body: Body) -> Result<Vec<u8>, axum::Error> {
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk?);
        if buf.len() > MAX_BODY_BYTES {
            break;
        }
    }
    Ok(buf)
}

fn forwarded(agent: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for name in FORWARDED_REQUEST_HEADERS {
        for value in agent.get_all(name) {
            headers.append(HeaderName::from_static(name), value.clone());
        }
    }
    headers
}

async fn relay(
    inner: Arc<Inner>,
    mut upstream: reqwest::Response,
    agent_headers: HeaderMap,
    reply_id: Option<RequestId>,
) -> Response {
    let status = upstream.status();
    let mut headers = HeaderMap::new();
    for name in RELAYED_RESPONSE_HEADERS {
        if let Some(value) = upstream.headers().get(name) {
            headers.insert(HeaderName::from_static(name), value.clone());
        }
    }
    let content_type = upstream
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    let mut response = match content_type.as_deref() {
        Some("text/event-stream") => {
            let stream = SseRelay {
                inner,
                upstream,
                parser: sse::Parser::default(),
                agent_headers,
                done: false,
            };
            let body = futures_util::stream::unfold(stream, SseRelay::next);
            let mut response = Response::new(Body::from_stream(body));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        Some("application/json") => {
            let mut body = Vec::new();
            loop {
                match upstream.chunk().await {
                    Ok(Some(chunk)) => {
                        body.extend_from_slice(&chunk);
                        if body.len() > MAX_BODY_BYTES {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(_) => return unreachable_server(&inner, reply_id.as_ref()),
                }
            }
            if body.is_empty() {
                Response::new(Body::empty())
            } else {
                match filter_server_message(&inner.policy, &body, |id| inner.is_tools_list(id)) {
                    Ok(message) => {
                        if let Some(to_server) = message.to_server {
                            inner.answer_server(to_server, &agent_headers);
                        }
                        match message.to_agent {
                            Some(body) => json_response(StatusCode::OK, body),
                            None => Response::new(Body::empty()),
                        }
                    }
                    Err(err) => {
                        return rpc_error(
                            StatusCode::BAD_GATEWAY,
                            reply_id.as_ref(),
                            Reason::UpstreamMalformed,
                            &format!(
                                "MCP server {:?} sent a response the Constle gate cannot check \
                                 ({err}); it was not relayed",
                                inner.policy.server().as_str()
                            ),
                        );
                    }
                }
            }
        }
        // Anything else is not relayed; the status is.
        _ => Response::new(Body::empty()),
    };
    *response.status_mut() = status;
    response.headers_mut().extend(headers);
    response
}

/// One SSE stream from the server, filtered event by event.
struct SseRelay {
    inner: Arc<Inner>,
    upstream: reqwest::Response,
    parser: sse::Parser,
    agent_headers: HeaderMap,
    done: bool,
}

impl SseRelay {
    async fn next(mut self) -> Option<(Result<Bytes, std::io::Error>, SseRelay)> {
        while !self.done {
            let chunk = match self.upstream.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) | Err(_) => return None,
            };
            let events = match self.parser.push(&chunk) {
                Ok(events) => events,
                Err(sse::TooLong) => return None,
            };
            let out = self.filter(events);
            if !out.is_empty() {
                return Some((Ok(Bytes::from(out)), self));
            }
        }
        None
    }

    /// The events to write to the agent; on a message that cannot be
    /// checked, the ones before it, and the stream ends (fail closed).
    fn filter(&mut self, events: Vec<sse::Event>) -> Vec<u8> {
        let mut out = Vec::new();
        for event in events {
            let Some(data) = &event.data else {
                event.write(None, &mut out);
                continue;
            };
            if data.iter().all(u8::is_ascii_whitespace) {
                event.write(None, &mut out);
                continue;
            }
            let inner = &self.inner;
            match filter_server_message(&inner.policy, data, |id| inner.is_tools_list(id)) {
                Ok(message) => {
                    if let Some(to_server) = message.to_server {
                        inner.answer_server(to_server, &self.agent_headers);
                    }
                    event.write(message.to_agent.as_deref(), &mut out);
                }
                Err(_) => {
                    self.done = true;
                    break;
                }
            }
        }
        out
    }
}

fn unreachable_server(inner: &Inner, id: Option<&RequestId>) -> Response {
    rpc_error(
        StatusCode::BAD_GATEWAY,
        id,
        Reason::UpstreamUnreachable,
        &format!(
            "the Constle gate could not reach MCP server {:?}",
            inner.policy.server().as_str()
        ),
    )
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

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
