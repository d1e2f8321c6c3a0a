//! The simulated provider: a hyper HTTP/1.1 server on 127.0.0.1 answering
//! `POST /v1/messages` (Anthropic Messages) and `POST /v1/responses`
//! (OpenAI Responses), as JSON or, when the request says `"stream": true`,
//! as SSE with each event its own chunk (the stream yields between events,
//! so hyper writes each out before the next; it may wait before the
//! first token, as a model takes to start answering, and between tokens,
//! as a model paces them). Every answer carries
//! `tokens` output tokens (`"tok "` each) and its usage: in the JSON body,
//! or in the final event (`message_delta`, `response.completed`). It
//! does as little as a server can, so what differs between the paths is
//! the gate.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::scenario::Api;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Input tokens every answer reports.
const INPUT_TOKENS: u64 = 20;

/// How the provider answers.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Output tokens of every answer.
    pub tokens: u64,
    /// The wait before each token's event after the first (zero: none).
    pub interval: Duration,
    /// The wait before the first token's event, or before a JSON answer
    /// (zero: none).
    pub first: Duration,
}

/// Starts the provider on `runtime` (a free port on 127.0.0.1).
pub fn start(runtime: &tokio::runtime::Runtime, pace: Pace) -> SocketAddr {
    let listener = runtime
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .expect("a port for the provider");
    let addr = listener.local_addr().expect("its address");
    runtime.spawn(async move {
        loop {
            let Ok((io, _)) = listener.accept().await else {
                continue;
            };
            let _ = io.set_nodelay(true);
            let service = hyper::service::service_fn(move |request| answer(request, pace));
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(io), service),
            );
        }
    });
    addr
}

async fn answer(request: Request<Incoming>, pace: Pace) -> Result<Response<Body>, Infallible> {
    let api = match request.uri().path() {
        "/v1/messages" => Api::Anthropic,
        "/v1/responses" => Api::Responses,
        _ => {
            return Ok(plain(
                StatusCode::NOT_FOUND,
                "application/json",
                "{}".into(),
            ));
        }
    };
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let Ok(body) = body else {
        return Ok(plain(
            StatusCode::BAD_REQUEST,
            "application/json",
            "{}".into(),
        ));
    };
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = parsed["model"].as_str().unwrap_or("").to_owned();
    let answer = if parsed["stream"] == Value::Bool(true) {
        stream(events(api, &model, pace.tokens), pace)
    } else {
        if !pace.first.is_zero() {
            tokio::time::sleep(pace.first).await;
        }
        let body = whole(api, &model, pace.tokens).to_string();
        plain(StatusCode::OK, "application/json", body)
    };
    Ok(answer)
}

fn plain(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert("content-type", content_type.parse().expect("a header"));
    headers.insert("request-id", "req_bench".parse().expect("a header"));
    response
}

/// `events` as SSE, one chunk each, yielding between them, and waiting
/// `pace.first` before the first token's event and `pace.interval` before
/// each token's event after it.
fn stream(events: Vec<Event>, pace: Pace) -> Response<Body> {
    let events = Arc::new(events);
    let frames = futures_util::stream::unfold((0usize, false), move |(i, tokens_began)| {
        let events = Arc::clone(&events);
        async move {
            let event = events.get(i)?;
            let wait = match (event.token, tokens_began) {
                (true, false) => pace.first,
                (true, true) => pace.interval,
                (false, _) => Duration::ZERO,
            };
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            } else if i > 0 {
                tokio::task::yield_now().await;
            }
            let frame = Frame::data(Bytes::from(event.text.clone()));
            Some((
                Ok::<_, Infallible>(frame),
                (i + 1, tokens_began || event.token),
            ))
        }
    });
    let mut response = plain(StatusCode::OK, "text/event-stream", String::new());
    *response.body_mut() = StreamBody::new(frames).boxed_unsync();
    response
}

/// One SSE event, and whether it carries a token.
struct Event {
    text: String,
    token: bool,
}

fn sse(name: &str, data: &Value) -> Event {
    Event {
        text: format!("event: {name}\ndata: {data}\n\n"),
        token: false,
    }
}

fn token(name: &str, data: &Value) -> Event {
    Event {
        token: true,
        ..sse(name, data)
    }
}

/// The SSE events of a streamed answer of `tokens` tokens.
fn events(api: Api, model: &str, tokens: u64) -> Vec<Event> {
    let mut events = Vec::new();
    match api {
        Api::Anthropic => {
            let message = json!({"id": "msg_bench", "type": "message", "role": "assistant",
                "model": model, "content": [], "stop_reason": null,
                "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}});
            events.push(sse(
                "message_start",
                &json!({"type": "message_start", "message": message}),
            ));
            events.push(sse(
                "content_block_start",
                &json!({"type": "content_block_start",
                "index": 0, "content_block": {"type": "text", "text": ""}}),
            ));
            let delta = json!({"type": "content_block_delta",
                "index": 0, "delta": {"type": "text_delta", "text": "tok "}});
            events.extend((0..tokens).map(|_| token("content_block_delta", &delta)));
            events.push(sse(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": 0}),
            ));
            events.push(sse(
                "message_delta",
                &json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": tokens}}),
            ));
            events.push(sse("message_stop", &json!({"type": "message_stop"})));
        }
        Api::Responses => {
            let created = json!({"id": "resp_bench", "object": "response",
                "status": "in_progress", "model": model, "output": []});
            events.push(sse(
                "response.created",
                &json!({"type": "response.created", "response": created}),
            ));
            let delta = json!({
                "type": "response.output_text.delta", "item_id": "msg_bench",
                "output_index": 0, "content_index": 0, "delta": "tok "});
            events.extend((0..tokens).map(|_| token("response.output_text.delta", &delta)));
            events.push(sse(
                "response.completed",
                &json!({"type": "response.completed", "response": whole(api, model, tokens)}),
            ));
        }
    }
    events
}

/// The whole answer of `tokens` tokens, as a JSON body.
fn whole(api: Api, model: &str, tokens: u64) -> Value {
    let text = "tok ".repeat(usize::try_from(tokens).unwrap_or(0));
    match api {
        Api::Anthropic => json!({"id": "msg_bench", "type": "message", "role": "assistant",
            "model": model, "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": tokens}}),
        Api::Responses => json!({"id": "resp_bench", "object": "response",
            "status": "completed", "model": model,
            "output": [{"type": "message", "id": "msg_bench", "role": "assistant",
                "content": [{"type": "output_text", "text": text}]}],
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": tokens,
                "total_tokens": INPUT_TOKENS + tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0}}}),
    }
}
