//! The simulated model provider itself, through a plain HTTP/1.1 client:
//! each API's shape, JSON and streamed, the scripted tool call then final
//! message, the usage, and what it records; and its Responses WebSocket
//! through a WebSocket client.

#![allow(
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers panic on setup failure"
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use constle_testkit::llm::{ModelProvider, Script};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// One request over its own connection: the status, headers (lowercase)
/// and body of the answer (its chunks joined, when chunked).
fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let (status, head, body) = send_raw(addr, method, path, headers, body);
    match head.contains("transfer-encoding: chunked") {
        true => (status, head, chunks(&body).concat()),
        false => (status, head, body),
    }
}

/// The chunks of a chunked body, in order, without their framing.
fn chunks(mut body: &str) -> Vec<String> {
    let mut chunks = Vec::new();
    loop {
        let (size, rest) = body.split_once("\r\n").expect("a chunk size");
        let size = usize::from_str_radix(size, 16).expect("a hex size");
        if size == 0 {
            return chunks;
        }
        chunks.push(rest[..size].to_owned());
        body = &rest[size + 2..];
    }
}

/// [`send`], the body as it came on the wire.
fn send_raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
    let status = head[9..12].parse().expect("a status");
    (status, head.to_ascii_lowercase(), body.to_owned())
}

fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, String, String) {
    send(
        addr,
        "POST",
        path,
        &[
            ("content-type", "application/json"),
            ("x-api-key", "sk-test"),
        ],
        &body.to_string(),
    )
}

/// The `data:` payloads of a Server-Sent Events body, with their `event:`
/// names (empty when none).
fn events(body: &str) -> Vec<(String, String)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let field = |f: &str| {
                e.lines()
                    .find_map(|l| l.strip_prefix(f))
                    .unwrap_or_default()
                    .to_owned()
            };
            (field("event: "), field("data: "))
        })
        .collect()
}

fn parse(data: &str) -> Value {
    serde_json::from_str(data).expect("JSON")
}

fn provider() -> ModelProvider {
    ModelProvider::start(Script::run("echo hi")).expect("provider")
}

const BASH: &str = r#"{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}"#;

#[test]
fn messages_json_calls_bash_then_quotes_the_tool_result() {
    let p = provider();
    let tools: Value = serde_json::from_str(&format!("[{BASH}]")).expect("tools");
    let first = json!({"model": "m1", "max_tokens": 77, "tools": tools, "messages": [{"role": "user", "content": "go"}]});
    let (status, head, body) = post(p.addr(), "/v1/messages?beta=true", &first);
    assert_eq!(status, 200);
    assert!(head.contains("request-id: req_sim_"), "{head}");
    let message = parse(&body);
    assert_eq!(message["type"], "message");
    assert_eq!(message["model"], "m1");
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(message["content"][0]["type"], "tool_use");
    assert_eq!(message["content"][0]["name"], "Bash");
    assert_eq!(
        message["content"][0]["input"],
        json!({"command": "echo hi"})
    );
    assert_eq!(message["usage"]["input_tokens"], 1000);
    assert_eq!(message["usage"]["output_tokens"], 50);

    let second = json!({"model": "m1", "max_tokens": 77, "tools": tools, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [message["content"][0]]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_sim_01", "content": "hi\n"}]},
    ]});
    let message = parse(&post(p.addr(), "/v1/messages", &second).2);
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["content"][0]["text"], "the command printed: hi\n");

    let seen = p.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path, "/v1/messages?beta=true");
    assert_eq!(seen[0].route(), "/v1/messages");
    assert_eq!(seen[0].api_key(), Some("sk-test"));
    assert_eq!(seen[0].model(), Some("m1"));
    assert_eq!(seen[0].max_tokens(), Some(77));
    assert!(!seen[0].streamed());
}

#[test]
fn messages_stream_has_the_documented_events_and_usage_in_message_delta() {
    let p = provider();
    let tools: Value = serde_json::from_str(&format!("[{BASH}]")).expect("tools");
    let (status, head, body) = post(
        p.addr(),
        "/v1/messages",
        &json!({"model": "m", "max_tokens": 5, "stream": true, "tools": tools, "messages": []}),
    );
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    let events = events(&body);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &events {
        assert_eq!(
            parse(data)["type"],
            name.as_str(),
            "each data names its event"
        );
    }
    let start = parse(&events[0].1);
    assert_eq!(start["message"]["usage"]["input_tokens"], 1000);
    assert_eq!(start["message"]["content"], json!([]));
    let delta = parse(&events[3].1);
    assert_eq!(delta["delta"]["type"], "input_json_delta");
    assert_eq!(
        parse(delta["delta"]["partial_json"].as_str().expect("a string")),
        json!({"command": "echo hi"})
    );
    let end = parse(&events[5].1);
    assert_eq!(end["delta"]["stop_reason"], "tool_use");
    assert_eq!(end["usage"]["output_tokens"], 50);
    assert!(p.requests()[0].streamed());
}

