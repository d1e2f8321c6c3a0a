//! The OpenAI APIs, as the simulated provider speaks them: Responses
//! (`POST /v1/responses`, JSON or Server-Sent Events from
//! `response.created` to `response.completed`, which carries the usage),
//! Chat Completions (`POST /v1/chat/completions`, JSON or `data:` chunks
//! ending in `[DONE]`, the usage in a last chunk without choices when
//! `stream_options.include_usage` asks for it), `GET /v1/models`, and
//! errors in OpenAI's shape (`{"error":{"message","type","param","code"}}`).

use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::llm::reply::{self, Event};
use crate::llm::script::{Reply, Script, content_text, next_reply};

const ID_HEADER: &str = "x-request-id";

/// The answer to `POST /v1/responses`.
pub fn responses(script: &Script, body: &Value) -> Response {
    let (response, item, reply) = response(script, body);
    if streamed(body) {
        reply::sse(responses_events(&response, &item, &reply), ID_HEADER)
    } else {
        reply::json(StatusCode::OK, &response, ID_HEADER)
    }
}

/// The events of the response to `body` (a `POST /v1/responses` body, or
/// a WebSocket `response.create` message), as a stream sends them.
pub fn response_events(script: &Script, body: &Value) -> Vec<Event> {
    let (response, item, reply) = response(script, body);
    responses_events(&response, &item, &reply)
}

/// The events of a warmup (a WebSocket `response.create` with `generate:
/// false`, which Codex CLI sends first): the response created and
/// completed with no output, its input counted and nothing generated.
pub fn warmup_events(script: &Script, body: &Value) -> Vec<Event> {
    let (mut response, ..) = response(script, body);
    response["output"] = json!([]);
    let usage = &mut response["usage"];
    usage["output_tokens"] = json!(0);
    usage["total_tokens"] = usage["input_tokens"].clone();
    let mut pending = response.clone();
    pending["status"] = json!("in_progress");
    pending["usage"] = Value::Null;
    numbered(vec![
        ("response.created", json!({ "response": pending })),
        ("response.completed", json!({ "response": response })),
    ])
}

/// The whole response to `body`, its one output item, and the reply it
/// carries.
fn response(script: &Script, body: &Value) -> (Value, Value, Reply) {
    let tools = body.get("tools").and_then(Value::as_array);
    let names = tools.into_iter().flatten().filter_map(|t| {
        let name = t.get("name").and_then(Value::as_str)?;
        Some((name, t.get("parameters")))
    });
    let reply = next_reply(script, last_responses_output(body), names);
    let item = output_item(&reply);
    let response = json!({
        "id": response_id(),
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": model(body),
        "output": [item],
        "usage": {
            "input_tokens": script.usage.input_tokens + script.usage.cached_input_tokens,
            "input_tokens_details": { "cached_tokens": script.usage.cached_input_tokens },
            "output_tokens": script.usage.output_tokens,
            "output_tokens_details": { "reasoning_tokens": 0 },
            "total_tokens": script.usage.input_tokens
                + script.usage.cached_input_tokens
                + script.usage.output_tokens,
        },
        "error": null,
        "incomplete_details": null,
    });
    (response, item, reply)
}

/// A new response's id (`resp_sim_1`, `resp_sim_2`, …): distinct, as the
/// API's are, so that a client continuing one (`previous_response_id`)
/// names which.
fn response_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("resp_sim_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The answer to `POST /v1/chat/completions`.
pub fn chat_completions(script: &Script, body: &Value) -> Response {
    let tools = body.get("tools").and_then(Value::as_array);
    let names = tools.into_iter().flatten().filter_map(|t| {
        let function = t.get("function")?;
        let name = function.get("name").and_then(Value::as_str)?;
        Some((name, function.get("parameters")))
    });
    let reply = next_reply(script, last_chat_tool_message(body), names);
    let (message, finish_reason) = chat_message(&reply);
    let usage = json!({
        "prompt_tokens": script.usage.input_tokens + script.usage.cached_input_tokens,
        "completion_tokens": script.usage.output_tokens,
        "total_tokens": script.usage.input_tokens
            + script.usage.cached_input_tokens
            + script.usage.output_tokens,
        "prompt_tokens_details": { "cached_tokens": script.usage.cached_input_tokens },
    });
    let completion = json!({
        "id": "chatcmpl-sim-01",
        "object": "chat.completion",
        "created": 0,
        "model": model(body),
        "choices": [{ "index": 0, "message": message, "finish_reason": finish_reason }],
        "usage": usage,
    });
    if !streamed(body) {
        return reply::json(StatusCode::OK, &completion, ID_HEADER);
    }
    let include_usage = body.pointer("/stream_options/include_usage") == Some(&json!(true));
    reply::sse(chat_events(&completion, include_usage), ID_HEADER)
}

/// The answer to `GET /v1/models`: the script's models.
pub fn models(script: &Script) -> Response {
    let data: Vec<Value> = script
        .models
        .iter()
        .map(|id| json!({ "id": id, "object": "model", "created": 0, "owned_by": "constle-sim" }))
        .collect();
    reply::json(
        StatusCode::OK,
        &json!({ "object": "list", "data": data }),
        ID_HEADER,
    )
}

/// An error in OpenAI's shape: `kind` is both its `type` and its `code`
/// (`not_found`, `invalid_request_error`, …).
pub fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({ "error": error_object(kind, message) });
    reply::json(status, &body, ID_HEADER)
}

