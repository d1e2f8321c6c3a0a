//! The HTTP gate against a small fake MCP server on 127.0.0.1 that records
//! everything it receives.

#![allow(clippy::unwrap_used, reason = "test helpers panic on setup failure")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use constle_manifest::{HttpUrl, HumanGates, McpServer, McpTransport, Pricing, ServerId, ToolName};
use constle_mcp_gate::{
    Approval, ApprovalFuture, Approver, Gate, MAX_OFFERED_LISTS, MAX_RECORDED_BYTES, Meter,
    MeterFuture, Metered, NotRecorded, OfferFuture, OfferedTools, RecordFuture, Recorder,
    RefusedRequest, RequestId, ServerPolicy, Shutoff, ToolCall,
};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Debug)]
struct Received {
    method: Method,
    headers: HeaderMap,
    body: Vec<u8>,
}

type Log = Arc<Mutex<Vec<Received>>>;

async fn fake(State(log): State<Log>, method: Method, headers: HeaderMap, body: Bytes) -> Response {
    log.lock().unwrap().push(Received {
        method: method.clone(),
        headers,
        body: body.to_vec(),
    });
    if method == Method::GET {
        let events = concat!(
            ": keep-alive\n\n",
            "id: g1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"hi\"}}\n\n",
            "id: g2\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"r1\",\"method\":\"roots/list\"}\n\n",
            "id: g3\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"p1\",\"method\":\"ping\"}\n\n",
        );
        return ([("content-type", "text/event-stream")], events).into_response();
    }
    if method == Method::DELETE {
        return StatusCode::OK.into_response();
    }
    let message: Value = serde_json::from_slice(&body).unwrap();
    let id = message["id"].clone();
    let Some(rpc_method) = message["method"].as_str() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match rpc_method {
        "initialize" => {
            let body = json!({"jsonrpc":"2.0","id":id,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}});
            return (
                [
                    ("content-type", "application/json"),
                    ("mcp-session-id", "sess-1"),
                ],
                body.to_string(),
            )
                .into_response();
        }
        "tools/list" => match message["params"]["cursor"].as_str() {
            None => {
                json!({"tools":[{"name":"list_invoices"},{"name":"delete_everything"}],"nextCursor":"p2"})
            }
            Some("p2") => {
                json!({"tools":[{"name":"pay_invoice"},{"name":"PAY_INVOICE"},{"name":"hidden"}]})
            }
            // Another description each time: another list.
            Some(version) if version.starts_with('v') => {
                json!({"tools":[{"name":"hidden"},{"name":"list_invoices","description":version}]})
            }
            Some(_) => {
                let sampling = json!({"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}});
                let list = json!({"jsonrpc":"2.0","id":id,"result":{"tools":[{"name":"list_invoices"},{"name":"hidden"}]}});
                let events = format!(
                    "id: e1\nevent: message\ndata: {sampling}\n\nid: e2\nevent: message\ndata: {list}\n\n"
                );
                return ([("content-type", "text/event-stream")], events).into_response();
            }
        },
        "tools/call" => json!({"content":[{"type":"text","text":"done"}]}),
        // A tool list for a request that was no tools/list.
        "ping" if id == "leak" => {
            json!({"tools":[{"name":"delete_everything"},{"name":"list_invoices"}]})
        }
        _ if id.is_null() => return StatusCode::ACCEPTED.into_response(),
        _ => json!({}),
    };
    (
        [("content-type", "application/json")],
        json!({"jsonrpc":"2.0","id":id,"result":result}).to_string(),
    )
        .into_response()
}

/// Starts the fake server; returns its URL and log.
async fn fake_server() -> (String, Log) {
    let log = Log::default();
    let app = Router::new().fallback(fake).with_state(log.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/mcp"), log)
}

fn declared(url: &str) -> McpServer {
    McpServer {
        id: ServerId::new("accounting").unwrap(),
        transport: McpTransport::Url {
            url: HttpUrl::new(url).unwrap(),
            headers: Vec::new(),
        },
        tools: ["list_invoices", "pay_invoice", "Pay_Invoice"]
            .iter()
            .map(|t| ToolName::new(t).unwrap())
            .collect(),
        pricing: Pricing::default(),
        allow_methods: Vec::new(),
    }
}

/// No host variable is set: the servers here declare no headers.
fn no_env(_: &str) -> Option<String> {
    None
}

fn policy(server: &McpServer) -> ServerPolicy {
    let gates = HumanGates {
        enabled: true,
        require_approval_for: vec![ToolName::new("pay_invoice").unwrap()],
        ..HumanGates::default()
    };
    ServerPolicy::new(server, &gates)
}

async fn start_gate(gate: Gate) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(gate.serve(listener));
    format!("http://{addr}/mcp")
}

/// Fake server plus a gate in front of it: (gate URL, server log).
async fn setup() -> (String, Log) {
    let (url, log) = fake_server().await;
    let server = declared(&url);
    let gate = Gate::new(&server, policy(&server), &no_env).unwrap();
    (start_gate(gate).await, log)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn post(gate: &str, body: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut request = client()
        .post(gate)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

async fn post_json(gate: &str, body: &str) -> (StatusCode, Value) {
    let response = post(gate, body, &[]).await;
    let status = response.status();
    (
        status,
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap(),
    )
}

fn tool_names(value: &Value) -> Vec<&str> {
    value["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

fn posts(log: &Log) -> Vec<Received> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|r| r.method == Method::POST)
        .cloned()
        .collect()
}

#[tokio::test]
async fn initialize_relays_the_session_both_ways_and_keeps_agent_headers_back() {
    let (gate, log) = setup().await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}}"#;
    let response = post(
        &gate,
        init,
        &[("authorization", "Bearer agent-token"), ("cookie", "a=b")],
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["mcp-session-id"], "sess-1");
    let value: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(value["result"]["serverInfo"]["name"], "fake");

    let notification = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let response = post(
        &gate,
        notification,
        &[
            ("mcp-session-id", "sess-1"),
            ("mcp-protocol-version", "2025-06-18"),
        ],
    )
    .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);

    let received = posts(&log);
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].body, init.as_bytes());
    let first = &received[0].headers;
    assert!(first.get("authorization").is_none());
    assert!(first.get("cookie").is_none());
    assert_ne!(
        first["host"],
        gate.trim_start_matches("http://").trim_end_matches("/mcp")
    );
    assert_eq!(first["accept"], "application/json, text/event-stream");
    assert_eq!(received[1].headers["mcp-session-id"], "sess-1");
    assert_eq!(received[1].headers["mcp-protocol-version"], "2025-06-18");
}

#[tokio::test]
async fn tools_list_is_filtered_on_every_page() {
    let (gate, _log) = setup().await;
    let (status, page1) =
        post_json(&gate, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(tool_names(&page1), ["list_invoices"]);
    assert_eq!(page1["result"]["nextCursor"], "p2");
    let (_, page2) = post_json(
        &gate,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"p2"}}"#,
    )
    .await;
    assert_eq!(tool_names(&page2), ["pay_invoice"]);
    assert!(page2["result"].get("nextCursor").is_none());
}

#[tokio::test]
async fn a_declared_call_is_forwarded_byte_for_byte() {
    let (gate, log) = setup().await;
    let body = "{\"jsonrpc\":\"2.0\",  \"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"list_invoices\",\"arguments\":{\"z\":1.50, \"a\":\"\\u00e9\"}}}";
    let (status, value) = post_json(&gate, body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(value["result"]["content"][0]["text"], "done");
    let received = posts(&log);
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body, body.as_bytes());
}

#[tokio::test]
async fn a_server_named_by_its_host_name_is_reached() {
    let (url, log) = fake_server().await;
    let server = declared(&url.replace("127.0.0.1", "localhost"));
    let gate = start_gate(Gate::new(&server, policy(&server), &no_env).unwrap()).await;
    for id in 1..=2 {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"list_invoices"}}}}"#
        );
        let (status, value) = post_json(&gate, &body).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(value["result"]["content"][0]["text"], "done");
    }
    assert_eq!(posts(&log).len(), 2);
}

