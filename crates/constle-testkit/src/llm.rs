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
//! | `POST /v1/chat/completions`, `POST /chat/completions` | a completion, JSON or SSE |
//! | `GET /v1/models`, `GET /models` | the script's models |
//! | anything else, including `GET /v1/responses` (Codex's WebSocket) | 404 in the API's error shape |
//!
//! The Responses WebSocket transport is not spoken: Codex CLI tries it
//! first and, after its retries, falls back to `POST /v1/responses`.

mod anthropic;
mod openai;
mod record;
mod reply;
mod script;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
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
    recorder: Recorder,
}

impl ModelProvider {
    /// Starts the provider on 127.0.0.1 (a free port) with its own runtime
    /// thread; every conversation follows `script`.
    pub fn start(script: Script) -> io::Result<ModelProvider> {
        let state = Arc::new(Provider {
            script,
            recorder: Recorder::default(),
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

/// Records the request, then answers it by its method and path.
async fn answer(
    State(provider): State<Arc<Provider>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = serde_json::from_slice::<Value>(&body).ok();
    provider.recorder.push(RecordedRequest {
        method: method.to_string(),
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
        body: parsed.clone().unwrap_or(Value::Null),
    });
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
