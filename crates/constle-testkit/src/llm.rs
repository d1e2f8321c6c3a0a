//! A simulated model provider: an HTTP server on 127.0.0.1 speaking the
//! Anthropic Messages API and the OpenAI Responses and Chat Completions
//! APIs in their own shapes, JSON and streamed, so that real clients
//! (Claude Code, Codex CLI, the official SDKs) run against it unchanged.
//!
//! Every conversation follows one [`Script`]: the first answer calls the
//! client's own shell tool (Claude Code's `Bash`, Codex's `exec_command`,
//! or an SDK script's function taking a `command` string) to run the
//! script's command; once the conversation carries that tool's result, the
//! answer is a final message quoting it. Each answer reports the script's
//! usage. Every request is recorded ([`RecordedRequest`]: path, headers,
//! so the key the client sent, model, output maximum, body).
//!
//! Routes (paths relative to the server's root; an OpenAI client's base
//! URL is `<url>/v1`, an Anthropic client's `<url>`):
//!
//! | method and path | answer |
//! |---|---|
//! | `POST /v1/messages` (any query, e.g. `?beta=true`) | a message, JSON or SSE |
//! | `POST /v1/messages/count_tokens` | the script's input tokens |
//! | `POST /v1/responses` | a response, JSON or SSE |
//! | `GET /v1/responses` with a WebSocket upgrade | the Responses WebSocket: each `response.create` answered with the SSE path's events, one message each |
//! | `POST /v1/chat/completions`, `POST /chat/completions` | a completion, JSON or SSE |
//! | `GET /v1/models`, `GET /models` | the script's models |
//! | anything else | 404 in the API's error shape |
//!
//! A stream is sent event by event, each its own chunk (or WebSocket
//! message). On the WebSocket, each message is recorded with method `WS`
//! and the upgrade's path and headers.

mod anthropic;
mod openai;
mod record;
mod reply;
mod script;
mod socket;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::Value;

pub use record::RecordedRequest;
pub use script::{Script, Usage};

use record::Recorder;

/// The provider. Stops when dropped.
pub struct ModelProvider {
    addr: SocketAddr,
    state: Arc<Provider>,
    _runtime: tokio::runtime::Runtime,
}

struct Provider {
    script: Script,
    recorder: Arc<Recorder>,
}

impl ModelProvider {
    /// Starts the provider on 127.0.0.1 (a free port) with its own runtime
    /// thread; every conversation follows `script`.
    pub fn start(script: Script) -> io::Result<ModelProvider> {
        let state = Arc::new(Provider {
            script,
            recorder: Arc::default(),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .fallback(answer)
            .with_state(Arc::clone(&state));
        runtime.spawn(async move { axum::serve(listener, app).await });
        Ok(ModelProvider {
            addr,
            state,
            _runtime: runtime,
        })
    }

    /// `http://127.0.0.1:<port>`: the base URL for Anthropic clients
    /// (`ANTHROPIC_BASE_URL`); OpenAI clients take this with `/v1`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.recorder.all()
    }
}

/// The most of a request body the provider reads.
const MAX_BODY_BYTES: usize = 64 << 20;

/// Records the request, then answers it by its method and path.
async fn answer(State(provider): State<Arc<Provider>>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .unwrap_or_default();
    let parsed = serde_json::from_slice::<Value>(&body).ok();
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let recorded = RecordedRequest::new(
        method.as_str(),
        &uri,
        &parts.headers,
        parsed.clone().unwrap_or(Value::Null),
    );
    provider.recorder.push(recorded.clone());
    if (&method, uri.path()) == (&Method::GET, "/v1/responses") {
        let recorder = Arc::clone(&provider.recorder);
        let script = provider.script.clone();
        if let Some(accepted) = socket::accept(&mut parts, script, recorder, recorded) {
            return accepted;
        }
    }
    let script = &provider.script;
    let anthropic_path = uri.path().starts_with("/v1/messages");
    match (method, uri.path(), parsed) {
        (Method::GET, "/v1/models" | "/models", _) => openai::models(script),
        (Method::POST, "/v1/messages/count_tokens", Some(_)) => anthropic::count_tokens(script),
        (Method::POST, "/v1/messages", Some(body)) => anthropic::messages(script, &body),
        (Method::POST, "/v1/responses", Some(body)) => openai::responses(script, &body),
        (Method::POST, "/v1/chat/completions" | "/chat/completions", Some(body)) => {
            openai::chat_completions(script, &body)
        }
        (Method::POST, _, None) if anthropic_path => anthropic::error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "the body is not JSON",
        ),
        (_, path, _) if anthropic_path => anthropic::error(
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("no route {path}"),
        ),
        (_, path, _) => openai::error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("no route {path}"),
        ),
    }
}