#[tokio::test]
async fn mirrored_headers_are_rebuilt_from_the_body_never_taken_from_the_agent() {
    let (gate, log) = setup().await;
    let call =
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"list_invoices"}}"#;
    let lies = [("mcp-method", "ping"), ("mcp-name", "delete_everything")];
    assert_eq!(post(&gate, call, &lies).await.status(), StatusCode::OK);
    let ping = r#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#;
    assert_eq!(post(&gate, ping, &lies).await.status(), StatusCode::OK);
    let received = posts(&log);
    let header = |i: usize, name: &str| {
        received[i]
            .headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(header(0, "mcp-method").as_deref(), Some("tools/call"));
    assert_eq!(header(0, "mcp-name").as_deref(), Some("list_invoices"));
    assert_eq!(header(1, "mcp-method").as_deref(), Some("ping"));
    assert_eq!(header(1, "mcp-name"), None);
}

#[tokio::test]
async fn undeclared_calls_never_reach_the_server_whatever_the_headers_say() {
    let (gate, log) = setup().await;
    let body =
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"delete_everything"}}"#;
    let response = post(
        &gate,
        body,
        &[("mcp-method", "tools/list"), ("mcp-name", "list_invoices")],
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let value: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(value["id"], 8);
    assert_eq!(value["error"]["code"], -32602);
    assert_eq!(value["error"]["data"]["reason"], "mcp_tool_not_declared");
    assert!(posts(&log).is_empty());
}

#[tokio::test]
async fn gated_calls_and_their_case_variants_are_refused_by_default() {
    let (gate, log) = setup().await;
    // Declared, but a case variant of the gated `pay_invoice`.
    let variant = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"Pay_Invoice","arguments":{}}}"#;
    let (_, value) = post_json(&gate, variant).await;
    assert_eq!(value["error"]["code"], -32602);
    assert_eq!(value["error"]["data"]["reason"], "mcp_tool_case_variant");
    let gated = r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"pay_invoice","arguments":{"amount":5}}}"#;
    let (status, value) = post_json(&gate, gated).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(value["id"], 10);
    assert_eq!(value["error"]["code"], constle_mcp_gate::GATE_REFUSED);
    assert_eq!(value["error"]["data"]["reason"], "mcp_gate_refused");
    assert!(posts(&log).is_empty());
}

/// Charges `list_invoices` only while its budget of calls lasts.
struct Budget(Mutex<u32>);

impl Meter for Budget {
    fn charge<'a>(&'a self, calls: Vec<&'a ToolCall>) -> MeterFuture<'a> {
        let mut left = self.0.lock().unwrap();
        let cost = u32::try_from(calls.len()).unwrap();
        let verdict = if *left >= cost {
            *left -= cost;
            Metered::Charged
        } else {
            Metered::Refused {
                message: "spend cap max_per_run_usd reached".into(),
            }
        };
        Box::pin(async move { verdict })
    }
}

#[tokio::test]
async fn a_call_the_meter_refuses_never_reaches_the_server() {
    let (url, log) = fake_server().await;
    let server = declared(&url);
    let gate = Gate::new(&server, policy(&server), &no_env)
        .unwrap()
        .with_meter(Budget(Mutex::new(2)));
    let gate = start_gate(gate).await;
    let call = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"list_invoices"}}}}"#
        )
    };
    let (_, first) = post_json(&gate, &call(1)).await;
    assert_eq!(first["result"]["content"][0]["text"], "done");
    // Two calls in one batch, one charge left: all or nothing.
    let batch = format!(
        r#"[{},{},{{"jsonrpc":"2.0","id":4,"method":"ping"}}]"#,
        call(2),
        call(3)
    );
    let (status, answers) = post_json(&gate, &batch).await;
    assert_eq!(status, StatusCode::OK);
    let reasons: Vec<&str> = answers
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["error"]["data"]["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        [
            "mcp_spend_refused",
            "mcp_spend_refused",
            "mcp_batch_refused"
        ]
    );
    let (_, last) = post_json(&gate, &call(5)).await;
    assert_eq!(last["result"]["content"][0]["text"], "done");
    let (_, over) = post_json(&gate, &call(6)).await;
    assert_eq!(over["id"], 6);
    assert_eq!(over["error"]["code"], constle_mcp_gate::GATE_REFUSED);
    assert_eq!(
        over["error"]["message"],
        "spend cap max_per_run_usd reached"
    );
    // Only the two charged calls got through.
    assert_eq!(posts(&log).len(), 2);
}

struct ApproveAll(Arc<Mutex<Vec<ToolCall>>>);

impl Approver for ApproveAll {
    fn decide<'a>(&'a self, call: &'a ToolCall) -> ApprovalFuture<'a> {
        self.0.lock().unwrap().push(call.clone());
        Box::pin(async { Approval::Approved })
    }
}

#[tokio::test]
async fn an_approver_can_let_a_gated_call_through_unchanged() {
    let (url, log) = fake_server().await;
    let server = declared(&url);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let gate = Gate::new(&server, policy(&server), &no_env)
        .unwrap()
        .with_approver(ApproveAll(asked.clone()));
    let gate = start_gate(gate).await;
    let gated = r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"pay_invoice","arguments":{"amount":5}}}"#;
    let (_, value) = post_json(&gate, gated).await;
    assert_eq!(value["result"]["content"][0]["text"], "done");
    assert_eq!(posts(&log)[0].body, gated.as_bytes());
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].tool, "pay_invoice");
    assert_eq!(asked[0].server, "accounting");
}

type Records = Arc<Mutex<Vec<RefusedRequest>>>;

/// Keeps every refusal the gate records.
struct Keep(Records);

impl Recorder for Keep {
    fn refused<'a>(&'a self, refused: &'a RefusedRequest) -> RecordFuture<'a> {
        self.0.lock().unwrap().push(refused.clone());
        Box::pin(std::future::ready(()))
    }

    fn offered<'a>(&'a self, _offered: &'a OfferedTools) -> OfferFuture<'a> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Closes the gates while it holds a gated call, then approves it.
struct CloseWhileHeld(Shutoff);

impl Approver for CloseWhileHeld {
    fn decide<'a>(&'a self, _call: &'a ToolCall) -> ApprovalFuture<'a> {
        self.0.close("the test closed the gates");
        Box::pin(async { Approval::Approved })
    }
}

/// Charges nothing, counting the bodies it was asked to charge.
struct Charges(Arc<Mutex<usize>>);

impl Meter for Charges {
    fn charge<'a>(&'a self, _calls: Vec<&'a ToolCall>) -> MeterFuture<'a> {
        *self.0.lock().unwrap() += 1;
        Box::pin(async { Metered::Charged })
    }
}

#[tokio::test]
async fn once_the_shutoff_is_thrown_no_gate_sends_anything() {
    let shutoff = Shutoff::new();
    let charges = Arc::new(Mutex::new(0));
    let records = Records::default();
    let (url_a, log_a) = fake_server().await;
    let (url_b, log_b) = fake_server().await;
    let (a, b) = (declared(&url_a), declared(&url_b));
    let gate_a = Gate::new(&a, policy(&a), &no_env)
        .unwrap()
        .with_approver(CloseWhileHeld(shutoff.clone()))
        .with_recorder(Keep(records.clone()))
        .with_shutoff(shutoff.clone());
    let gate_b = Gate::new(&b, policy(&b), &no_env)
        .unwrap()
        .with_meter(Charges(charges.clone()))
        .with_recorder(Keep(records.clone()))
        .with_shutoff(shutoff.clone());
    let (gate_a, gate_b) = (start_gate(gate_a).await, start_gate(gate_b).await);
    let call =
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_invoices"}}"#;
    let (_, value) = post_json(&gate_b, call).await;
    assert_eq!(value["result"]["content"][0]["text"], "done");
    assert_eq!(*charges.lock().unwrap(), 1);

    // Approved, but the switch was thrown while it was held: not sent.
    let gated = r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"pay_invoice","arguments":{}}}"#;
    let (status, value) = post_json(&gate_a, gated).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(value["id"], 10);
    assert_eq!(value["error"]["code"], constle_mcp_gate::GATE_REFUSED);
    assert_eq!(value["error"]["data"]["reason"], "mcp_gate_closed");
    let message = value["error"]["message"].as_str().unwrap();
    assert!(message.contains("the test closed the gates"), "{message}");

    // Every gate sharing the switch refuses everything from now on.
    for gate in [&gate_a, &gate_b] {
        let (status, value) = post_json(gate, call).await;
        assert_eq!((status, value["id"].clone()), (StatusCode::OK, json!(3)));
        assert_eq!(value["error"]["data"]["reason"], "mcp_gate_closed");
        for method in [Method::GET, Method::DELETE] {
            let response = client().request(method, gate).send().await.unwrap();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
    }
    assert_eq!(*charges.lock().unwrap(), 1, "nothing charged once closed");
    // Each refusal on record: the held call, then a POST, a GET and a
    // DELETE to each gate.
    let records = records.lock().unwrap();
    let recorded: Vec<(&str, &str, Option<&str>)> = records
        .iter()
        .map(|r| (r.reason.as_str(), r.http_method.as_str(), r.tool.as_deref()))
        .collect();
    let each_gate = [
        ("mcp_gate_closed", "POST", Some("list_invoices")),
        ("mcp_gate_closed", "GET", None),
        ("mcp_gate_closed", "DELETE", None),
    ];
    let mut expected = vec![("mcp_gate_closed", "POST", Some("pay_invoice"))];
    expected.extend(each_gate.iter().chain(&each_gate));
    assert_eq!(recorded, expected);
    assert!(log_a.lock().unwrap().is_empty());
    assert_eq!(log_b.lock().unwrap().len(), 1);
}

