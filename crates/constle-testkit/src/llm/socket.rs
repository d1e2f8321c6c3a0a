//! The Responses API's WebSocket mode (`GET /v1/responses` with an
//! Upgrade), as the simulated provider speaks it and Codex CLI uses it
//! before HTTP.
//!
//! Each `response.create` message (the request's fields beside its
//! `type`) is answered with the events a streamed `POST /v1/responses`
//! gets, each its own text message, from `response.created` to
//! `response.completed` with the usage; a warmup (`generate: false`) with
//! `response.created` and `response.completed` alone, no output and no
//! output tokens. Any other message is answered with
//! an `error` event in OpenAI's shape, and the socket stays open. Every
//! message is recorded as a [`RecordedRequest`] with method `WS`, the
//! upgrade's path and headers (so the key the socket was opened with) and
//! the message as its body.

use std::sync::Arc;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Message, Role};

use crate::llm::openai;
use crate::llm::record::{RecordedRequest, Recorder};
use crate::llm::reply::Event;
use crate::llm::script::Script;

/// The one client message the mode defines.
const CREATE: &str = "response.create";

/// Accepts the upgrade `parts` asks for (`upgrade` is how it was
/// recorded) and answers its messages by `script`; `None` when `parts` is
/// no valid WebSocket upgrade.
pub fn accept(
    parts: &mut Parts,
    script: Script,
    recorder: Arc<Recorder>,
    upgrade: RecordedRequest,
) -> Option<Response> {
    let accept = accept_key(&parts.headers)?;
    let on_upgrade = parts.extensions.remove::<OnUpgrade>()?;
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            let io = TokioIo::new(upgraded);
            let socket = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
            converse(socket, &script, &recorder, &upgrade).await;
        }
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    Some(response)
}

/// The `Sec-WebSocket-Accept` for a valid version-13 upgrade request.
fn accept_key(headers: &HeaderMap) -> Option<HeaderValue> {
    let has = |name: HeaderName, token: &str| {
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

/// Records and answers each message until the client closes the socket.
async fn converse<S>(
    mut socket: WebSocketStream<S>,
    script: &Script,
    recorder: &Recorder,
    upgrade: &RecordedRequest,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(Ok(message)) = socket.next().await {
        let body = match message {
            Message::Text(text) => serde_json::from_str(text.as_str()).unwrap_or(Value::Null),
            Message::Binary(_) => Value::Null,
            Message::Close(_) => break,
            // Pings are answered by the socket itself.
            _ => continue,
        };
        recorder.push(RecordedRequest {
            method: "WS".to_owned(),
            body: body.clone(),
            ..upgrade.clone()
        });
        for event in answer(script, &body) {
            if socket.send(Message::text(event.to_string())).await.is_err() {
                return;
            }
        }
    }
}

/// The events that answer one message.
fn answer(script: &Script, body: &Value) -> Vec<Value> {
    if body.get("type").and_then(Value::as_str) != Some(CREATE) {
        let said = "the only message this socket answers is a JSON response.create";
        let error = openai::error_event(StatusCode::BAD_REQUEST, "invalid_request_error", said);
        return vec![error];
    }
    let events = match body.get("generate") {
        Some(Value::Bool(false)) => openai::warmup_events(script, body),
        _ => openai::response_events(script, body),
    };
    events.iter().filter_map(Event::data).cloned().collect()
}