#[test]
fn responses_json_and_stream_call_exec_command_then_finish() {
    let p = provider();
    let tools = json!([{"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]);
    let (status, head, body) = send(
        p.addr(),
        "POST",
        "/v1/responses",
        &[("authorization", "Bearer sk-openai")],
        &json!({"model": "gpt-x", "tools": tools, "input": "go"}).to_string(),
    );
    assert_eq!(status, 200);
    assert!(head.contains("x-request-id: req_sim_"), "{head}");
    let response = parse(&body);
    assert_eq!(response["object"], "response");
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"][0]["type"], "function_call");
    assert_eq!(response["output"][0]["name"], "exec_command");
    assert_eq!(
        parse(
            response["output"][0]["arguments"]
                .as_str()
                .expect("a string")
        ),
        json!({"cmd": "echo hi"})
    );
    assert_eq!(response["usage"]["input_tokens"], 1000);
    assert_eq!(response["usage"]["output_tokens"], 50);
    assert_eq!(p.requests()[0].api_key(), Some("sk-openai"));

    let second = json!({"model": "gpt-x", "stream": true, "max_output_tokens": 9, "tools": tools, "input": [
        {"type": "message", "role": "user", "content": "go"},
        response["output"][0],
        {"type": "function_call_output", "call_id": "call_sim_01", "output": "hi\n"},
    ]});
    let (_, head, raw) = send_raw(p.addr(), "POST", "/v1/responses", &[], &second.to_string());
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let chunks = chunks(&raw);
    let events = events(&chunks.concat());
    assert_eq!(chunks.len(), events.len(), "each event its own chunk");
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"response.created"));
    assert_eq!(names.last(), Some(&"response.completed"));
    assert!(names.contains(&"response.output_text.delta"), "{names:?}");
    for (n, (name, data)) in events.iter().enumerate() {
        let data = parse(data);
        assert_eq!(data["type"], name.as_str());
        assert_eq!(data["sequence_number"], n);
    }
    let created = parse(&events[0].1);
    assert_eq!(
        created["response"]["usage"],
        Value::Null,
        "usage only at the end"
    );
    let done = parse(&events[events.len() - 1].1);
    assert_eq!(
        done["response"]["output"][0]["content"][0]["text"],
        "the command printed: hi\n"
    );
    assert_eq!(done["response"]["usage"]["total_tokens"], 1050);
    assert_eq!(p.requests()[1].max_tokens(), Some(9));
}

#[test]
fn chat_completions_stream_usage_only_when_asked() {
    let p = provider();
    let tools = json!([{"type": "function", "function": {"name": "run", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]);
    let ask = |stream_options: Value| json!({"model": "c", "stream": true, "stream_options": stream_options, "tools": tools, "messages": [{"role": "user", "content": "go"}]});
    for path in ["/v1/chat/completions", "/chat/completions"] {
        let events = events(&post(p.addr(), path, &ask(json!({"include_usage": true}))).2);
        assert_eq!(events.last().map(|(_, d)| d.as_str()), Some("[DONE]"));
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|(_, d)| parse(d))
            .collect();
        assert_eq!(chunks[0]["object"], "chat.completion.chunk");
        let call = &chunks[0]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["index"], 0);
        assert_eq!(call["function"]["name"], "run");
        assert_eq!(
            parse(call["function"]["arguments"].as_str().expect("a string")),
            json!({"command": "echo hi"})
        );
        assert_eq!(chunks[1]["choices"][0]["finish_reason"], "tool_calls");
        let last = chunks.last().expect("a usage chunk");
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"]["prompt_tokens"], 1000);
        assert_eq!(last["usage"]["completion_tokens"], 50);
    }
    let events = events(&post(p.addr(), "/v1/chat/completions", &ask(Value::Null)).2);
    assert!(
        events.iter().all(|(_, d)| !d.contains("\"usage\"")),
        "no usage unless asked"
    );

    let done = json!({"model": "c", "tools": tools, "messages": [{"role": "tool", "tool_call_id": "call_sim_01", "content": "hi\n"}]});
    let completion = parse(&post(p.addr(), "/v1/chat/completions", &done).2);
    assert_eq!(completion["object"], "chat.completion");
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        completion["choices"][0]["message"]["content"],
        "the command printed: hi\n"
    );
    assert_eq!(completion["usage"]["total_tokens"], 1050);
}