// ------------------------------------------------------- refusals recorded

/// Fails to ask when the arguments say `{"fail": true}`, else refuses
/// (as a human would, on record).
struct FailOrRefuse;

/// Why [`FailOrRefuse`] could not ask, in full: host paths the agent must
/// never see.
const FAILED_DETAIL: &str =
    "approver set /srv/approvers: version 2: cannot read /root/.constle/approvers/sha256-1: gone";

impl Approver for FailOrRefuse {
    fn decide<'a>(&'a self, call: &'a ToolCall) -> ApprovalFuture<'a> {
        let fail = call
            .arguments
            .as_ref()
            .is_some_and(|a| a.contains_key("fail"));
        let message = "refused in a test".to_string();
        Box::pin(async move {
            if fail {
                let detail = FAILED_DETAIL.to_string();
                Approval::Failed { message, detail }
            } else {
                Approval::Refused { message }
            }
        })
    }
}

/// Refuses (on record) the calls whose arguments say `{"over": true}`.
struct OverCap;

impl Meter for OverCap {
    fn charge<'a>(&'a self, calls: Vec<&'a ToolCall>) -> MeterFuture<'a> {
        let over = calls
            .iter()
            .any(|c| c.arguments.as_ref().is_some_and(|a| a.contains_key("over")));
        Box::pin(async move {
            if over {
                Metered::Refused {
                    message: "over the cap in a test".into(),
                }
            } else {
                Metered::Charged
            }
        })
    }
}

/// One request to the gate, and what it must record: `None` for a request
/// forwarded, or refused on another hook's record.
struct Row {
    what: &'static str,
    http_method: &'static str,
    headers: &'static [(&'static str, &'static str)],
    body: String,
    recorded: Option<Expected>,
}

/// A recorded refusal: reason, JSON-RPC method, tool, id.
type Expected = (
    &'static str,
    Option<&'static str>,
    Option<String>,
    Option<RequestId>,
);

fn row(what: &'static str, body: impl Into<String>, recorded: Option<Expected>) -> Row {
    Row {
        what,
        http_method: "POST",
        headers: &[],
        body: body.into(),
        recorded,
    }
}

fn tool_call(id: i128, name: &str, arguments: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":arguments}})
        .to_string()
}

fn refusal_rows() -> Vec<Row> {
    let int = |n| Some(RequestId::Int(n));
    let call = Some("tools/call");
    let long = "x".repeat(MAX_RECORDED_BYTES + 10);
    let ping = |id: u8| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
    vec![
        row(
            "a declared call",
            tool_call(1, "list_invoices", json!({})),
            None,
        ),
        row(
            "an undeclared tool",
            tool_call(2, "delete_everything", json!({"all": true})),
            Some((
                "mcp_tool_not_declared",
                call,
                Some("delete_everything".into()),
                int(2),
            )),
        ),
        row(
            "a case variant of a gated name",
            tool_call(3, "Pay_Invoice", json!({})),
            Some((
                "mcp_tool_case_variant",
                call,
                Some("Pay_Invoice".into()),
                int(3),
            )),
        ),
        row(
            "a method not allowed",
            r#"{"jsonrpc":"2.0","id":"r","method":"resources/read","params":{"uri":"file:///etc/passwd"}}"#,
            Some((
                "mcp_method_not_allowed",
                Some("resources/read"),
                None,
                Some(RequestId::String("r".into())),
            )),
        ),
        Row {
            headers: &[("mcp-protocol-version", "1900-01-01")],
            ..row(
                "an unsupported protocol version",
                ping(4),
                Some(("mcp_unsupported_protocol_version", None, None, None)),
            )
        },
        Row {
            headers: &[
                ("mcp-protocol-version", "2025-03-26"),
                ("mcp-protocol-version", "2025-06-18"),
            ],
            ..row(
                "a protocol version sent twice",
                ping(5),
                Some(("mcp_unsupported_protocol_version", None, None, None)),
            )
        },
        Row {
            headers: &[("content-type", "text/plain")],
            ..row(
                "another content type",
                ping(6),
                Some(("mcp_content_type", None, None, None)),
            )
        },
        Row {
            headers: &[("host", "evil.example.com")],
            ..row(
                "a Host that is not loopback",
                ping(17),
                Some(("mcp_host_refused", None, None, None)),
            )
        },
        Row {
            headers: &[("origin", "http://evil.example.com")],
            ..row(
                "an Origin that is not loopback",
                ping(18),
                Some(("mcp_origin_refused", None, None, None)),
            )
        },
        Row {
            http_method: "PUT",
            ..row(
                "an HTTP method not served",
                ping(7),
                Some(("mcp_invalid_message", None, None, None)),
            )
        },
        row(
            "not JSON",
            r#"{"jsonrpc":"#,
            Some(("mcp_not_json", None, None, None)),
        ),
        row(
            "a body too large",
            format!("[{}]", "1,".repeat(3 * 1024 * 1024)),
            Some(("mcp_body_too_large", None, None, None)),
        ),
        Row {
            headers: &[("mcp-protocol-version", "2025-06-18")],
            ..row(
                "a batch from 2025-06-18 on",
                format!("[{}]", ping(8)),
                Some(("mcp_batch_not_allowed", None, None, None)),
            )
        },
        row(
            "an empty batch",
            "[]",
            Some(("mcp_empty_batch", None, None, None)),
        ),
        row(
            "a gated call in a batch",
            format!("[{},{}]", ping(9), tool_call(10, "pay_invoice", json!({}))),
            Some((
                "mcp_gated_call_in_batch",
                call,
                Some("pay_invoice".into()),
                int(10),
            )),
        ),
        row(
            "two requests with one id",
            format!("[{},{}]", ping(11), ping(11)),
            Some(("mcp_duplicate_id", Some("ping"), None, int(11))),
        ),
        row(
            "a malformed message",
            r#"{"jsonrpc":"1.0","id":12,"method":"ping"}"#,
            Some(("mcp_invalid_message", None, None, int(12))),
        ),
        row(
            "a call as a notification",
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"list_invoices"}}"#,
            Some(("mcp_call_as_notification", call, None, None)),
        ),
        row(
            "a tool name that is no string",
            r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":7}}"#,
            Some(("mcp_invalid_params", call, None, int(13))),
        ),
        row(
            "a long undeclared name, cut",
            tool_call(14, &long, json!({})),
            Some((
                "mcp_tool_not_declared",
                call,
                Some(format!("{}…", &long[..MAX_RECORDED_BYTES])),
                int(14),
            )),
        ),
        row(
            "a gated call the approver could not ask about",
            tool_call(15, "pay_invoice", json!({"fail": true})),
            Some((
                "mcp_gate_refused",
                call,
                Some("pay_invoice".into()),
                int(15),
            )),
        ),
        row(
            "a gated call refused on the approver's record",
            tool_call(16, "pay_invoice", json!({})),
            None,
        ),
        row(
            "a call refused on the meter's record",
            tool_call(17, "list_invoices", json!({"over": true})),
            None,
        ),
    ]
}

