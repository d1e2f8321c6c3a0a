//! HTTP answers shared by both APIs: JSON, Server-Sent Events (streamed
//! event by event), and the request-id header each provider sends.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// A JSON answer with `status`, carrying `request_id` under `id_header`
/// (`request-id` for Anthropic, `x-request-id` for OpenAI).
pub fn json(status: StatusCode, body: &Value, id_header: &'static str) -> Response {
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    with_request_id(&mut response, id_header);
    response
}

/// A `text/event-stream` answer of these events: each an optional
/// `event:` name and its JSON `data:`, or a raw `data:` line (`[DONE]`).
/// Each event is its own chunk of a streamed body, as a provider sends
/// them, so that whoever relays the stream sees them arrive one by one.
pub fn sse(events: Vec<Event>, id_header: &'static str) -> Response {
    let chunks = events
        .into_iter()
        .map(|event| Ok::<_, Infallible>(event.encode()));
    let body = Body::from_stream(futures_util::stream::iter(chunks));
    let mut response = (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response();
    with_request_id(&mut response, id_header);
    response
}

/// One Server-Sent Event.
pub enum Event {
    /// `event: <name>` then `data: <json>`.
    Named(&'static str, Value),
    /// `data: <json>` alone (Chat Completions).
    Data(Value),
    /// `data: [DONE]`.
    Done,
}

impl Event {
    /// Its JSON data; `None` for `[DONE]`.
    pub fn data(&self) -> Option<&Value> {
        match self {
            Event::Named(_, data) | Event::Data(data) => Some(data),
            Event::Done => None,
        }
    }

    fn encode(&self) -> String {
        match self {
            Event::Named(name, data) => format!("event: {name}\ndata: {data}\n\n"),
            Event::Data(data) => format!("data: {data}\n\n"),
            Event::Done => "data: [DONE]\n\n".to_owned(),
        }
    }
}

/// The id every answer carries, as real providers do (`req_sim_…`).
pub const REQUEST_ID: &str = "req_sim_0001";

fn with_request_id(response: &mut Response, id_header: &'static str) {
    response
        .headers_mut()
        .insert(id_header, HeaderValue::from_static(REQUEST_ID));
}
