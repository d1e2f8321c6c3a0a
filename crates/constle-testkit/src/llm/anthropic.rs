//! The Anthropic Messages API, as the simulated provider speaks it:
//! `POST /v1/messages` (JSON, or Server-Sent Events `message_start`,
//! `content_block_start`/`_delta`/`_stop`, `message_delta` with the usage,
//! `message_stop`), `POST /v1/messages/count_tokens`, and errors in
//! Anthropic's shape (`{"type":"error","error":{"type","message"}}`).

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::llm::reply::{self, Event};
use crate::llm::script::{Reply, Script, content_text, next_reply};

const ID_HEADER: &str = "request-id";

/// The answer to `POST /v1/messages`.
pub fn messages(script: &Script, body: &Value) -> Response {
    let tools = body.get("tools").and_then(Value::as_array);
    let names = tools.into_iter().flatten().filter_map(|t| {
        let name = t.get("name").and_then(Value::as_str)?;
        Some((name, t.get("input_schema")))
    });
    let reply = next_reply(script, last_tool_result(body), names);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (block, stop_reason) = content_block(&reply);
    let message = json!({
        "id": "msg_sim_01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [block],
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": usage(script, script.usage.output_tokens),
    });
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        reply::sse(stream_events(script, &message, &reply), ID_HEADER)
    } else {
        reply::json(StatusCode::OK, &message, ID_HEADER)
    }
}

/// The answer to `POST /v1/messages/count_tokens`: the scripted input count.
pub fn count_tokens(script: &Script) -> Response {
    reply::json(
        StatusCode::OK,
        &json!({ "input_tokens": script.usage.input_tokens }),
        ID_HEADER,
    )
}

/// An error in Anthropic's shape: `kind` is its `error.type`
/// (`not_found_error`, `invalid_request_error`, …).
pub fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({
        "type": "error",
        "error": { "type": kind, "message": message },
        "request_id": reply::REQUEST_ID,
    });
    reply::json(status, &body, ID_HEADER)
}

/// The content of the last `tool_result` block in the conversation.
fn last_tool_result(body: &Value) -> Option<String> {
    body.get("messages")?
        .as_array()?
        .iter()
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .rfind(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|b| b.get("content").map(content_text).unwrap_or_default())
}

fn content_block(reply: &Reply) -> (Value, &'static str) {
    match reply {
        Reply::ToolCall { name, arguments } => (
            json!({ "type": "tool_use", "id": "toolu_sim_01", "name": name, "input": arguments }),
            "tool_use",
        ),
        Reply::Text(text) => (json!({ "type": "text", "text": text }), "end_turn"),
    }
}

fn usage(script: &Script, output_tokens: u64) -> Value {
    json!({
        "input_tokens": script.usage.input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": script.usage.cached_input_tokens,
    })
}

/// The stream of one message: its start (no content yet, one output token
/// as the API reports), the block in a start, one delta and a stop, then
/// the final usage in `message_delta`.
fn stream_events(script: &Script, message: &Value, reply: &Reply) -> Vec<Event> {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"] = usage(script, 1);
    let (empty_block, delta) = match reply {
        Reply::ToolCall { name, arguments } => (
            json!({ "type": "tool_use", "id": "toolu_sim_01", "name": name, "input": {} }),
            json!({ "type": "input_json_delta", "partial_json": arguments.to_string() }),
        ),
        Reply::Text(text) => (
            json!({ "type": "text", "text": "" }),
            json!({ "type": "text_delta", "text": text }),
        ),
    };
    vec![
        Event::Named(
            "message_start",
            json!({ "type": "message_start", "message": start }),
        ),
        Event::Named(
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0, "content_block": empty_block }),
        ),
        Event::Named("ping", json!({ "type": "ping" })),
        Event::Named(
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 0, "delta": delta }),
        ),
        Event::Named(
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": 0 }),
        ),
        Event::Named(
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": { "stop_reason": message["stop_reason"], "stop_sequence": null },
                "usage": { "output_tokens": script.usage.output_tokens },
            }),
        ),
        Event::Named("message_stop", json!({ "type": "message_stop" })),
    ]
}
