//! The stdio bridge behind a real gate: the testkit's rmcp invoice server
//! over stdio (this test binary itself, as `<exe> mcp-stdio-server`),
//! started directly (no sandbox: that is `constle run`'s part), and the
//! testkit's rmcp client, or raw HTTP, on the gate's side. Loopback only.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use constle_manifest::{
    HumanGates, McpServer, McpTransport, Pricing, ServerId, StdioServer, ToolName,
};
use constle_mcp_gate::{
    Gate, OfferFuture, OfferedTools, RecordFuture, Recorder, RefusedRequest, ServerPolicy,
};
use constle_mcp_stdio::{ExitCause, Launch, LaunchFuture, Process, ServerEvent, StdioBridge};
use constle_testkit::mcp::{client_main, stdio_server_main};
use libtest_mimic::{Arguments, Trial};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const CLIENT: &str = "mcp-client";
const SERVER: &str = "mcp-stdio-server";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some(CLIENT) => std::process::exit(client_main(&args[2..])),
        Some(SERVER) => std::process::exit(stdio_server_main(&args[2..])),
        _ => {}
    }
    let tests = vec![
        test(
            "the_client_lists_and_calls_through_gate_and_bridge",
            client_lists_and_calls,
        ),
        test("sessions_initialize_delete_and_reconnect", sessions),
        test(
            "an_id_in_flight_is_refused_and_cancel_answers",
            ids_in_flight,
        ),
        test(
            "an_exit_mid_call_is_an_error_naming_the_server",
            exit_mid_call,
        ),
        test("a_wedged_server_is_stopped_after_the_timeout", wedged),
        test("server_requests_go_to_the_get_stream", get_stream),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

fn test(name: &str, body: fn()) -> Trial {
    Trial::test(name, move || {
        body();
        Ok(())
    })
}

/// Starts `argv` with its stdin and stdout on pipes.
struct Spawn(Vec<String>);

impl Launch for Spawn {
    fn launch(&self) -> LaunchFuture {
        let argv = self.0.clone();
        Box::pin(async move {
            let mut child = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()?;
            let input = child.stdin.take().unwrap();
            let output = child.stdout.take().unwrap();
            Ok(Process {
                input: Box::pin(input),
                output: Box::pin(output),
                child,
                hold: Box::new(()),
            })
        })
    }
}

fn invoice_server() -> Spawn {
    let exe = std::env::current_exe().unwrap();
    Spawn(vec![exe.display().to_string(), SERVER.into()])
}

fn declared() -> McpServer {
    McpServer {
        id: ServerId::new("books").unwrap(),
        transport: McpTransport::Stdio(StdioServer {
            command: vec![SERVER.into()],
            workdir: None,
            env_secret_refs: Default::default(),
            allowed_hosts: Vec::new(),
        }),
        tools: [
            "list_invoices",
            "get_invoice",
            "exit",
            "slow",
            "fast",
            "provoke",
        ]
        .iter()
        .map(|t| ToolName::new(t).unwrap())
        .collect(),
        pricing: Pricing::default(),
        allow_methods: Vec::new(),
    }
}

/// A gate on 127.0.0.1 over a bridge to `launch`; its URL, the bridge,
/// the bridge's events and what the gate recorded as refused, all on a
/// runtime of their own.
struct Fixture {
    url: String,
    bridge: StdioBridge,
    events: Arc<Mutex<Vec<String>>>,
    refused: Refusals,
    runtime: tokio::runtime::Runtime,
}

/// The gate's recorder: keeps every refusal.
#[derive(Clone, Default)]
struct Refusals(Arc<Mutex<Vec<RefusedRequest>>>);

impl Recorder for Refusals {
    fn refused<'a>(&'a self, refused: &'a RefusedRequest) -> RecordFuture<'a> {
        self.0.lock().unwrap().push(refused.clone());
        Box::pin(std::future::ready(()))
    }

    fn offered<'a>(&'a self, _offered: &'a OfferedTools) -> OfferFuture<'a> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// A refusal's reason code, method, tool and id.
type Seen = (&'static str, Option<String>, Option<String>, Option<String>);

impl Refusals {
    /// Each refusal, in order.
    fn seen(&self) -> Vec<Seen> {
        let refused = self.0.lock().unwrap();
        let row = |r: &RefusedRequest| {
            let id = r.request_id.as_ref().map(ToString::to_string);
            (r.reason.as_str(), r.method.clone(), r.tool.clone(), id)
        };
        refused.iter().map(row).collect()
    }
}

impl Fixture {
    fn start(launch: impl Launch, timeout: Duration) -> Fixture {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let refused = Refusals::default();
        let (bridge, url) = runtime.block_on(async {
            let (sender, mut receiver) = mpsc::unbounded_channel();
            let bridge = StdioBridge::start("books", launch, timeout, sender)
                .await
                .unwrap();
            let seen = Arc::clone(&events);
            tokio::spawn(async move {
                while let Some(event) = receiver.recv().await {
                    seen.lock().unwrap().push(describe(&event));
                }
            });
            let server = declared();
            let policy = ServerPolicy::new(&server, &HumanGates::default());
            let gate = Gate::with_transport(policy, bridge.clone())
                .with_response_timeout(timeout)
                .with_recorder(refused.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/mcp", listener.local_addr().unwrap());
            tokio::spawn(gate.serve(listener));
            (bridge, url)
        });
        Fixture {
            url,
            bridge,
            events,
            refused,
            runtime,
        }
    }

    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until the events hold `wanted`.
    fn wait_for_event(&self, wanted: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.events().iter().any(|e| e == wanted) {
            assert!(
                Instant::now() < deadline,
                "no {wanted} in {:?}",
                self.events()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The testkit's rmcp client: its stdout and exit status.
    fn client(&self, args: &[&str]) -> (String, i32) {
        let mut full = vec![args[0], &self.url];
        full.extend_from_slice(&args[1..]);
        let out = Command::new(std::env::current_exe().unwrap())
            .arg(CLIENT)
            .args(&full)
            .env("NO_PROXY", "127.0.0.1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (text, out.status.code().unwrap_or(-1))
    }

    /// One raw POST: the status, the session header and the body.
    fn post(&self, session: Option<&str>, body: &Value) -> (u16, Option<String>, Value) {
        self.runtime.block_on(async {
            let mut request = reqwest::Client::new()
                .post(&self.url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(body.to_string());
            if let Some(session) = session {
                request = request.header("mcp-session-id", session);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let session = response
                .headers()
                .get("mcp-session-id")
                .map(|v| v.to_str().unwrap().to_owned());
            let text = response.text().await.unwrap();
            let body = serde_json::from_str(&text).unwrap_or(Value::Null);
            (status, session, body)
        })
    }

    fn initialize(&self) -> String {
        let (status, session, body) = self.post(None, &initialize(0));
        assert_eq!(status, 200, "{body}");
        assert!(body["result"]["serverInfo"]["name"].is_string(), "{body}");
        let session = session.expect("a session id");
        let (status, _, _) = self.post(
            Some(&session),
            &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        );
        assert_eq!(status, 202);
        session
    }
}

fn describe(event: &ServerEvent) -> String {
    match event {
        ServerEvent::Started { .. } => "started".into(),
        ServerEvent::NotStarted { error } => format!("not started: {error}"),
        ServerEvent::Exited { cause, status } => match cause {
            ExitCause::Exited => format!("exited {:?}", status.and_then(|s| s.code())),
            other => other.as_str().to_owned(),
        },
        _ => "other".into(),
    }
}

fn initialize(id: i64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"raw","version":"1"}}})
}

fn call(id: i64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments}})
}

fn reason(body: &Value) -> &str {
    body["error"]["data"]["reason"].as_str().unwrap_or("")
}

fn client_lists_and_calls() {
    let fx = Fixture::start(invoice_server(), Duration::from_secs(30));
    let (out, code) = fx.client(&["list"]);
    assert_eq!(
        (out.as_str(), code),
        ("list_invoices\nget_invoice\nexit\n", 0)
    );
    let (out, code) = fx.client(&["call", "get_invoice", r#"{"invoice_id":"INV-7"}"#]);
    assert_eq!(
        (out.as_str(), code),
        ("result: invoice INV-7: 120.00 EUR\n", 0)
    );
    let (out, code) = fx.client(&["call", "delete_everything", "{}"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("-32602") && out.contains("not declared"),
        "{out}"
    );
    // Each client ended its session (DELETE), so each had a process of its
    // own; the first was the one started with the bridge.
    fx.runtime.block_on(fx.bridge.stop());
    let events = fx.events();
    assert_eq!(
        events.iter().filter(|e| *e == "started").count(),
        3,
        "{events:?}"
    );
    assert_eq!(
        events.iter().filter(|e| *e == "session_ended").count(),
        3,
        "{events:?}"
    );
}

fn sessions() {
    let fx = Fixture::start(invoice_server(), Duration::from_secs(30));
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
    // Before any session: 400 without an id, 404 with a made-up one.
    let (status, _, body) = fx.post(None, &list);
    assert_eq!(
        (status, reason(&body)),
        (400, "mcp_session_required"),
        "{body}"
    );
    let (status, _, body) = fx.post(Some("f00"), &list);
    assert_eq!(
        (status, reason(&body)),
        (404, "mcp_session_unknown"),
        "{body}"
    );
    // Each recorded as the gate's own refusals are.
    let list_refused = |reason| (reason, Some("tools/list".into()), None, Some("1".into()));
    assert_eq!(
        fx.refused.seen(),
        [
            list_refused("mcp_session_required"),
            list_refused("mcp_session_unknown")
        ]
    );

    let first = fx.initialize();
    let (status, _, body) = fx.post(Some(&first), &list);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["result"]["tools"].as_array().unwrap().len(),
        3,
        "{body}"
    );

    // A second initialize (a reconnecting client) gets a fresh process and
    // a new session; the old session is gone.
    let second = fx.initialize();
    assert_ne!(first, second);
    fx.wait_for_event("session_replaced");
    let (status, _, body) = fx.post(Some(&first), &list);
    assert_eq!(
        (status, reason(&body)),
        (404, "mcp_session_unknown"),
        "{body}"
    );
    let (status, _, _) = fx.post(Some(&second), &list);
    assert_eq!(status, 200);

    // DELETE ends it; the next initialize starts another process.
    let status = fx.runtime.block_on(async {
        reqwest::Client::new()
            .delete(&fx.url)
            .header("mcp-session-id", &second)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(status, 200);
    fx.wait_for_event("session_ended");
    let (status, _, _) = fx.post(Some(&second), &list);
    assert_eq!(status, 404);
    let third = fx.initialize();
    let (status, _, _) = fx.post(Some(&third), &list);
    assert_eq!(status, 200);
    assert_eq!(
        fx.events().iter().filter(|e| *e == "started").count(),
        3,
        "{:?}",
        fx.events()
    );
}

/// A server that reads its stdin and never answers.
fn silent() -> Spawn {
    Spawn(vec!["sh".into(), "-c".into(), "cat > /dev/null".into()])
}

/// A scripted stdio server: `slow` answers after a second, `provoke`
/// sends a notification and a `sampling/createMessage` request before its
/// answer, and whatever response the client sends back is told in a
/// notification.
const SCRIPTED: &str = r#"
import json, sys, threading
lock = threading.Lock()
def send(m):
    with lock:
        sys.stdout.write(json.dumps(m) + "\n")
        sys.stdout.flush()
def result(i, text):
    return {"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": text}]}}
for line in sys.stdin:
    m = json.loads(line)
    if "method" not in m:
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": {"client_answered": m}}})
        continue
    i = m.get("id")
    if i is None:
        continue
    if m["method"] == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": "2025-06-18",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "scripted", "version": "1"}}})
    elif m["method"] == "tools/call" and m["params"]["name"] == "slow":
        threading.Timer(1.0, send, [result(i, "slow done")]).start()
    elif m["method"] == "tools/call" and m["params"]["name"] == "provoke":
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hello"}})
        send({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage",
              "params": {"messages": [], "maxTokens": 1}})
        send(result(i, "provoked"))
    else:
        send(result(i, "done"))
"#;

fn scripted() -> Spawn {
    Spawn(vec!["python3".into(), "-c".into(), SCRIPTED.into()])
}

/// Posts `body` from a thread of its own; join it for what [`Fixture::post`]
/// returns.
fn post_later(
    fx: &Arc<Fixture>,
    session: &str,
    body: Value,
) -> std::thread::JoinHandle<(u16, Option<String>, Value)> {
    let fx = Arc::clone(fx);
    let session = session.to_owned();
    std::thread::spawn(move || fx.post(Some(&session), &body))
}

fn ids_in_flight() {
    let fx = Arc::new(Fixture::start(scripted(), Duration::from_secs(30)));
    let session = fx.initialize();
    let slow = post_later(&fx, &session, call(9, "slow", json!({})));
    std::thread::sleep(Duration::from_millis(300));
    // The same id from another connection while 9 waits: refused, unsent.
    let (status, _, body) = fx.post(Some(&session), &call(9, "fast", json!({})));
    assert_eq!((status, reason(&body)), (200, "mcp_duplicate_id"), "{body}");
    assert_eq!(body["id"], 9);
    let duplicate = (
        "mcp_duplicate_id",
        Some("tools/call".into()),
        Some("fast".into()),
        Some("9".into()),
    );
    assert_eq!(fx.refused.seen(), [duplicate]);
    let (status, _, body) = fx.post(Some(&session), &call(10, "fast", json!({})));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["content"][0]["text"], "done");
    let (status, _, body) = slow.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["content"][0]["text"], "slow done");
    // Once answered, the id is free again.
    let (status, _, body) = fx.post(Some(&session), &call(9, "fast", json!({})));
    assert_eq!(status, 200, "{body}");

    // A cancelled request's caller is answered at once.
    let started = Instant::now();
    let slow = post_later(&fx, &session, call(11, "slow", json!({})));
    std::thread::sleep(Duration::from_millis(200));
    let cancel =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":11}});
    let (status, _, _) = fx.post(Some(&session), &cancel);
    assert_eq!(status, 202);
    let (status, _, body) = slow.join().unwrap();
    assert_eq!(
        (status, reason(&body)),
        (200, "mcp_request_cancelled"),
        "{body}"
    );
    assert!(started.elapsed() < Duration::from_millis(900));
}
fn exit_mid_call() {
    let fx = Fixture::start(invoice_server(), Duration::from_secs(30));
    let session = fx.initialize();
    let (status, _, body) = fx.post(Some(&session), &call(5, "exit", json!({"code":"3"})));
    assert_eq!(status, 502, "{body}");
    assert_eq!(reason(&body), "mcp_server_exited", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"books\"") && message.contains("exited with status 3"),
        "{message}"
    );
    assert_eq!(body["id"], 5);
    fx.wait_for_event("exited Some(3)");
    // Later calls of that session fail the same way; a new session works.
    let (status, _, body) = fx.post(Some(&session), &call(6, "list_invoices", json!({})));
    assert_eq!(
        (status, reason(&body)),
        (502, "mcp_server_exited"),
        "{body}"
    );
    let session = fx.initialize();
    let (status, _, body) = fx.post(Some(&session), &call(7, "list_invoices", json!({})));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["content"][0]["text"], "INV-0042,INV-0043");
}