/// The same error as the Responses WebSocket sends it: an `error` event
/// carrying the status HTTP would have had.
pub fn error_event(status: StatusCode, kind: &str, message: &str) -> Value {
    json!({ "type": "error", "status": status.as_u16(), "error": error_object(kind, message) })
}

fn error_object(kind: &str, message: &str) -> Value {
    json!({ "message": message, "type": kind, "param": null, "code": kind })
}

fn model(body: &Value) -> &str {
    body.get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn streamed(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool) == Some(true)
}

/// The output of the last `function_call_output` item of the input.
fn last_responses_output(body: &Value) -> Option<String> {
    body.get("input")?
        .as_array()?
        .iter()
        .rfind(|i| i.get("type").and_then(Value::as_str) == Some("function_call_output"))
        .map(|i| i.get("output").map(content_text).unwrap_or_default())
}

/// The content of the last `tool` message.
fn last_chat_tool_message(body: &Value) -> Option<String> {
    body.get("messages")?
        .as_array()?
        .iter()
        .rfind(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .map(|m| m.get("content").map(content_text).unwrap_or_default())
}

fn output_item(reply: &Reply) -> Value {
    match reply {
        Reply::ToolCall { name, arguments } => json!({
            "type": "function_call",
            "id": "fc_sim_01",
            "call_id": "call_sim_01",
            "name": name,
            "arguments": arguments.to_string(),
            "status": "completed",
        }),
        Reply::Text(text) => json!({
            "type": "message",
            "id": "msg_sim_01",
            "status": "completed",
            "role": "assistant",
            "content": [{ "type": "output_text", "text": text, "annotations": [] }],
        }),
    }
}

/// The stream of one response: created and in progress (no output, no
/// usage yet), the item added, its text or arguments as one delta and
/// done, the item done, then `response.completed` with the whole response.
fn responses_events(response: &Value, item: &Value, reply: &Reply) -> Vec<Event> {
    let mut pending = response.clone();
    pending["status"] = json!("in_progress");
    pending["output"] = json!([]);
    pending["usage"] = Value::Null;
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    let mut events = vec![
        ("response.created", json!({ "response": pending })),
        ("response.in_progress", json!({ "response": pending })),
        (
            "response.output_item.added",
            json!({ "output_index": 0, "item": added }),
        ),
    ];
    let item_id = item["id"].clone();
    match reply {
        Reply::ToolCall { arguments, .. } => {
            let arguments = arguments.to_string();
            events.push((
                "response.function_call_arguments.delta",
                json!({ "item_id": item_id, "output_index": 0, "delta": arguments }),
            ));
            events.push((
                "response.function_call_arguments.done",
                json!({ "item_id": item_id, "output_index": 0, "arguments": arguments }),
            ));
        }
        Reply::Text(text) => {
            let at = json!({ "item_id": item_id, "output_index": 0, "content_index": 0 });
            let part = |p: Value| merge(&at, json!({ "part": p }));
            events.push((
                "response.content_part.added",
                part(json!({ "type": "output_text", "text": "", "annotations": [] })),
            ));
            events.push((
                "response.output_text.delta",
                merge(&at, json!({ "delta": text })),
            ));
            events.push((
                "response.output_text.done",
                merge(&at, json!({ "text": text })),
            ));
            events.push((
                "response.content_part.done",
                part(item["content"][0].clone()),
            ));
        }
    }
    events.push((
        "response.output_item.done",
        json!({ "output_index": 0, "item": item }),
    ));
    events.push(("response.completed", json!({ "response": response })));
    numbered(events)
}

/// Each event's data with its `type` and `sequence_number` added.
fn numbered(events: Vec<(&'static str, Value)>) -> Vec<Event> {
    events
        .into_iter()
        .enumerate()
        .map(|(n, (name, data))| {
            Event::Named(
                name,
                merge(&json!({ "type": name, "sequence_number": n }), data),
            )
        })
        .collect()
}

/// `base` with `extra`'s fields added (both objects).
fn merge(base: &Value, extra: Value) -> Value {
    let mut merged = base.clone();
    if let (Some(into), Value::Object(from)) = (merged.as_object_mut(), extra) {
        into.extend(from);
    }
    merged
}

fn chat_message(reply: &Reply) -> (Value, &'static str) {
    match reply {
        Reply::ToolCall { name, arguments } => (
            json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": "call_sim_01",
                    "type": "function",
                    "function": { "name": name, "arguments": arguments.to_string() },
                }],
            }),
            "tool_calls",
        ),
        Reply::Text(text) => (json!({ "role": "assistant", "content": text }), "stop"),
    }
}

/// The chunks of one completion: the message as one delta (a tool call's
/// `index` added, as the API streams it), the finish reason, the usage when
/// asked for, then `[DONE]`.
fn chat_events(completion: &Value, include_usage: bool) -> Vec<Event> {
    let choice = &completion["choices"][0];
    let mut delta = choice["message"].clone();
    if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (index, call) in calls.iter_mut().enumerate() {
            call["index"] = json!(index);
        }
    }
    let chunk = |choices: Value| {
        json!({
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": 0,
            "model": completion["model"],
            "choices": choices,
        })
    };
    let mut events = vec![
        Event::Data(chunk(
            json!([{ "index": 0, "delta": delta, "finish_reason": null }]),
        )),
        Event::Data(chunk(
            json!([{ "index": 0, "delta": {}, "finish_reason": choice["finish_reason"] }]),
        )),
    ];
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = completion["usage"].clone();
        events.push(Event::Data(last));
    }
    events.push(Event::Done);
    events
}