#[tokio::test]
async fn every_refusal_is_recorded_once_before_it_is_answered() {
    let (url, _log) = fake_server().await;
    let server = declared(&url);
    let records = Records::default();
    let gate = Gate::new(&server, policy(&server), &no_env)
        .unwrap()
        .with_approver(FailOrRefuse)
        .with_meter(OverCap)
        .with_recorder(Keep(records.clone()));
    let gate = start_gate(gate).await;
    for row in refusal_rows() {
        let mut request = client()
            .request(
                Method::from_bytes(row.http_method.as_bytes()).unwrap(),
                &gate,
            )
            .header("accept", "application/json, text/event-stream");
        if !row.headers.iter().any(|(name, _)| *name == "content-type") {
            request = request.header("content-type", "application/json");
        }
        for (name, value) in row.headers {
            request = request.header(*name, *value);
        }
        let response = request.body(row.body.clone()).send().await.unwrap();
        let answered: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        let recorded = std::mem::take(&mut *records.lock().unwrap());
        let Some((reason, method, tool, request_id)) = row.recorded else {
            assert!(recorded.is_empty(), "{}: {recorded:?}", row.what);
            continue;
        };
        assert_eq!(recorded.len(), 1, "{}: {recorded:?}", row.what);
        let refused = &recorded[0];
        let answers = match &answered {
            Value::Array(answers) => answers.clone(),
            single => vec![single.clone()],
        };
        let told = answers
            .iter()
            .any(|a| a["error"]["data"]["reason"] == reason);
        assert!(told, "{}: the agent is told the recorded reason", row.what);
        assert_eq!(
            (
                refused.server.as_str(),
                refused.http_method.as_str(),
                refused.reason.as_str(),
                refused.method.as_deref(),
                refused.tool.as_deref(),
                refused.request_id.as_ref(),
            ),
            (
                "accounting",
                row.http_method,
                reason,
                method,
                tool.as_deref(),
                request_id.as_ref()
            ),
            "{}",
            row.what
        );
        // The host-side cause of a failed approver goes to the record, and
        // not a word of it to the agent.
        let failed = row.body.contains("\"fail\"");
        assert_eq!(
            refused.detail.as_deref(),
            failed.then_some(FAILED_DETAIL),
            "{}",
            row.what
        );
        for host in ["/srv", "/root", ".constle", "gone"] {
            assert!(
                !answered.to_string().contains(host),
                "{}: {answered}",
                row.what
            );
        }
    }
}

/// Records once `release` lets it.
struct Held(Arc<tokio::sync::Notify>);

impl Recorder for Held {
    fn refused<'a>(&'a self, _refused: &'a RefusedRequest) -> RecordFuture<'a> {
        Box::pin(self.0.notified())
    }

