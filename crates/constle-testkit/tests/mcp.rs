//! The real MCP server and client of `constle_testkit::mcp`, against each
//! other.
//!
//! This test binary has its own `main` (`harness = false`): started as
//! `<this exe> mcp-client …` it is the MCP client (it calls
//! [`client_main`]), exactly as the end-to-end tests run it inside the
//! sandbox. Otherwise it runs the tests through `libtest-mimic`. The client
//! runs with `HTTP_PROXY` and `HTTPS_PROXY` pointing at a closed loopback
//! port and `NO_PROXY=127.0.0.1,localhost`, as in the sandbox, so a client
//! that ignored `NO_PROXY` would fail. Loopback only.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{self, BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use constle_testkit::mcp::{
    EXIT_FAILED, EXIT_OK, EXIT_RPC_ERROR, EXIT_TOOL_ERROR, EXIT_USAGE, McpServerOptions,
    RecordedCall, TOOLS, TestMcpServer, client_main,
};
use libtest_mimic::{Arguments, Trial};
use serde_json::{Value, json};

const CLIENT_SUBCOMMAND: &str = "mcp-client";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == CLIENT_SUBCOMMAND) {
        std::process::exit(client_main(&args[2..]));
    }
    let tests = vec![
        Trial::test("list_in_every_mode", || {
            list_in_every_mode();
            Ok(())
        }),
        Trial::test("call_get_invoice_in_every_mode", || {
            call_get_invoice_in_every_mode();
            Ok(())
        }),
        Trial::test("every_tool_answers", || {
            every_tool_answers();
            Ok(())
        }),
        Trial::test("unknown_tool_is_a_json_rpc_error", || {
            unknown_tool_is_a_json_rpc_error();
            Ok(())
        }),
        Trial::test("bad_arguments_are_a_tool_error", || {
            bad_arguments_are_a_tool_error();
            Ok(())
        }),
        Trial::test("list_records_no_call", || {
            list_records_no_call();
            Ok(())
        }),
        Trial::test("race_calls_the_rest_once_the_first_is_answered", || {
            race_calls_the_rest_once_the_first_is_answered();
            Ok(())
        }),
        Trial::test("transport_failure", || {
            transport_failure();
            Ok(())
        }),
        Trial::test("usage_errors", || {
            usage_errors();
            Ok(())
        }),
        Trial::test("wire_json_and_sessions", || {
            wire_json_and_sessions();
            Ok(())
        }),
        Trial::test("wire_pagination", || {
            wire_pagination();
            Ok(())
        }),
        Trial::test("wire_required_headers", || {
            wire_required_headers();
            Ok(())
        }),
        Trial::test("invalid_options", || {
            invalid_options();
            Ok(())
        }),
        Trial::test("server_started_inside_a_current_thread_runtime", || {
            server_started_inside_a_current_thread_runtime();
            Ok(())
        }),
        Trial::test("client_main_in_process", || {
            client_main_in_process();
            Ok(())
        }),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

// ---------------------------------------------------------------------------
// Helpers

/// What a client run printed, and its exit code.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs this binary as `mcp-client ARGS`, with the sandbox's proxy
/// environment pointing at a closed port.
fn client(args: &[&str]) -> Run {
    let proxy = format!("http://127.0.0.1:{}", closed_port());
    let output = Command::new(std::env::current_exe().unwrap())
        .arg(CLIENT_SUBCOMMAND)
        .args(args)
        .env("HTTP_PROXY", &proxy)
        .env("HTTPS_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env("https_proxy", &proxy)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .output()
        .unwrap();
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

fn expect(run: &Run, code: i32, stdout: &str) {
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (code, stdout),
        "stderr: {}",
        run.stderr
    );
}

fn all_tools_listed() -> String {
    TOOLS.iter().map(|tool| format!("{tool}\n")).collect()
}

/// Every mode the server has, with a name for messages.
fn modes() -> Vec<(&'static str, McpServerOptions)> {
    let mut modes = Vec::new();
    for (mode, stateful, json_response) in [
        ("stateful+sse", true, false),
        ("stateless+sse", false, false),
        ("stateless+json", false, true),
    ] {
        for page_size in [None, Some(1), Some(4), Some(6), Some(100)] {
            modes.push((
                mode,
                McpServerOptions {
                    json_response,
                    stateful,
                    page_size,
                    ..McpServerOptions::default()
                },
            ));
        }
    }
    modes
}

// ---------------------------------------------------------------------------
// Client against server

fn list_in_every_mode() {
    for (mode, options) in modes() {
        let page_size = options.page_size;
        let server = TestMcpServer::start(options).unwrap();
        let run = client(&["list", &server.url()]);
        assert_eq!(run.code, EXIT_OK, "{mode} {page_size:?}: {}", run.stderr);
        assert_eq!(run.stdout, all_tools_listed(), "{mode} {page_size:?}");
    }
}

fn call_get_invoice_in_every_mode() {
    for (mode, options) in modes() {
        let server = TestMcpServer::start(options).unwrap();
        let run = client(&[
            "call",
            &server.url(),
            "get_invoice",
            r#"{"invoice_id":"INV-0042"}"#,
        ]);
        assert_eq!(
            (run.code, run.stdout.as_str()),
            (EXIT_OK, "result: invoice INV-0042: 120.00 EUR\n"),
            "{mode}: {}",
            run.stderr
        );
        assert_eq!(
            server.calls(),
            vec![RecordedCall {
                tool: "get_invoice".into(),
                arguments: json!({"invoice_id": "INV-0042"}),
            }],
            "{mode}"
        );
    }
}

fn every_tool_answers() {
    let server = TestMcpServer::start(McpServerOptions::default()).unwrap();
    let url = server.url();
    let cases = [
        ("list_invoices", "{}", "result: INV-0042,INV-0043\n"),
        (
            "get_invoice",
            r#"{"invoice_id":"INV-0043"}"#,
            "result: invoice INV-0043: 120.00 EUR\n",
        ),
        (
            "pay_invoice",
            r#"{"invoice_id":"INV-0042"}"#,
            "result: paid INV-0042\n",
        ),
        (
            "Pay_Invoice",
            r#"{"invoice_id":"INV-0043"}"#,
            "result: paid INV-0043\n",
        ),
        ("delete_everything", "{}", "result: deleted everything\n"),
        (
            "echo",
            r#"{"text":"héllo, wörld"}"#,
            "result: héllo, wörld\n",
        ),
    ];
    for (tool, arguments, stdout) in cases {
        expect(&client(&["call", &url, tool, arguments]), EXIT_OK, stdout);
    }
    let calls = server.calls();
    let recorded: Vec<(&str, Value)> = calls
        .iter()
        .map(|call| (call.tool.as_str(), call.arguments.clone()))
        .collect();
    let expected: Vec<(&str, Value)> = cases
        .iter()
        .map(|(tool, arguments, _)| (*tool, serde_json::from_str(arguments).unwrap()))
        .collect();
    assert_eq!(recorded, expected);
}

fn unknown_tool_is_a_json_rpc_error() {
    for (mode, options) in modes().into_iter().filter(|(_, o)| o.page_size.is_none()) {
        let server = TestMcpServer::start(options).unwrap();
        let run = client(&["call", &server.url(), "no_such_tool", "{}"]);
        assert_eq!(
            (run.code, run.stdout.as_str()),
            (EXIT_RPC_ERROR, "error: -32602 unknown tool: no_such_tool\n"),
            "{mode}: {}",
            run.stderr
        );
        // It reached the server, so it is recorded.
        assert_eq!(
            server.calls(),
            vec![RecordedCall {
                tool: "no_such_tool".into(),
                arguments: json!({}),
            }],
            "{mode}"
        );
    }
}

fn bad_arguments_are_a_tool_error() {
    let server = TestMcpServer::start(McpServerOptions::default()).unwrap();
    let url = server.url();
    expect(
        &client(&["call", &url, "get_invoice", r#"{"invoice_id":42}"#]),
        EXIT_TOOL_ERROR,
        "tool_error: invalid arguments: invoice_id must be a string\n",
    );
    expect(
        &client(&["call", &url, "echo", "{}"]),
        EXIT_TOOL_ERROR,
        "tool_error: invalid arguments: text must be a string\n",
    );
    assert_eq!(server.calls().len(), 2);
}

fn list_records_no_call() {
    let server = TestMcpServer::start(McpServerOptions {
        page_size: Some(2),
        ..McpServerOptions::default()
    })
    .unwrap();
    expect(
        &client(&["list", &server.url()]),
        EXIT_OK,
        &all_tools_listed(),
    );
    assert_eq!(server.calls(), vec![]);
}

fn race_calls_the_rest_once_the_first_is_answered() {
    let one = TestMcpServer::start(McpServerOptions::default()).unwrap();
    let two = TestMcpServer::start(McpServerOptions::default()).unwrap();
    let (url_one, url_two) = (one.url(), two.url());
    let run = client(&[
        "race",
        &url_one,
        "nope",
        "{}",
        &url_one,
        "echo",
        r#"{"text":"a"}"#,
        &url_two,
        "echo",
        r#"{"text":"b"}"#,
    ]);
    assert_eq!(run.code, EXIT_RPC_ERROR, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", run.stdout);
    assert!(lines[0].starts_with("0: error: -32602 "), "{}", run.stdout);
    assert_eq!(lines[1..], ["1: result: a", "2: result: b"]);
    let tools = |server: &TestMcpServer| -> Vec<String> {
        server.calls().into_iter().map(|c| c.tool).collect()
    };
    assert_eq!(tools(&one), ["nope", "echo"]);
    assert_eq!(tools(&two), ["echo"]);
}

fn transport_failure() {
    let url = format!("http://127.0.0.1:{}/mcp", closed_port());
    for args in [
        vec!["list", &url],
        vec!["call", &url, "echo", r#"{"text":"x"}"#],
    ] {
        let run = client(&args);
        assert_eq!((run.code, run.stdout.as_str()), (EXIT_FAILED, ""));
        assert!(run.stderr.starts_with("failed: "), "{}", run.stderr);
    }
    // A server that is not MCP: a 404 for every path but /mcp.
    let server = TestMcpServer::start(McpServerOptions::default()).unwrap();
    let wrong_path = format!("http://{}/not-mcp", server.addr());
    let run = client(&["list", &wrong_path]);
    assert_eq!(run.code, EXIT_FAILED, "{}", run.stderr);
    assert!(run.stderr.starts_with("failed: "), "{}", run.stderr);
}

fn usage_errors() {
    for args in [
        vec![],
        vec!["list"],
        vec!["frobnicate", "http://127.0.0.1:1/mcp"],
        vec!["call", "http://127.0.0.1:1/mcp", "echo"],
        vec!["call", "http://127.0.0.1:1/mcp", "echo", "[1]"],
        vec!["call", "http://127.0.0.1:1/mcp", "echo", "{"],
        vec!["race"],
        vec!["race", "http://127.0.0.1:1/mcp", "echo", "{}", "x"],
    ] {
        let run = client(&args);
        assert_eq!(
            (run.code, run.stdout.as_str()),
            (EXIT_USAGE, ""),
            "{args:?}"
        );
        assert!(!run.stderr.is_empty());
    }
}

// ---------------------------------------------------------------------------
// The wire: what the options change, seen without rmcp's client

/// One HTTP/1.1 POST over a fresh connection: status, headers (names in
/// lower case), body.
fn post(
    server: &TestMcpServer,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, Vec<(String, String)>, String) {
    let body = body.to_string();
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        server.addr(),
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes()).unwrap();

    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let chunked = header(&headers, "transfer-encoding").is_some_and(|v| v == "chunked");
    let body = if chunked {
        read_chunked(&mut reader)
    } else if let Some(length) = header(&headers, "content-length") {
        let mut body = vec![0; length.parse().unwrap()];
        reader.read_exact(&mut body).unwrap();
        body
    } else {
        let mut body = Vec::new();
        reader.read_to_end(&mut body).unwrap();
        body
    };
    (status, headers, String::from_utf8(body).unwrap())
}

/// A chunked body, up to the first event's end for an SSE stream that stays
/// open (enough for one response).
fn read_chunked(reader: &mut impl io::BufRead) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        if reader.read_line(&mut size).unwrap() == 0 {
            return body;
        }
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            return body;
        }
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).unwrap();
        body.extend_from_slice(&chunk[..size]);
        if String::from_utf8_lossy(&body).contains("\"result\"") && body.ends_with(b"\n\n") {
            return body;
        }
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The JSON-RPC message of a body: the body itself, or the `data:` of the
/// SSE event that holds one.
fn message(content_type: &str, body: &str) -> Value {
    if content_type.starts_with("application/json") {
        return serde_json::from_str(body).unwrap();
    }
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter(|data| !data.trim().is_empty())
        .map(|data| serde_json::from_str::<Value>(data.trim()).unwrap())
        .find(|value| value.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC message in {body:?}"))
}

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    })
}

fn wire_json_and_sessions() {
    for (mode, options, content_type, session) in [
        (
            "stateful+sse",
            McpServerOptions::default(),
            "text/event-stream",
            true,
        ),
        (
            "stateless+sse",
            McpServerOptions {
                stateful: false,
                ..McpServerOptions::default()
            },
            "text/event-stream",
            false,
        ),
        (
            "stateless+json",
            McpServerOptions {
                stateful: false,
                json_response: true,
                ..McpServerOptions::default()
            },
            "application/json",
            false,
        ),
    ] {
        let server = TestMcpServer::start(options).unwrap();
        let (status, headers, body) = post(&server, &[], &initialize());
        assert_eq!(status, 200, "{mode}: {body}");
        let got_type = header(&headers, "content-type").unwrap();
        assert!(got_type.starts_with(content_type), "{mode}: {got_type}");
        assert_eq!(
            header(&headers, "mcp-session-id").is_some(),
            session,
            "{mode}: {headers:?}"
        );
        let result = &message(got_type, &body)["result"];
        assert_eq!(result["protocolVersion"], "2025-11-25", "{mode}: {body}");
        assert_eq!(
            result["serverInfo"]["name"], "constle-testkit-mcp-server",
            "{mode}"
        );
        assert!(result["capabilities"]["tools"].is_object(), "{mode}");
    }
}

fn wire_pagination() {
    let server = TestMcpServer::start(McpServerOptions {
        stateful: false,
        json_response: true,
        page_size: Some(4),
        ..McpServerOptions::default()
    })
    .unwrap();
    let version = [("MCP-Protocol-Version", "2025-11-25")];
    let list = |params: Value| {
        let (status, headers, body) = post(
            &server,
            &version,
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": params}),
        );
        assert_eq!(status, 200, "{body}");
        message(header(&headers, "content-type").unwrap(), &body)
    };
    let first = list(json!({}));
    let names: Vec<&str> = first["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, TOOLS[..4]);
    assert_eq!(first["result"]["nextCursor"], "4");
    // Every tool has an object input schema.
    for tool in first["result"]["tools"].as_array().unwrap() {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
    assert_eq!(
        first["result"]["tools"][1]["inputSchema"]["required"],
        json!(["invoice_id"])
    );

    let second = list(json!({"cursor": "4"}));
    let names: Vec<&str> = second["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, TOOLS[4..]);
    assert!(second["result"].get("nextCursor").is_none(), "{second}");

    let bad = list(json!({"cursor": "bogus"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

fn wire_required_headers() {
    let server = TestMcpServer::start(McpServerOptions {
        stateful: false,
        json_response: true,
        required_headers: vec![("authorization".into(), "Bearer t0ken".into())],
        ..McpServerOptions::default()
    })
    .unwrap();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let version = ("MCP-Protocol-Version", "2025-11-25");
    for refused in [
        vec![version],
        vec![version, ("Authorization", "Bearer wrong")],
        vec![
            version,
            ("Authorization", "Bearer t0ken"),
            ("Authorization", "Bearer t0ken"),
        ],
    ] {
        let (status, headers, body) = post(&server, &refused, &ping);
        assert_eq!(status, 401, "{refused:?}: {body}");
        let challenge = header(&headers, "www-authenticate");
        assert_eq!(challenge, Some(r#"Bearer error="invalid_token""#));
    }
    let (status, _, body) = post(
        &server,
        &[version, ("Authorization", "Bearer t0ken")],
        &ping,
    );
    assert_eq!(status, 200, "{body}");
}

// ---------------------------------------------------------------------------
// The server itself

fn invalid_options() {
    for options in [
        McpServerOptions {
            json_response: true,
            ..McpServerOptions::default()
        },
        McpServerOptions {
            page_size: Some(0),
            ..McpServerOptions::default()
        },
    ] {
        let error = TestMcpServer::start(options.clone()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{options:?}");
    }
}

fn server_started_inside_a_current_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = TestMcpServer::start(McpServerOptions::default()).unwrap();
        // The runtime is blocked here, so the server cannot be using it.
        expect(
            &client(&["call", &server.url(), "echo", r#"{"text":"ok"}"#]),
            EXIT_OK,
            "result: ok\n",
        );
        drop(server);
    });
}

fn client_main_in_process() {
    let server = TestMcpServer::start(McpServerOptions::default()).unwrap();
    let args = [
        "call".to_owned(),
        server.url(),
        "echo".to_owned(),
        r#"{"text":"in process"}"#.to_owned(),
    ];
    assert_eq!(client_main(&args), EXIT_OK);
    assert_eq!(
        server.calls(),
        vec![RecordedCall {
            tool: "echo".into(),
            arguments: json!({"text": "in process"}),
        }]
    );
}