fn wedged() {
    let fx = Fixture::start(silent(), Duration::from_millis(500));
    let started = Instant::now();
    let (status, _, body) = fx.post(None, &initialize(0));
    // The gate's timeout and the bridge's stop race: either answer names
    // the server and says it did not answer.
    assert!(
        matches!(
            (status, reason(&body)),
            (504, "mcp_upstream_timeout") | (502, "mcp_server_exited")
        ),
        "{status} {body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"books\"") && message.contains("0.5 s"),
        "{message}"
    );
    fx.wait_for_event("unresponsive");
    assert!(started.elapsed() < Duration::from_secs(5));
}

fn get_stream() {
    let fx = Fixture::start(scripted(), Duration::from_secs(30));
    let session = fx.initialize();
    // No GET stream: the notification is dropped, the server's request
    // answered -32601 by the bridge; the call itself is answered.
    let (status, _, body) = fx.post(Some(&session), &call(1, "provoke", json!({})));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["content"][0]["text"], "provoked");

    // With one: the notification reaches the agent, the request does not
    // (sampling is not allowed); the gate answers it -32601 through the
    // bridge, which the server reports back on the stream.
    let events = fx.runtime.block_on(async {
        let mut stream = reqwest::Client::new()
            .get(&fx.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status().as_u16(), 200);
        let url = fx.url.clone();
        let session = session.clone();
        let body = call(2, "provoke", json!({})).to_string();
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("mcp-session-id", session)
                .body(body)
                .send()
                .await
        });
        let mut seen = String::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !seen.contains("client_answered") {
            match tokio::time::timeout_at(deadline, stream.chunk()).await {
                Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                other => panic!("stream ended: {other:?}\n{seen}"),
            }
        }
        seen
    });
    assert!(events.contains(r#""data": "hello""#), "{events}");
    assert!(
        !events.contains(r#""method": "sampling/createMessage""#),
        "{events}"
    );
    assert!(events.contains("-32601"), "{events}");
}