    fn offered<'a>(&'a self, _offered: &'a OfferedTools) -> OfferFuture<'a> {
        Box::pin(async {
            self.0.notified().await;
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_refusal_waits_for_its_record() {
    let (url, _log) = fake_server().await;
    let server = declared(&url);
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = Gate::new(&server, policy(&server), &no_env)
        .unwrap()
        .with_recorder(Held(release.clone()));
    let gate = start_gate(gate).await;
    let body = tool_call(1, "delete_everything", json!({}));
    let answer = tokio::spawn(async move { post_json(&gate, &body).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!answer.is_finished(), "answered before it was recorded");
    release.notify_one();
    let (_, value) = answer.await.unwrap();
    assert_eq!(value["error"]["data"]["reason"], "mcp_tool_not_declared");
}

fn data_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn sse_responses_are_filtered_and_server_requests_answered_by_the_gate() {
    let (gate, log) = setup().await;
    let response = post(
        &gate,
        r#"{"jsonrpc":"2.0","id":"l1","method":"tools/list","params":{"cursor":"sse"}}"#,
        &[("mcp-session-id", "sess-1")],
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let messages = data_lines(&text);
    assert_eq!(messages.len(), 1, "{text}");
    assert_eq!(messages[0]["id"], "l1");
    assert_eq!(tool_names(&messages[0]), ["list_invoices"]);
    assert!(!text.contains("sampling"), "{text}");
    assert!(
        text.contains("id: e1\n"),
        "the event id still moves on: {text}"
    );

    // The gate answers the sampling request to the server itself.
    let mut answer = None;
    for _ in 0..100 {
        answer = posts(&log)
            .into_iter()
            .map(|r| (r.headers, serde_json::from_slice::<Value>(&r.body).unwrap()))
            .find(|(_, v)| v["id"] == "s1");
        if answer.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (headers, answer) = answer.unwrap();
    assert_eq!(answer["error"]["code"], -32601);
    assert_eq!(headers["mcp-session-id"], "sess-1");
}

#[tokio::test]
async fn the_get_stream_is_filtered_and_delete_relayed() {
    let (gate, log) = setup().await;
    let response = client()
        .get(&gate)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", "sess-1")
        .header("last-event-id", "g0")
        .header("authorization", "Bearer agent-token")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    let messages = data_lines(&text);
    let methods: Vec<&str> = messages
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, ["notifications/message", "ping"], "{text}");

    let response = client()
        .delete(&gate)
        .header("mcp-session-id", "sess-1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    let log = log.lock().unwrap();
    let get = log.iter().find(|r| r.method == Method::GET).unwrap();
    assert_eq!(get.headers["last-event-id"], "g0");
    assert_eq!(get.headers["mcp-session-id"], "sess-1");
    assert!(get.headers.get("authorization").is_none());
    let delete = log.iter().find(|r| r.method == Method::DELETE).unwrap();
    assert_eq!(delete.headers["mcp-session-id"], "sess-1");
}

#[tokio::test]
async fn garbage_is_refused_and_the_gate_keeps_serving() {
    let (gate, log) = setup().await;
    let (status, value) = post_json(&gate, "{\"jsonrpc\":\"2.0\",\"id\":1,,,").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(value["error"]["code"], -32700);

    let big = format!("[{}]", "1,".repeat(3 * 1024 * 1024));
    let (status, value) = post_json(&gate, &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(value["error"]["data"]["reason"], "mcp_body_too_large");

    let response = client()
        .post(&gate)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let response = client().put(&gate).body("{}").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);

    assert!(posts(&log).is_empty());
    let (status, value) = post_json(&gate, r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(value["id"], 2);
    assert_eq!(posts(&log).len(), 1);
}

#[tokio::test]
async fn an_unreachable_server_is_a_json_rpc_error_with_502() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let server = declared(&format!("http://{addr}/mcp"));
    let gate = start_gate(Gate::new(&server, policy(&server), &no_env).unwrap()).await;
    let (status, value) = post_json(&gate, r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(value["id"], 5);
    assert_eq!(value["error"]["code"], -32603);
    assert_eq!(value["error"]["data"]["reason"], "mcp_upstream_unreachable");
    assert!(
        !value.to_string().contains(&addr.to_string()),
        "the URL stays on the host"
    );
}

#[tokio::test]
async fn the_gate_serves_on_a_unix_socket() {
    let (url, log) = fake_server().await;
    let server = declared(&url);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(
        Gate::new(&server, policy(&server), &no_env)
            .unwrap()
            .serve(listener),
    );

    let body = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    let mut stream = tokio::net::UnixStream::connect(&path).await.unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let json = response.split("\r\n\r\n").nth(1).unwrap();
    let value: Value = serde_json::from_str(json).unwrap();
    assert_eq!(tool_names(&value), ["list_invoices"]);
    assert_eq!(posts(&log)[0].body, body.as_bytes());
}

// ------------------------------------------------ headers the gate adds

const TOKEN: &str = "S3CRET-t0ken/+=";
const KEY: &str = "K3Y-9f8e7d";

/// A server declaring a bearer token and an API key, both from host
/// variables.
fn with_headers(url: &str) -> McpServer {
    let src = format!(
        "name: a\nsandbox:\n  command: [x]\nmcp:\n  servers:\n    - id: accounting\n      url: {url}\n      tools: [list_invoices, pay_invoice]\n      headers:\n        - {{name: Authorization, scheme: Bearer, value_secret_ref: T_TOKEN}}\n        - {{name: X-Api-Key, value_secret_ref: T_KEY}}\n"
    );
    let parsed = constle_manifest::parse_str(&src, std::path::Path::new("a.yaml"), &secrets);
    parsed.unwrap().manifest.mcp.servers.remove(0)
}

fn secrets(name: &str) -> Option<String> {
    match name {
        "T_TOKEN" => Some(TOKEN.to_owned()),
        "T_KEY" => Some(KEY.to_owned()),
        _ => None,
    }
}

async fn gate_with_headers(url: &str) -> String {
    let server = with_headers(url);
    start_gate(Gate::new(&server, policy(&server), &secrets).unwrap()).await
}

/// Everything of a response the agent can see, as text.
async fn seen(response: reqwest::Response) -> String {
    let head = format!("{} {:?}", response.status(), response.headers());
    format!("{head}\n{}", response.text().await.unwrap())
}

#[track_caller]
fn shows_no_secret(seen: &str) {
    for secret in [TOKEN, KEY, "S3CRET", "K3Y"] {
        assert!(!seen.contains(secret), "{secret} shown: {seen}");
    }
}

#[tokio::test]
async fn declared_headers_go_with_every_request_and_the_agents_own_never() {
    let (url, log) = fake_server().await;
    let gate = gate_with_headers(&url).await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}}"#;
    let agents = [
        ("authorization", "Bearer agent-token"),
        ("x-api-key", "agent-key"),
    ];
    shows_no_secret(&seen(post(&gate, init, &agents).await).await);
    // A tool list answered with SSE, holding a request the gate answers
    // to the server itself.
    let sse = r#"{"jsonrpc":"2.0","id":"l1","method":"tools/list","params":{"cursor":"sse"}}"#;
    shows_no_secret(&seen(post(&gate, sse, &agents).await).await);
    let stream = client()
        .get(&gate)
        .header("authorization", "Bearer agent-token");
    shows_no_secret(&seen(stream.send().await.unwrap()).await);
    shows_no_secret(&seen(client().delete(&gate).send().await.unwrap()).await);

    // initialize, tools/list, GET, DELETE, and the gate's own answers to
    // the server's sampling (in the SSE answer) and roots (on the GET
    // stream) requests.
    let expected = 6;
    for _ in 0..100 {
        if log.lock().unwrap().len() == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = log.lock().unwrap();
    assert_eq!(log.len(), expected, "{log:?}");
    for received in log.iter() {
        let all = |name: &str| -> Vec<&[u8]> {
            let values = received.headers.get_all(name).iter();
            values.map(|v| v.as_bytes()).collect()
        };
        let bearer = format!("Bearer {TOKEN}");
        assert_eq!(all("authorization"), [bearer.as_bytes()], "{received:?}");
        assert_eq!(all("x-api-key"), [KEY.as_bytes()], "{received:?}");
    }
    let mut answered: Vec<String> = log
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter(|v| v.get("error").is_some())
        .map(|v| v["id"].to_string())
        .collect();
    answered.sort();
    assert_eq!(answered, [r#""r1""#, r#""s1""#], "the gate's own answers");
}

#[tokio::test]
async fn a_header_without_a_usable_value_stops_the_gate_naming_only_the_variable() {
    for (set, why) in [
        (None, "T_TOKEN is not set"),
        (Some(""), "T_TOKEN is empty"),
        (
            Some("S3CRET\r\nX-Injected: 1"),
            "the value of T_TOKEN cannot be sent",
        ),
        (Some("S3CRET\n"), "the value of T_TOKEN cannot be sent"),
    ] {
        let server = with_headers("https://mcp.example.com/mcp");
        let env = |name: &str| match name {
            "T_TOKEN" => set.map(str::to_owned),
            _ => secrets(name),
        };
        let err = Gate::new(&server, policy(&server), &env).unwrap_err();
        let said = err.to_string();
        assert!(
            said.starts_with("header Authorization cannot be sent: "),
            "{said}"
        );
        assert!(said.contains(why), "{said}");
        assert!(!said.contains("S3CRET") && !format!("{err:?}").contains("S3CRET"));
    }
    // A gate that was built shows the headers' names, not their values.
    let server = with_headers("https://mcp.example.com/mcp");
    let gate = Gate::new(&server, policy(&server), &secrets).unwrap();
    let shown = format!("{gate:?}");
    assert!(
        shown.contains("authorization") && shown.contains("x-api-key"),
        "{shown}"
    );
    shows_no_secret(&shown);
}

/// A server that answers every request with `status` and a `Location`,
/// recording the headers of each request.
async fn redirecting_server(status: StatusCode, location: String) -> (String, Log) {
    let log = Log::default();
    let record = log.clone();
    let app = Router::new().fallback(move |method: Method, headers: HeaderMap| {
        let (record, location) = (record.clone(), location.clone());
        async move {
            record.lock().unwrap().push(Received {
                method,
                headers,
                body: Vec::new(),
            });
            (status, [("location", location)]).into_response()
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/mcp"), log)
}

#[tokio::test]
async fn a_redirect_is_never_followed_so_the_headers_stay_with_the_server() {
    let (elsewhere, elsewhere_log) = fake_server().await;
    for status in [
        StatusCode::MOVED_PERMANENTLY,
        StatusCode::FOUND,
        StatusCode::SEE_OTHER,
        StatusCode::TEMPORARY_REDIRECT,
        StatusCode::PERMANENT_REDIRECT,
    ] {
        let (url, log) = redirecting_server(status, elsewhere.clone()).await;
        let gate = gate_with_headers(&url).await;
        let response = post(&gate, PING, &[]).await;
        assert_eq!(response.status(), status);
        assert!(response.headers().get("location").is_none());
        shows_no_secret(&seen(response).await);
        let stream = client().get(&gate).send().await.unwrap();
        assert!(stream.headers().get("location").is_none());
        // The declared server got the credential; nobody else did.
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 2, "{status}");
        assert!(log.iter().all(|r| r.headers.contains_key("authorization")));
    }
    assert!(
        elsewhere_log.lock().unwrap().is_empty(),
        "a redirect was followed"
    );
}

/// A server that answers every request with `status`, a `Location`, a
/// session id and a body of `content_type` that a relay would pass on.
async fn redirecting_server_with_body(status: StatusCode, content_type: &'static str) -> String {
    let app = Router::new().fallback(move || async move {
        let body = match content_type {
            "text/event-stream" => {
                "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"leak\":\"in-the-body\"}}\n\n"
            }
            _ => r#"{"jsonrpc":"2.0","id":5,"result":{"leak":"in-the-body"}}"#,
        };
        let headers = [
            ("location", "https://elsewhere.example/?leak=in-the-location"),
            ("content-type", content_type),
            ("mcp-session-id", "leak-in-the-session"),
            ("mcp-protocol-version", "2025-06-18"),
            ("x-leak", "in-a-header"),
        ];
        (status, headers, body).into_response()
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

#[tokio::test]
async fn a_redirect_reaches_the_agent_as_its_status_alone() {
    for status in [
        StatusCode::MOVED_PERMANENTLY,
        StatusCode::FOUND,
        StatusCode::SEE_OTHER,
        StatusCode::TEMPORARY_REDIRECT,
        StatusCode::PERMANENT_REDIRECT,
    ] {
        for content_type in ["application/json", "text/event-stream"] {
            let url = redirecting_server_with_body(status, content_type).await;
            let server = declared(&url);
            let gate = start_gate(Gate::new(&server, policy(&server), &no_env).unwrap()).await;
            let what = format!("{status}, {content_type}");
            for response in [
                post(&gate, PING, &[]).await,
                client().get(&gate).send().await.unwrap(),
                client().delete(&gate).send().await.unwrap(),
            ] {
                assert_eq!(response.status(), status, "{what}");
                let names: Vec<&str> = response.headers().keys().map(|k| k.as_str()).collect();
                // What hyper adds to every answer, and nothing of the server's.
                for name in &names {
                    assert!(
                        ["content-length", "date"].contains(name),
                        "{what}: {name} relayed: {names:?}"
                    );
                }
                let body = response.bytes().await.unwrap();
                assert!(
                    body.is_empty(),
                    "{what}: {}",
                    String::from_utf8_lossy(&body)
                );
            }
        }
    }
}

#[tokio::test]
async fn the_headers_appear_in_no_error_the_agent_gets() {
    let refusing = |body: &str| {
        vec![now(&format!(
            "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer error=\"invalid_token\"\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ))]
    };
    let mut urls = vec![
        raw_server(refusing(r#"{"error":"invalid_token"}"#), false)
            .await
            .0,
        raw_server(
            refusing(
                r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32001,"message":"unauthorized"}}"#,
            ),
            false,
        )
        .await
        .0,
        raw_server(Vec::new(), true).await.0,
    ];
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    urls.push(format!("http://{}/mcp", closed.local_addr().unwrap()));
    drop(closed);
    for url in &urls {
        let server = with_headers(url);
        let gate = Gate::new(&server, policy(&server), &secrets)
            .unwrap()
            .with_response_timeout(Duration::from_secs(1));
        let gate = start_gate(gate).await;
        let response = post(&gate, PING, &[]).await;
        assert!(response.status().is_client_error() || response.status().is_server_error());
        shows_no_secret(&seen(response).await);
    }
}

#[tokio::test]
async fn an_answer_carrying_a_credential_back_is_not_relayed() {
    let json = |status: &str, headers: &str, body: &str| {
        vec![now(&format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\n\r\n{body}",
            body.len()
        ))]
    };
    let echoed = format!(
        r#"{{"jsonrpc":"2.0","id":5,"error":{{"code":-32001,"message":"invalid token {TOKEN}"}}}}"#
    );
    let result = format!(r#"{{"jsonrpc":"2.0","id":5,"result":{{"key":"{KEY}"}}}}"#);
    let session = format!("mcp-session-id: {KEY}\r\n");
    for answer in [
        json("401 Unauthorized", "", &echoed),
        json("200 OK", "", &result),
        json(
            "200 OK",
            &session,
            r#"{"jsonrpc":"2.0","id":5,"result":{}}"#,
        ),
    ] {
        let gate = gate_with_headers(&raw_server(answer, false).await.0).await;
        let response = post(&gate, PING, &[]).await;
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        let said = seen(response).await;
        shows_no_secret(&said);
        assert!(said.contains("mcp_upstream_echoed_secret"), "{said}");
    }
    // An SSE answer is cut before the event that carries one.
    let stream = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n\
         data: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{{\"level\":\"info\",\"data\":\"first\"}}}}\n\n\
         data: {result}\n\n"
    );
    let gate = gate_with_headers(&raw_server(vec![now(&stream)], false).await.0).await;
    let said = seen(post(&gate, PING, &[]).await).await;
    shows_no_secret(&said);
    assert!(said.contains("first"), "{said}");
}

#[tokio::test]
async fn an_answer_carrying_a_withheld_secret_back_is_not_relayed() {
    // A stdio server's environment, say: the gate adds nothing, but the
    // server holds the value and may show it.
    let result = format!(r#"{{"jsonrpc":"2.0","id":5,"result":{{"env":"GH_PAT={TOKEN}"}}}}"#);
    let answer = now(&format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{result}",
        result.len()
    ));
    let server = declared(&raw_server(vec![answer], false).await.0);
    let gate = Gate::new(&server, policy(&server), &|_| None)
        .unwrap()
        .withholding([String::new(), TOKEN.to_owned()]);
    let response = post(&start_gate(gate).await, PING, &[]).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let said = seen(response).await;
    shows_no_secret(&said);
    assert!(said.contains("mcp_upstream_echoed_secret"), "{said}");
}

// ------------------------------------------------ who may drive the gate

/// What the conformance suite's `dns-rebinding-protection` scenario sends:
/// an `initialize` with `Host` and `Origin` set to the same host.
async fn initialize_as(gate: &str, host: &str, origin: Option<&str>) -> reqwest::Response {
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"conformance-dns-rebinding-test","version":"1.0.0"}}}"#;
    let mut headers = vec![("host", host), ("mcp-protocol-version", "2025-11-25")];
    headers.extend(origin.map(|o| ("origin", o)));
    post(gate, init, &headers).await
}

#[tokio::test]
async fn requests_a_web_page_could_send_are_refused_before_the_server() {
    let (gate, log) = setup().await;
    let authority = gate.trim_start_matches("http://").trim_end_matches("/mcp");
    let (host, origin) = ("mcp_host_refused", "mcp_origin_refused");
    let rows = [
        ("evil.example.com", Some("http://evil.example.com"), host),
        ("evil.example.com", None, host),
        ("evil.example.com:4100", None, host),
        (authority, Some("http://evil.example.com"), origin),
        (authority, Some("http://evil.example.com:4100"), origin),
        (authority, Some("null"), origin),
        (authority, Some("http://localhost.evil.example.com"), origin),
    ];
    for (host_header, origin_header, reason) in rows {
        let response = initialize_as(&gate, host_header, origin_header).await;
        assert_eq!(
            response.status(),
            StatusCode::FORBIDDEN,
            "{host_header} {origin_header:?}"
        );
        let value: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(value["error"]["data"]["reason"], reason);
        assert_eq!(value["error"]["code"], -32600);
        assert_eq!(value["id"], Value::Null);
        // The GET stream and DELETE too, and methods the gate would refuse
        // anyway: nothing is answered but the refusal.
        for method in [Method::GET, Method::DELETE, Method::PUT] {
            let mut request = client()
                .request(method.clone(), &gate)
                .header("host", host_header);
            if let Some(origin_header) = origin_header {
                request = request.header("origin", origin_header);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{method}");
        }
    }
    // No Host at all (an HTTP/1.0 request may leave it out): 400.
    let mut stream = TcpStream::connect(authority).await.unwrap();
    let request = format!(
        "POST /mcp HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{PING}",
        PING.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.0 400"), "{response}");
    assert!(response.contains("mcp_host_refused"), "{response}");
    assert!(
        log.lock().unwrap().is_empty(),
        "a refused request reached the server"
    );

    // What a legitimate client sends: the gate's own address (the in-sandbox
    // relay's, 127.0.0.1:PORT), or another loopback spelling, with or
    // without a loopback Origin.
    let port = authority.rsplit(':').next().unwrap();
    for (host_header, origin_header) in [
        (authority.to_owned(), Some(format!("http://{authority}"))),
        (authority.to_owned(), None),
        (
            format!("localhost:{port}"),
            Some(format!("http://localhost:{port}")),
        ),
        (
            format!("[::1]:{port}"),
            Some("https://[::1]:8443".to_owned()),
        ),
    ] {
        let response = initialize_as(&gate, &host_header, origin_header.as_deref()).await;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{host_header} {origin_header:?}"
        );
    }
    assert_eq!(posts(&log).len(), 4);
}

// ------------------------------------------------ revisions and batches

#[tokio::test]
async fn batches_are_refused_when_the_header_says_2025_06_18_or_later() {
    let (gate, log) = setup().await;
    let batch =
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#;
    for revision in ["2025-06-18", "2025-11-25", "2026-07-28"] {
        let response = post(&gate, batch, &[("mcp-protocol-version", revision)]).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{revision}");
        let value: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(value["error"]["data"]["reason"], "mcp_batch_not_allowed");
    }
    assert!(posts(&log).is_empty());
    // 2025-03-26, or no header (as 2025-03-26 clients send): policed
    // element by element, and forwarded.
    for extra in [&[("mcp-protocol-version", "2025-03-26")][..], &[]] {
        let response = post(&gate, batch, extra).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
    }
    assert_eq!(posts(&log).len(), 2);
}

#[tokio::test]
async fn an_unsupported_protocol_version_is_refused_before_the_server() {
    let (gate, log) = setup().await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for bad in [
        "1900-01-01",
        "2024-11-05",
        "2099-01-01",
        "not-a-version",
        "2025-6-18",
        "2025-06-18,2025-03-26",
    ] {
        let response = post(&gate, ping, &[("mcp-protocol-version", bad)]).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
        let value: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(value["id"], Value::Null);
        assert_eq!(value["error"]["code"], -32600);
        assert_eq!(
            value["error"]["data"]["reason"],
            "mcp_unsupported_protocol_version"
        );
        let message = value["error"]["message"].as_str().unwrap();
        assert!(
            message.ends_with("(supported: 2025-03-26, 2025-06-18, 2025-11-25, 2026-07-28)"),
            "{message}"
        );
    }
    // Twice, even if both are fine: which one would the server read?
    let response = post(
        &gate,
        ping,
        &[
            ("mcp-protocol-version", "2025-03-26"),
            ("mcp-protocol-version", "2025-06-18"),
        ],
    )
    .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    for method in [Method::GET, Method::DELETE] {
        let response = client()
            .request(method.clone(), &gate)
            .header("mcp-protocol-version", "1900-01-01")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{method}");
    }
    assert!(log.lock().unwrap().is_empty());
    // Every supported revision passes.
    for good in ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"] {
        let response = post(&gate, ping, &[("mcp-protocol-version", good)]).await;
        assert_eq!(response.status(), StatusCode::OK, "{good}");
    }
}

// ------------------------------------------------------------ tool lists

#[tokio::test]
async fn a_tool_list_is_filtered_even_when_it_answers_no_tools_list() {
    let (gate, offers) = offering_gate(Ok(())).await;
    let (status, value) =
        post_json(&gate, r#"{"jsonrpc":"2.0","id":"leak","method":"ping"}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(tool_names(&value), ["list_invoices"]);
    // And it is on record as offered, as any other.
    assert_eq!(offers.names(), [vec!["list_invoices"]]);
}

/// Keeps every tool list the gate records, answering `answer`.
#[derive(Clone)]
struct Offers(Arc<Mutex<Vec<OfferedTools>>>, Result<(), NotRecorded>);

impl Offers {
    fn names(&self) -> Vec<Vec<String>> {
        let offered = self.0.lock().unwrap();
        offered.iter().map(|o| o.tools.clone()).collect()
    }

    fn all(&self) -> Vec<OfferedTools> {
        self.0.lock().unwrap().clone()
    }
}

impl Recorder for Offers {
    fn refused<'a>(&'a self, _refused: &'a RefusedRequest) -> RecordFuture<'a> {
        Box::pin(std::future::ready(()))
    }

    fn offered<'a>(&'a self, offered: &'a OfferedTools) -> OfferFuture<'a> {
        self.0.lock().unwrap().push(offered.clone());
        Box::pin(std::future::ready(self.1))
    }
}

/// A gate in front of the fake server, recording tool lists with an
/// [`Offers`] that answers `answer`.
async fn offering_gate(answer: Result<(), NotRecorded>) -> (String, Offers) {
    let (url, _log) = fake_server().await;
    let server = declared(&url);
    let offers = Offers(Arc::default(), answer);
    let gate = Gate::new(&server, policy(&server), &no_env)
        .unwrap()
        .with_recorder(offers.clone());
    (start_gate(gate).await, offers)
}

/// `sha256:` of the JCS bytes of the `tools` the agent got.
fn digest_of_what_the_agent_got(answer: &Value) -> String {
    let tools = &answer["result"]["tools"];
    let canonical = serde_json_canonicalizer::to_vec(tools).unwrap();
    format!("sha256:{:x}", Sha256::digest(canonical))
}

#[tokio::test]
async fn each_distinct_tool_list_is_recorded_once_with_the_digest_of_what_the_agent_got() {
    let (gate, offers) = offering_gate(Ok(())).await;
    let first = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let (_, page1) = post_json(&gate, first).await;
    let (_, again) = post_json(&gate, first).await;
    assert_eq!(page1, again);
    let second = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"p2"}}"#;
    let (_, page2) = post_json(&gate, second).await;
    let offered = offers.all();
    assert_eq!(offered.len(), 2, "{offered:?}");
    for (record, page) in offered.iter().zip([&page1, &page2]) {
        assert_eq!(record.server, "accounting");
        assert_eq!(record.tools, tool_names(page));
        assert_eq!(record.digest, digest_of_what_the_agent_got(page));
    }
    assert_eq!(offers.names(), [vec!["list_invoices"], vec!["pay_invoice"]]);
}

#[tokio::test]
async fn a_list_differing_only_in_a_description_is_another_record() {
    let (gate, offers) = offering_gate(Ok(())).await;
    for version in ["v1", "v2", "v1"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"cursor":"{version}"}}}}"#
        );
        let (_, answer) = post_json(&gate, &body).await;
        assert_eq!(answer["result"]["tools"][0]["description"], version);
    }
    let offered = offers.all();
    assert_eq!(offered.len(), 2, "{offered:?}");
    assert_ne!(offered[0].digest, offered[1].digest);
}

#[tokio::test]
async fn a_tool_list_in_an_sse_answer_is_recorded() {
    let (gate, offers) = offering_gate(Ok(())).await;
    let list = r#"{"jsonrpc":"2.0","id":"l1","method":"tools/list","params":{"cursor":"sse"}}"#;
    let text = post(&gate, list, &[]).await.text().await.unwrap();
    let messages = data_lines(&text);
    assert_eq!(offers.names(), [vec!["list_invoices"]]);
    assert_eq!(
        offers.all()[0].digest,
        digest_of_what_the_agent_got(&messages[0])
    );
}

#[tokio::test]
async fn a_tool_list_that_cannot_be_recorded_is_not_relayed() {
    let (gate, offers) = offering_gate(Err(NotRecorded)).await;
    let (status, value) =
        post_json(&gate, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(value["id"], 2);
    assert_eq!(value["error"]["data"]["reason"], "mcp_tools_unrecorded");
    assert!(value.get("result").is_none(), "{value}");
    // Asked again, it is tried again: nothing is taken as recorded.
    let (status, _) = post_json(&gate, r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(offers.all().len(), 2);

    // In an SSE answer, the stream is cut before the list.
    let list = r#"{"jsonrpc":"2.0","id":"l1","method":"tools/list","params":{"cursor":"sse"}}"#;
    let text = post(&gate, list, &[]).await.text().await.unwrap();
    assert!(!text.contains("list_invoices"), "{text}");
    assert!(data_lines(&text).is_empty(), "{text}");
}

#[tokio::test]
async fn a_tool_list_waits_for_its_record() {
    let (url, _log) = fake_server().await;
    let server = declared(&url);
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = Gate::new(&server, policy(&server), &no_env)
        .unwrap()
        .with_recorder(Held(release.clone()));
    let gate = start_gate(gate).await;
    let answer = tokio::spawn(async move {
        post_json(&gate, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!answer.is_finished(), "shown before it was recorded");
    release.notify_one();
    let (_, value) = answer.await.unwrap();
    assert_eq!(tool_names(&value), ["list_invoices"]);
}

#[tokio::test]
async fn past_the_bound_no_new_tool_list_is_relayed() {
    let (gate, offers) = offering_gate(Ok(())).await;
    let list = |version: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"cursor":"v{version}"}}}}"#
        )
    };
    for version in 0..MAX_OFFERED_LISTS {
        let (status, _) = post_json(&gate, &list(version)).await;
        assert_eq!(status, StatusCode::OK, "list {version}");
    }
    let (status, value) = post_json(&gate, &list(MAX_OFFERED_LISTS)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(value["error"]["data"]["reason"], "mcp_tools_unrecorded");
    // A list on record already still goes through.
    let (status, _) = post_json(&gate, &list(0)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(offers.all().len(), MAX_OFFERED_LISTS);
}

// ---------------------------------------------- servers that misbehave

/// A server speaking raw HTTP/1.1: for each connection it reads one
/// request, then writes `parts` (each after its delay), then holds the
/// connection open if `hold`, else closes it.
async fn raw_server(parts: Vec<(Duration, Vec<u8>)>, hold: bool) -> (String, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(0));
    let counter = requests.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let parts = parts.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                read_request(&mut stream).await;
                *counter.lock().unwrap() += 1;
                for (delay, bytes) in parts {
                    tokio::time::sleep(delay).await;
                    if stream.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                if hold {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
            });
        }
    });
    (format!("http://{addr}/mcp?token=s3cret-token"), requests)
}

/// Reads one request's head and its `Content-Length` body.
async fn read_request(stream: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.unwrap();
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        if buf.len() >= end + 4 + length {
            return;
        }
    }
}

fn now(bytes: &str) -> (Duration, Vec<u8>) {
    (Duration::ZERO, bytes.as_bytes().to_vec())
}

async fn gate_for(url: &str, timeout: Duration) -> String {
    let server = declared(url);
    let gate = Gate::new(&server, policy(&server), &no_env)
        .unwrap()
        .with_response_timeout(timeout);
    start_gate(gate).await
}

const PING: &str = r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#;

#[tokio::test]
async fn a_server_that_never_answers_is_a_504_within_the_bound() {
    let (url, requests) = raw_server(Vec::new(), true).await;
    let gate = gate_for(&url, Duration::from_secs(1)).await;
    let started = Instant::now();
    let (status, value) = post_json(&gate, PING).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(value["id"], 5);
    assert_eq!(value["error"]["code"], -32603);
    assert_eq!(value["error"]["data"]["reason"], "mcp_upstream_timeout");
    assert!(
        value["error"]["message"]
            .as_str()
            .unwrap()
            .contains(r#"MCP server "accounting""#)
    );
    assert_eq!(*requests.lock().unwrap(), 1);

    // Headers, then a JSON body that never comes.
    let (url, _) = raw_server(
        vec![now(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{",
        )],
        true,
    )
    .await;
    let gate = gate_for(&url, Duration::from_secs(1)).await;
    let started = Instant::now();
    let (status, value) = post_json(&gate, PING).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(value["error"]["data"]["reason"], "mcp_upstream_timeout");
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

#[tokio::test]
async fn an_sse_answer_that_falls_silent_is_cut_but_the_get_stream_is_not() {
    let event = "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1}}\n\n";
    let (url, _) = raw_server(vec![now(SSE_HEAD), now(event)], true).await;
    let gate = gate_for(&url, Duration::from_secs(1)).await;
    let started = Instant::now();
    let response = post(&gate, PING, &[]).await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(text.contains("notifications/progress"), "{text}");

    // The GET stream may stay quiet longer than the bound.
    let (url, _) = raw_server(
        vec![
            now(SSE_HEAD),
            (Duration::from_millis(1500), event.as_bytes().to_vec()),
        ],
        false,
    )
    .await;
    let gate = gate_for(&url, Duration::from_secs(1)).await;
    let response = client()
        .get(&gate)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    assert!(text.contains("notifications/progress"), "{text}");
}

fn answer_with_headers(headers: &str) -> Vec<(Duration, Vec<u8>)> {
    let body = r#"{"jsonrpc":"2.0","id":5,"result":{}}"#;
    vec![now(&format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{headers}connection: close\r\n\r\n{body}",
        body.len()
    ))]
}

#[tokio::test]
async fn only_whitelisted_server_headers_reach_the_agent() {
    let (url, _) = raw_server(
        answer_with_headers(
            "Mcp-Session-Id: sess-7\r\nMCP-Protocol-Version: 2025-06-18\r\nSet-Cookie: a=b\r\n\
             Location: https://elsewhere.example/\r\nWWW-Authenticate: Bearer realm=x\r\n\
             X-Upstream: 1\r\nAccess-Control-Allow-Origin: *\r\n",
        ),
        false,
    )
    .await;
    let gate = gate_for(&url, Duration::from_secs(5)).await;
    let response = post(&gate, PING, &[]).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut names: Vec<&str> = response.headers().keys().map(|k| k.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "content-length",
            "content-type",
            "date",
            "mcp-protocol-version",
            "mcp-session-id"
        ]
    );
    assert_eq!(response.headers()["mcp-session-id"], "sess-7");
}

/// A ping through a gate whose server answers with `headers` added.
async fn ping_with_server_headers(headers: &[u8]) -> reqwest::Response {
    let mut reply = answer_with_headers("");
    let at = reply[0].1.windows(2).position(|w| w == b"\r\n").unwrap() + 2;
    reply[0].1.splice(at..at, headers.iter().copied());
    let (url, _) = raw_server(reply, false).await;
    let gate = gate_for(&url, Duration::from_secs(5)).await;
    post(&gate, PING, &[]).await
}

#[tokio::test]
async fn a_server_cannot_put_odd_bytes_in_relayed_headers() {
    // Valid HTTP, but not what MCP allows in a session id: refused (502).
    for headers in [
        &b"Mcp-Session-Id: a b\r\n"[..],
        b"Mcp-Session-Id: abc\x80\xff\r\n",
        b"Mcp-Session-Id: abc\tdef\r\n",
        b"Mcp-Session-Id: \r\n",
        b"Mcp-Session-Id: one\r\nMcp-Session-Id: two\r\n",
        b"MCP-Protocol-Version: 2025-06-18 x\r\n",
    ] {
        let response = ping_with_server_headers(headers).await;
        let shown = String::from_utf8_lossy(headers);
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY, "{shown}");
        assert!(response.headers().get("mcp-session-id").is_none());
        let value: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(value["error"]["data"]["reason"], "mcp_upstream_malformed");
    }
    // Not valid HTTP at all (a bare CR, NUL, an obsolete folded line): the
    // HTTP client refuses the response before the gate sees a header.
    for headers in [
        &b"Mcp-Session-Id: abc\rX-Injected: 1\r\n"[..],
        b"Mcp-Session-Id: abc\x00def\r\n",
        b"Mcp-Session-Id: abc\r\n X-Injected: 1\r\n",
    ] {
        let response = ping_with_server_headers(headers).await;
        let shown = String::from_utf8_lossy(headers);
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY, "{shown}");
        assert!(response.headers().get("x-injected").is_none());
        assert!(response.headers().get("mcp-session-id").is_none());
    }
}

#[tokio::test]
async fn error_messages_never_carry_the_server_url() {
    let mut bodies = Vec::new();
    let mut urls = Vec::new();
    // Unreachable.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    urls.push(format!("http://{addr}/mcp?token=s3cret-token"));
    // Never answers; answers garbage; answers with a bad header.
    for (parts, hold) in [
        (Vec::new(), true),
        (
            vec![now(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 3\r\n\r\n{{{",
            )],
            false,
        ),
        (answer_with_headers("Mcp-Session-Id: a b\r\n"), false),
    ] {
        urls.push(raw_server(parts, hold).await.0);
    }
    for url in &urls {
        let gate = gate_for(url, Duration::from_secs(1)).await;
        let response = post(&gate, PING, &[]).await;
        assert!(response.status().is_server_error(), "{url}");
        bodies.push(response.text().await.unwrap());
    }
    assert_eq!(bodies.len(), 4);
    for (body, url) in bodies.iter().zip(&urls) {
        let authority = url.trim_start_matches("http://").split('/').next().unwrap();
        for secret in ["s3cret", "token", authority, "127.0.0.1", "/mcp"] {
            assert!(!body.contains(secret), "{secret} in {body}");
        }
        assert!(body.contains(r#"\"accounting\""#), "{body}");
    }
    // Building a gate does not show it either.
    let server = declared(&urls[0]);
    let gate = Gate::new(&server, policy(&server), &no_env).unwrap();
    assert!(!format!("{gate:?}").contains("s3cret"));
}
