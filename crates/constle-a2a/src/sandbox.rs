//! The agent's side, mounted behind the sandbox relay at `CONSTLE_A2A_URL`:
//! `GET /inbox/next` and `POST /outbox`.
//!
//! The agent never holds a key: `POST /outbox` takes `{"to": did, "body":
//! …}`, and the host signs the envelope with the agent's identity and
//! delivers it to the declared peer's URL. Everything the agent sends is
//! untrusted: the body is strict JSON within [`MAX_OUTBOX_BYTES`], and only
//! declared peers with a URL can be addressed.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use constle_identity::{DidKey, SigningIdentity};
use jiff::Timestamp;
use serde_json::{Value, json};

use crate::body::{BodyError, read_limited};
use crate::client::{A2aClient, DeliverError, PeerUrl};
use crate::envelope::{EnvelopeError, MAX_ENVELOPE_BYTES, MsgId, sign_envelope};
use crate::inbox::Inbox;

/// Where the agent reads its next message.
pub const INBOX_NEXT_PATH: &str = "/inbox/next";
/// Where the agent sends a message.
pub const OUTBOX_PATH: &str = "/outbox";
/// The largest `POST /outbox` request body.
pub const MAX_OUTBOX_BYTES: usize = MAX_ENVELOPE_BYTES;

/// Receives every [`OutboxEvent`], for the audit log (`a2a_sent`).
pub type OutboxSink = Arc<dyn Fn(OutboxEvent) + Send + Sync>;

/// One message the agent asked to send, and what became of it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OutboxEvent {
    /// The addressee.
    pub to: DidKey,
    /// The signed envelope's id.
    pub msg_id: MsgId,
    /// Whether the peer accepted it.
    pub delivered: bool,
    /// The peer's HTTP status, if it answered.
    pub status: Option<u16>,
    /// The peer's reason code, or what went wrong.
    pub reason: Option<String>,
}

/// Signs and delivers the agent's messages to its declared peers.
#[derive(Clone)]
pub struct Outbox {
    identity: Arc<SigningIdentity>,
    peers: Arc<HashMap<DidKey, PeerUrl>>,
    client: A2aClient,
    on_send: Option<OutboxSink>,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("from", self.identity.did())
            .field("peers", &self.peers.len())
            .finish_non_exhaustive()
    }
}

impl Outbox {
    /// Sends as `identity` to `peers` (each declared peer that has a URL).
    pub fn new(
        identity: Arc<SigningIdentity>,
        peers: impl IntoIterator<Item = (DidKey, PeerUrl)>,
        client: A2aClient,
    ) -> Outbox {
        Outbox {
            identity,
            peers: Arc::new(peers.into_iter().collect()),
            client,
            on_send: None,
        }
    }

    /// Report every send to `sink`.
    pub fn on_send(mut self, sink: impl Fn(OutboxEvent) + Send + Sync + 'static) -> Self {
        self.on_send = Some(Arc::new(sink));
        self
    }

    fn report(&self, event: OutboxEvent) {
        if let Some(sink) = &self.on_send {
            sink(event);
        }
    }
}

#[derive(Clone)]
struct SandboxState {
    inbox: Inbox,
    outbox: Option<Outbox>,
}

/// The router the sandbox relay forwards `CONSTLE_A2A_URL` to:
///
/// - `GET /inbox/next`: 200 with the next [`crate::InboxMessage`] as JSON,
///   or 204 when there is none.
/// - `POST /outbox` with `{"to": did, "body": …}`: 202 `{"delivered": true,
///   "msg_id"}` once the peer accepted it; 400 `a2a_malformed`, 413
///   `a2a_too_large`, 403 `a2a_unknown_peer`, 502 `a2a_peer_refused` (with
///   `peer_status`, `peer_reason`, `retryable`), 502 `a2a_peer_unreachable`,
///   504 `a2a_peer_timeout`, or 404 `a2a_no_outbox` when sending is off.
pub fn sandbox_router(inbox: Inbox, outbox: Option<Outbox>) -> Router {
    Router::new()
        .route(INBOX_NEXT_PATH, get(next))
        .route(OUTBOX_PATH, post(send))
        .with_state(SandboxState { inbox, outbox })
}

