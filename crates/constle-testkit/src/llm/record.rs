//! What the simulated provider keeps of each request it receives.

use std::sync::Mutex;

use axum::http::{HeaderMap, Uri};
use serde_json::Value;

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// `GET`, `POST`, …, or `WS` for a message on the Responses WebSocket
    /// (with the path and headers of the upgrade that opened it).
    pub method: String,
    /// The path with its query (`/v1/messages?beta=true`).
    pub path: String,
    /// Every header, names lowercase, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Value::Null` when empty or not JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// A request to `uri` with these headers and body (`Value::Null` when
    /// there is none).
    pub fn new(method: &str, uri: &Uri, headers: &HeaderMap, body: Value) -> RecordedRequest {
        RecordedRequest {
            method: method.to_owned(),
            path: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), ToString::to_string),
            headers: headers
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body,
        }
    }

    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The key the client sent: `x-api-key`, else the `Authorization`
    /// bearer token.
    pub fn api_key(&self) -> Option<&str> {
        self.header("x-api-key").or_else(|| {
            self.header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
        })
    }

    /// The `model` the body names.
    pub fn model(&self) -> Option<&str> {
        self.body.get("model").and_then(Value::as_str)
    }

    /// The output maximum the body asks for, under whichever name its API
    /// uses (`max_tokens`, `max_output_tokens`, `max_completion_tokens`).
    pub fn max_tokens(&self) -> Option<u64> {
        ["max_tokens", "max_output_tokens", "max_completion_tokens"]
            .iter()
            .find_map(|k| self.body.get(*k).and_then(Value::as_u64))
    }

    /// Whether the body asks for a stream.
    pub fn streamed(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The path without its query.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or_default()
    }
}

/// The requests received so far.
#[derive(Default)]
pub struct Recorder(Mutex<Vec<RecordedRequest>>);

impl Recorder {
    /// Adds one.
    pub fn push(&self, request: RecordedRequest) {
        match self.0.lock() {
            Ok(mut all) => all.push(request),
            Err(poisoned) => poisoned.into_inner().push(request),
        }
    }

    /// All of them, in arrival order.
    pub fn all(&self) -> Vec<RecordedRequest> {
        match self.0.lock() {
            Ok(all) => all.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}