#[test]
fn models_count_tokens_and_errors_in_each_shape() {
    let p = provider();
    let (status, _, body) = send(p.addr(), "GET", "/v1/models", &[], "");
    assert_eq!(status, 200);
    assert_eq!(parse(&body)["data"][0]["id"], "sim-model");
    let (status, _, body) = post(
        p.addr(),
        "/v1/messages/count_tokens",
        &json!({"model": "m", "messages": []}),
    );
    assert_eq!(status, 200);
    assert_eq!(parse(&body), json!({"input_tokens": 1000}));

    let (status, _, body) = send(p.addr(), "POST", "/v1/messages", &[], "not json");
    assert_eq!(status, 400);
    assert_eq!(parse(&body)["type"], "error");
    assert_eq!(parse(&body)["error"]["type"], "invalid_request_error");
    let (status, _, body) = send(
        p.addr(),
        "GET",
        "/v1/responses",
        &[("upgrade", "websocket")],
        "",
    );
    assert_eq!(status, 404);
    assert_eq!(parse(&body)["error"]["code"], "not_found");
    let (status, _, body) = post(p.addr(), "/v1/messages/other", &json!({}));
    assert_eq!(status, 404);
    assert_eq!(parse(&body)["error"]["type"], "not_found_error");
    assert_eq!(
        p.requests().len(),
        5,
        "every request recorded, refused ones too"
    );
    assert_eq!(p.requests()[3].header("Upgrade"), Some("websocket"));
}

/// The text messages a socket sends until one of type `last`, parsed.
async fn read_until<S>(socket: &mut S, last: &str) -> Vec<Value>
where
    S: futures_util::Stream<Item = Result<Message, WsError>> + Unpin,
{
    let mut events = Vec::new();
    while let Some(message) = socket.next().await {
        let Message::Text(text) = message.expect("a message") else {
            continue;
        };
        let event = parse(text.as_str());
        let done = event["type"] == last;
        events.push(event);
        if done {
            return events;
        }
    }
    panic!("the socket closed before {last}: {events:?}");
}

#[test]
fn the_responses_websocket_answers_each_create_with_the_stream_events() {
    let p = provider();
    let url = format!("ws://{}/v1/responses", p.addr());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut request = url.into_client_request().expect("a request");
        let bearer = HeaderValue::from_static("Bearer sk-ws");
        request.headers_mut().insert("authorization", bearer);
        let tcp = tokio::net::TcpStream::connect(p.addr())
            .await
            .expect("connect");
        let (mut socket, _) = tokio_tungstenite::client_async(request, tcp)
            .await
            .expect("the upgrade is accepted");
        let tools = json!([{"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]);
        // A warmup generates nothing.
        let warmup = json!({"type": "response.create", "model": "gpt-x", "generate": false, "tools": tools, "input": "go"});
        socket
            .send(Message::text(warmup.to_string()))
            .await
            .expect("send");
        let events = read_until(&mut socket, "response.completed").await;
        let types: Vec<&Value> = events.iter().map(|e| &e["type"]).collect();
        assert_eq!(types, ["response.created", "response.completed"]);
        assert_eq!(events[1]["response"]["output"], json!([]));
        assert_eq!(events[1]["response"]["usage"]["output_tokens"], 0);

        let create = json!({"type": "response.create", "model": "gpt-x", "stream": true, "tools": tools, "input": "go"});
        socket
            .send(Message::text(create.to_string()))
            .await
            .expect("send");
        let events = read_until(&mut socket, "response.completed").await;
        assert_eq!(events[0]["type"], "response.created");
        for (n, event) in events.iter().enumerate() {
            assert_eq!(event["sequence_number"], n, "{event}");
        }
        let done = &events[events.len() - 1]["response"];
        assert_eq!(done["output"][0]["name"], "exec_command");
        assert_eq!(done["usage"]["output_tokens"], 50);

        // Anything but response.create gets an error; the socket stays open.
        let other = json!({"type": "response.cancel"}).to_string();
        socket.send(Message::text(other)).await.expect("send");
        let error = read_until(&mut socket, "error").await;
        assert_eq!(error.len(), 1, "{error:?}");
        assert_eq!(error[0]["status"], 400);
        assert_eq!(error[0]["error"]["type"], "invalid_request_error");

        let output = json!({"type": "function_call_output", "call_id": "call_sim_01", "output": "hi\n"});
        let next = json!({"type": "response.create", "model": "gpt-x", "tools": tools, "input": [output]});
        socket
            .send(Message::text(next.to_string()))
            .await
            .expect("send");
        let events = read_until(&mut socket, "response.completed").await;
        let done = &events[events.len() - 1]["response"];
        assert_eq!(
            done["output"][0]["content"][0]["text"],
            "the command printed: hi\n"
        );
        socket.close(None).await.expect("close");
    });
    let seen = p.requests();
    let methods: Vec<&str> = seen.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(methods, ["GET", "WS", "WS", "WS", "WS"]);
    for request in &seen {
        assert_eq!(request.path, "/v1/responses");
        assert_eq!(request.api_key(), Some("sk-ws"), "{request:?}");
    }
    assert_eq!(seen[2].model(), Some("gpt-x"));
    assert!(seen[2].streamed());
    assert_eq!(seen[3].body["type"], "response.cancel");
}