async fn next(State(state): State<SandboxState>) -> Response {
    match state.inbox.pop() {
        Some(message) => (StatusCode::OK, axum::Json(message.to_json())).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

fn answer(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    answer(status, json!({"error": code, "message": message.into()}))
}

async fn send(State(state): State<SandboxState>, request: Request) -> Response {
    let Some(outbox) = state.outbox else {
        return error(
            StatusCode::NOT_FOUND,
            "a2a_no_outbox",
            "this agent has no outbox",
        );
    };
    let (parts, body) = request.into_parts();
    let body = match read_limited(&parts.headers, body, MAX_OUTBOX_BYTES).await {
        Ok(body) => body,
        Err(BodyError::TooLarge { .. }) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "a2a_too_large",
                format!("the request is larger than {MAX_OUTBOX_BYTES} bytes"),
            );
        }
        Err(BodyError::Unreadable) => {
            return error(
                StatusCode::BAD_REQUEST,
                "a2a_malformed",
                "the request body could not be read",
            );
        }
    };
    let request = match constle_json::parse(&body) {
        Ok(Value::Object(map)) => map,
        Ok(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "a2a_malformed",
                "expected {\"to\": did, \"body\": …}",
            );
        }
        Err(err) => {
            return error(
                StatusCode::BAD_REQUEST,
                "a2a_malformed",
                format!("not strict JSON: {err}"),
            );
        }
    };
    if request.len() != 2 || !request.contains_key("body") {
        return error(
            StatusCode::BAD_REQUEST,
            "a2a_malformed",
            "expected exactly {\"to\": did, \"body\": …}",
        );
    }
    let to = match request.get("to").and_then(Value::as_str).map(DidKey::parse) {
        Some(Ok(did)) => did,
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "a2a_malformed",
                "`to` is not a did:key",
            );
        }
    };
    let Some(peer) = outbox.peers.get(&to) else {
        return error(
            StatusCode::FORBIDDEN,
            "a2a_unknown_peer",
            "`to` is not a declared peer with a URL",
        );
    };
    let body = request.get("body").cloned().unwrap_or(Value::Null);
    let envelope = match sign_envelope(&outbox.identity, &to, body, Timestamp::now()) {
        Ok(envelope) => envelope,
        Err(err @ EnvelopeError::TooLarge { .. }) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "a2a_too_large",
                err.to_string(),
            );
        }
        Err(err @ EnvelopeError::UnsafeInteger(_)) => {
            return error(StatusCode::BAD_REQUEST, "a2a_malformed", err.to_string());
        }
        Err(err) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "a2a_sign_failed",
                err.to_string(),
            );
        }
    };
    let msg_id = envelope.msg_id().clone();
    let result = outbox.client.deliver(peer, &envelope).await;
    let mut event = OutboxEvent {
        to,
        msg_id: msg_id.clone(),
        delivered: false,
        status: None,
        reason: None,
    };
    let response = match &result {
        Ok(delivery) => {
            event.delivered = true;
            event.status = Some(delivery.status);
            answer(
                StatusCode::ACCEPTED,
                json!({"delivered": true, "msg_id": msg_id.as_str()}),
            )
        }
        Err(err @ DeliverError::Refused { status, reason, .. }) => {
            event.status = Some(*status);
            event.reason.clone_from(reason);
            answer(
                StatusCode::BAD_GATEWAY,
                json!({
                    "error": "a2a_peer_refused",
                    "message": err.to_string(),
                    "msg_id": msg_id.as_str(),
                    "peer_status": status,
                    "peer_reason": reason,
                    "retryable": err.is_retryable(),
                }),
            )
        }
        Err(err @ DeliverError::Timeout(_)) => {
            event.reason = Some(err.to_string());
            answer(
                StatusCode::GATEWAY_TIMEOUT,
                json!({"error": "a2a_peer_timeout", "message": err.to_string(), "msg_id": msg_id.as_str(), "retryable": true}),
            )
        }
        Err(err) => {
            event.reason = Some(err.to_string());
            answer(
                StatusCode::BAD_GATEWAY,
                json!({"error": "a2a_peer_unreachable", "message": err.to_string(), "msg_id": msg_id.as_str(), "retryable": err.is_retryable()}),
            )
        }
    };
    outbox.report(event);
    response
}
