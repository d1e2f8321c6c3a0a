//! A real MCP server and a real MCP client for end-to-end tests, both built on
//! the official Rust SDK ([`rmcp`]) and speaking Streamable HTTP.
//!
//! - [`TestMcpServer`]: an invoice server on `127.0.0.1:<port>/mcp`, served
//!   from a thread of its own (with its own runtime), so it works whether the
//!   test runs a current-thread runtime, a multi-thread one, or none. It
//!   records every `tools/call` that reaches it ([`TestMcpServer::calls`]),
//!   so a test can prove that a call the gate refused never got there.
//! - [`stdio_server_main`]: the same server over stdin and stdout (the MCP
//!   stdio transport), for a test binary to run as a subcommand: what
//!   Constle runs for an Agentfile's `command:` server.
//! - [`client_main`]: a command-line MCP client (initialize,
//!   `notifications/initialized`, then `tools/list` or `tools/call`, or a
//!   call followed at once by others), for a test binary to run as a
//!   subcommand inside the sandbox. The binary needs
//!   nothing but the C library, so it can be hard-linked into a sandbox
//!   directory and run from there.
//!
//! # The server's tools
//!
//! | Tool | Arguments | Text result |
//! |---|---|---|
//! | `list_invoices` | none | `INV-0042,INV-0043` |
//! | `get_invoice` | `{"invoice_id": string}` | `invoice <id>: 120.00 EUR` |
//! | `pay_invoice` | `{"invoice_id": string}` | `paid <id>` |
//! | `Pay_Invoice` | `{"invoice_id": string}` | `paid <id>`: a case variant of `pay_invoice` that really exists here, so a test shows the *gate* refused it, not the server |
//! | `delete_everything` | none | `deleted everything`: a tool the server has but a manifest would not declare |
//! | `echo` | `{"text": string}` | the text itself (for benchmarks) |
//!
//! Over stdio ([`stdio_server_main`]) the server has three more tools, for
//! the tests of a server Constle runs:
//!
//! | Tool | Arguments | Text result |
//! |---|---|---|
//! | `env_digest` | `{"name": string}` | `set sha256:<hex of the value>` or `unset`: shows a secret arrived, never the secret |
//! | `list_dir` | `{"path": string}` | the entries' names, sorted, one a line, or a tool error with the OS error |
//! | `exit` | `{"code": string}` | none: the server exits at once with that status, answering nothing |
//! | `connect` | `{"host": string}` | `CONNECT host:443` through the proxy in `HTTPS_PROXY`: `proxy: <its status line>`, then `host: <the first line the host sent>` when the tunnel opened; a tool error without `HTTPS_PROXY` or a proxy |
//!
//! Each tool has a JSON Schema for its input. Arguments that do not fit it
//! (a missing or non-string `invoice_id`) give a tool result with
//! `isError: true`, as MCP asks of input validation errors. An unknown tool
//! name is a JSON-RPC error, code -32602 (invalid params), as MCP specifies
//! for unknown tools; rmcp's own tool router answers the same way.
//!
//! # Protocol
//!
//! rmcp 3.11 knows revisions 2024-11-05 through 2026-07-28. The last one
//! has no `initialize` handshake, so an `initialize` naming it is answered
//! with the newest revision that has one, 2025-11-25. The client here asks
//! for 2025-11-25 outright, so what it negotiates does not depend on the
//! server's fallback.
//!
//! # Server modes ([`McpServerOptions`])
//!
//! - `stateful` (default): rmcp's legacy session mode. `initialize` is
//!   answered with an `Mcp-Session-Id`, POSTs are answered with an SSE
//!   stream, and the client opens the standalone GET stream.
//! - `stateful: false`: no sessions; each POST is served on its own. POSTs are
//!   answered with SSE, or with plain `application/json` when `json_response`
//!   is set. rmcp honours `json_response` only without sessions, so asking for
//!   both is refused by [`TestMcpServer::start`].
//! - `page_size: Some(n)`: `tools/list` gives `n` tools a page, with a
//!   `nextCursor` on every page but the last (the cursor is the offset of the
//!   next page, as a decimal string; any other cursor is a -32602 error).
//! - `required_headers`: a request that does not carry each of them exactly
//!   once with exactly its value is answered `401` with
//!   `WWW-Authenticate: Bearer error="invalid_token"` and a JSON error, as a
//!   server guarding itself with a bearer token would, before rmcp sees it.
//!
//! The server accepts any `Host` header (rmcp's DNS-rebinding check is off):
//! it only ever listens on loopback, and a test may reach it by a name it
//! mapped there.

use std::borrow::Cow;
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use axum::response::IntoResponse as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ContentBlock, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceError, ServiceExt as _};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The path the server answers MCP on.
pub const MCP_PATH: &str = "/mcp";

/// The server's tools, in the order `tools/list` gives them.
pub const TOOLS: [&str; 6] = [
    "list_invoices",
    "get_invoice",
    "pay_invoice",
    "Pay_Invoice",
    "delete_everything",
    "echo",
];

/// The protocol revision [`client_main`] asks for in `initialize`.
pub const CLIENT_PROTOCOL_VERSION: &str = "2025-11-25";

/// How long [`client_main`] may take, start to finish, before it gives up.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// Most `tools/list` pages [`client_main`] follows, so a cursor loop ends.
pub const CLIENT_MAX_PAGES: usize = 1000;

/// How a [`TestMcpServer`] serves. The default is rmcp's: sessions, SSE
/// responses, one `tools/list` page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerOptions {
    /// Answer POSTs with `Content-Type: application/json` instead of an SSE
    /// stream. rmcp supports this only without sessions: needs `stateful`
    /// false.
    pub json_response: bool,
    /// Sessions: `initialize` is answered with an `Mcp-Session-Id` that every
    /// later request carries (rmcp's legacy session mode). Without, each
    /// request is served on its own and no session id is given.
    pub stateful: bool,
    /// Paginate `tools/list`: this many tools a page, `nextCursor` on all but
    /// the last. `None`: one page, no cursor. Must not be `Some(0)`.
    pub page_size: Option<usize>,
    /// Headers (name, value) every request must carry, once each, with
    /// exactly that value; else `401`. Empty: none required.
    pub required_headers: Vec<(String, String)>,
}

impl Default for McpServerOptions {
    fn default() -> Self {
        Self {
            json_response: false,
            stateful: true,
            page_size: None,
            required_headers: Vec::new(),
        }
    }
}

/// The tools only the stdio server has ([`stdio_server_main`]).
pub const STDIO_TOOLS: [&str; 5] = ["env_digest", "list_dir", "exit", "connect", "hog"];

/// A `tools/call` that reached the server.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    /// `params.name`, as received (also for a tool the server does not have).
    pub tool: String,
    /// `params.arguments` as received; `Value::Null` when absent.
    pub arguments: Value,
}

/// A real MCP server (rmcp, Streamable HTTP) on `127.0.0.1`, with the
/// invoice tools listed in the [module docs](self). Stopped on drop.
#[derive(Debug)]
pub struct TestMcpServer {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<RecordedCall>>>,
    shutdown: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

impl TestMcpServer {
    /// Binds `127.0.0.1:0` and serves MCP at [`MCP_PATH`] from a thread of
    /// its own with its own multi-thread runtime, so the caller needs no
    /// runtime.
    ///
    /// # Errors
    ///
    /// Invalid options (`json_response` with `stateful`, or a page size of
    /// 0) as [`io::ErrorKind::InvalidInput`]; failing to bind, build the
    /// runtime or spawn the thread.
    pub fn start(options: McpServerOptions) -> io::Result<TestMcpServer> {
        if options.json_response && options.stateful {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "rmcp answers with application/json only without sessions: \
                 json_response needs stateful: false",
            ));
        }
        if options.page_size == Some(0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "page_size must be at least 1",
            ));
        }

        let listener = StdTcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("test-mcp-server")
            .enable_all()
            .build()?;

        let calls = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::new(Shared {
            tools: tools(),
            page_size: options.page_size,
            calls: Arc::clone(&calls),
            stdio: false,
        });
        let shutdown = CancellationToken::new();
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(options.stateful)
            .with_json_response(options.json_response)
            .disable_allowed_hosts()
            .with_cancellation_token(shutdown.child_token());
        let service = StreamableHttpService::new(
            move || {
                Ok(InvoiceServer {
                    shared: Arc::clone(&shared),
                })
            },
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let required = Arc::new(options.required_headers);
        let router = axum::Router::new()
            .route_service(MCP_PATH, service)
            .layer(axum::middleware::from_fn_with_state(required, authorize));

        let stop = shutdown.clone();
        let thread = std::thread::Builder::new()
            .name("test-mcp-server".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(error) => {
                            eprintln!("test MCP server: cannot use its listener: {error}");
                            return;
                        }
                    };
                    tokio::select! {
                        result = axum::serve(listener, router) => {
                            if let Err(error) = result {
                                eprintln!("test MCP server stopped: {error}");
                            }
                        }
                        () = stop.cancelled() => {}
                    }
                });
                // Open connections (an SSE stream, say) are dropped, not
                // waited for.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;

        Ok(TestMcpServer {
            addr,
            calls,
            shutdown,
            thread: Some(thread),
        })
    }

    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{MCP_PATH}", self.addr)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every `tools/call` that reached the server so far, in order: those
    /// for tools it has, whatever their arguments, and those for names it
    /// does not have.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for TestMcpServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Lets a request through only if it carries every required header once,
/// with its value.
async fn authorize(
    axum::extract::State(required): axum::extract::State<Arc<Vec<(String, String)>>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let carries = |(name, value): &(String, String)| {
        let mut values = request.headers().get_all(name.as_str()).iter();
        values
            .next()
            .is_some_and(|v| v.as_bytes() == value.as_bytes())
            && values.next().is_none()
    };
    if required.iter().all(carries) {
        return next.run(request).await;
    }
    let refused = [
        ("www-authenticate", r#"Bearer error="invalid_token""#),
        ("content-type", "application/json"),
    ];
    let body = r#"{"error":"invalid_token","error_description":"missing or wrong credentials"}"#;
    (axum::http::StatusCode::UNAUTHORIZED, refused, body).into_response()
}

/// What every session's handler shares.
#[derive(Debug)]
struct Shared {
    tools: Vec<Tool>,
    page_size: Option<usize>,
    calls: Arc<Mutex<Vec<RecordedCall>>>,
    /// Served over stdio: the [`STDIO_TOOLS`] too, and every call said on
    /// stderr.
    stdio: bool,
}

/// The rmcp handler: one per session (or per request, without sessions).
#[derive(Debug, Clone)]
struct InvoiceServer {
    shared: Arc<Shared>,
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn no_arguments() -> JsonObject {
    object(json!({"type": "object", "properties": {}, "additionalProperties": false}))
}

fn one_string(name: &str, description: &str) -> JsonObject {
    object(json!({
        "type": "object",
        "properties": {name: {"type": "string", "description": description}},
        "required": [name],
        "additionalProperties": false,
    }))
}

fn tools() -> Vec<Tool> {
    let invoice_id = || one_string("invoice_id", "The invoice's id, e.g. INV-0042");
    vec![
        Tool::new(
            "list_invoices",
            "List the open invoices' ids",
            no_arguments(),
        ),
        Tool::new("get_invoice", "Show one invoice", invoice_id()),
        Tool::new("pay_invoice", "Pay one invoice", invoice_id()),
        Tool::new(
            "Pay_Invoice",
            "Pay one invoice (a case variant of pay_invoice)",
            invoice_id(),
        ),
        Tool::new("delete_everything", "Delete every invoice", no_arguments()),
        Tool::new(
            "echo",
            "Return the text given",
            one_string("text", "Any text"),
        ),
    ]
}

fn stdio_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "env_digest",
            "Whether an environment variable is set, and the SHA-256 of its value",
            one_string("name", "The variable's name"),
        ),
        Tool::new(
            "list_dir",
            "The names in a directory",
            one_string("path", "The directory"),
        ),
        Tool::new(
            "exit",
            "Exit at once, answering nothing",
            one_string("code", "The exit status"),
        ),
        Tool::new(
            "connect",
            "Open a tunnel to a host's port 443 through the proxy in HTTPS_PROXY; \
             `dns:<host>` looks the host up instead and connects to what it resolves to",
            one_string("host", "The host name"),
        ),
        Tool::new(
            "hog",
            "Take this many MiB of memory, then let go of it",
            one_string("mib", "How many MiB, as a string"),
        ),
    ]
}

/// `hog`: takes `mib` MiB, every page touched (a memory limit ends the
/// process first).
fn hog(mib: usize) -> CallToolResponse {
    let held: Vec<Vec<u8>> = (0..mib).map(|_| vec![1u8; 1 << 20]).collect();
    text_result(format!("held {} MiB", held.len()))
}

/// `connect`: `dns:<host>` connects to what the name resolves to (no
/// proxy), anything else through the proxy ([`tunnel`]).
async fn resolve_or_tunnel(host: &str) -> Result<String, String> {
    match host.strip_prefix("dns:") {
        Some(name) => resolved(name).await,
        None => tunnel(host).await,
    }
}

/// The first address `name` resolves to, and what the host said on it.
async fn resolved(name: &str) -> Result<String, String> {
    use tokio::io::AsyncBufReadExt as _;
    let talk = async {
        let address = tokio::net::lookup_host((name, 443))
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))?;
        let stream = tokio::net::TcpStream::connect(address).await?;
        let mut first = String::new();
        tokio::io::BufReader::new(stream)
            .read_line(&mut first)
            .await?;
        Ok::<String, std::io::Error>(format!("resolved: {address}\nhost: {}", first.trim_end()))
    };
    match tokio::time::timeout(Duration::from_secs(10), talk).await {
        Ok(Ok(said)) => Ok(said),
        Ok(Err(error)) => Err(format!("{name}: {error}")),
        Err(_) => Err(format!("{name}: no answer within 10 s")),
    }
}

/// `connect`: what the proxy, then the host, said.
async fn tunnel(host: &str) -> Result<String, String> {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let proxy = std::env::var("HTTPS_PROXY").map_err(|_| "HTTPS_PROXY is not set".to_string())?;
    let addr = proxy
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let talk = async {
        let stream = tokio::net::TcpStream::connect(&addr).await?;
        let mut stream = tokio::io::BufReader::new(stream);
        let request = format!("CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n");
        stream.get_mut().write_all(request.as_bytes()).await?;
        let mut status = String::new();
        stream.read_line(&mut status).await?;
        let mut said = format!("proxy: {}", status.trim_end());
        loop {
            let mut header = String::new();
            if stream.read_line(&mut header).await? == 0 || header.trim().is_empty() {
                break;
            }
        }
        if status.split_whitespace().nth(1) == Some("200") {
            let mut first = String::new();
            stream.read_line(&mut first).await?;
            said.push_str(&format!("\nhost: {}", first.trim_end()));
        }
        Ok::<String, std::io::Error>(said)
    };
    match tokio::time::timeout(Duration::from_secs(10), talk).await {
        Ok(Ok(said)) => Ok(said),
        Ok(Err(error)) => Err(format!("{addr}: {error}")),
        Err(_) => Err(format!("{addr}: no answer within 10 s")),
    }
}

/// `env_digest`: never the value itself.
fn env_digest(name: &str) -> String {
    use sha2::Digest as _;
    match std::env::var_os(name) {
        Some(value) => {
            let digest = sha2::Sha256::digest(value.as_encoded_bytes());
            format!("set sha256:{}", hex::encode(digest))
        }
        None => "unset".into(),
    }
}

fn list_dir(path: &str) -> CallToolResponse {
    match std::fs::read_dir(path) {
        Ok(entries) => {
            let mut names: Vec<String> = entries
                .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect();
            names.sort();
            text_result(names.join("\n"))
        }
        Err(error) => tool_error(format!("{path}: {error}")),
    }
}

fn text_result(text: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

fn tool_error(text: impl Into<String>) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

/// `arguments[name]` as a string, or the tool error saying it is not one.
fn string_argument<'a>(arguments: Option<&'a JsonObject>, name: &str) -> Result<&'a str, String> {
    arguments
        .and_then(|arguments| arguments.get(name))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("invalid arguments: {name} must be a string"))
}

impl InvoiceServer {
    fn record(&self, request: &CallToolRequestParams) {
        let arguments = request.arguments.clone().map_or(Value::Null, Value::Object);
        self.shared
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(RecordedCall {
                tool: request.name.to_string(),
                arguments,
            });
    }
}

impl ServerHandler for InvoiceServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("constle-testkit-mcp-server", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = &self.shared.tools;
        let Some(page_size) = self.shared.page_size else {
            return Ok(ListToolsResult::with_all_items(tools.clone()));
        };
        let start = match request.and_then(|params| params.cursor) {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .ok()
                .filter(|&start| start > 0 && start < tools.len())
                .ok_or_else(|| {
                    ErrorData::invalid_params(format!("invalid cursor: {cursor:?}"), None)
                })?,
        };
        let end = start.saturating_add(page_size).min(tools.len());
        let mut result = ListToolsResult::with_all_items(tools[start..end].to_vec());
        if end < tools.len() {
            result.next_cursor = Some(end.to_string());
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.record(&request);
        let arguments = request.arguments.as_ref();
        if self.shared.stdio {
            eprintln!("stdio server: call {}", request.name);
            if request.name == "connect" {
                return Ok(match string_argument(arguments, "host") {
                    Ok(host) => match resolve_or_tunnel(host).await {
                        Ok(said) => text_result(said),
                        Err(message) => tool_error(message),
                    },
                    Err(message) => tool_error(message),
                });
            }
            if let Some(response) = stdio_call(&request.name, arguments) {
                return Ok(response);
            }
        }
        let response = match request.name.as_ref() {
            "list_invoices" => text_result("INV-0042,INV-0043"),
            "get_invoice" => match string_argument(arguments, "invoice_id") {
                Ok(id) => text_result(format!("invoice {id}: 120.00 EUR")),
                Err(message) => tool_error(message),
            },
            "pay_invoice" | "Pay_Invoice" => match string_argument(arguments, "invoice_id") {
                Ok(id) => text_result(format!("paid {id}")),
                Err(message) => tool_error(message),
            },
            "delete_everything" => text_result("deleted everything"),
            "echo" => match string_argument(arguments, "text") {
                Ok(text) => text_result(text),
                Err(message) => tool_error(message),
            },
            other => {
                return Err(ErrorData::invalid_params(
                    Cow::Owned(format!("unknown tool: {other}")),
                    None,
                ));
            }
        };
        Ok(response)
    }
}

/// The stdio server's own tools; `None` for any other name.
fn stdio_call(name: &str, arguments: Option<&JsonObject>) -> Option<CallToolResponse> {
    let response = match name {
        "env_digest" => match string_argument(arguments, "name") {
            Ok(name) => text_result(env_digest(name)),
            Err(message) => tool_error(message),
        },
        "list_dir" => match string_argument(arguments, "path") {
            Ok(path) => list_dir(path),
            Err(message) => tool_error(message),
        },
        "exit" => match string_argument(arguments, "code").map(str::parse::<i32>) {
            Ok(Ok(code)) => std::process::exit(code),
            _ => tool_error("invalid arguments: code must be a number, as a string"),
        },
        "hog" => match string_argument(arguments, "mib").map(str::parse::<usize>) {
            Ok(Ok(mib)) => hog(mib),
            _ => tool_error("invalid arguments: mib must be a number, as a string"),
        },
        _ => return None,
    };
    Some(response)
}

/// The invoice server over stdin and stdout (newline-delimited JSON-RPC,
/// rmcp's stdio transport), with the [`STDIO_TOOLS`] too, until stdin
/// closes; for a test binary whose `main` dispatches a subcommand here.
/// Says `stdio server: ready` and each call (`stdio server: call TOOL`)
/// on stderr. `args` are ignored (a test may add a marker to find the
/// process by). Builds its own runtime; call it with none running.
pub fn stdio_server_main(_args: &[String]) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("stdio server: cannot build a runtime: {error}");
            return EXIT_FAILED;
        }
    };
    let mut tools = tools();
    tools.extend(stdio_tools());
    let server = InvoiceServer {
        shared: Arc::new(Shared {
            tools,
            page_size: None,
            calls: Arc::new(Mutex::new(Vec::new())),
            stdio: true,
        }),
    };
    let served = runtime.block_on(async move {
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(std::io::Error::other)?;
        eprintln!("stdio server: ready");
        running.waiting().await.map_err(std::io::Error::other)?;
        Ok::<(), std::io::Error>(())
    });
    // Stdin's blocking read would hold the runtime's shutdown.
    runtime.shutdown_background();
    match served {
        Ok(()) => EXIT_OK,
        Err(error) => {
            eprintln!("stdio server: {error}");
            EXIT_FAILED
        }
    }
}

/// Exit code of [`client_main`]: done (`list`, or a `call` with a result).
pub const EXIT_OK: i32 = 0;
/// Exit code of [`client_main`]: transport or other failure (`failed: …` on
/// stderr).
pub const EXIT_FAILED: i32 = 1;
/// Exit code of [`client_main`]: bad command line (usage on stderr).
pub const EXIT_USAGE: i32 = 2;
/// Exit code of [`client_main`]: the request got a JSON-RPC error
/// (`error: <code> <message>`).
pub const EXIT_RPC_ERROR: i32 = 3;
/// Exit code of [`client_main`]: the tool result had `isError: true`
/// (`tool_error: <text>`).
pub const EXIT_TOOL_ERROR: i32 = 4;

const USAGE: &str = "usage: mcp-client list URL\n       mcp-client call URL TOOL JSON_ARGS\n       \
                     mcp-client race URL TOOL JSON_ARGS [URL TOOL JSON_ARGS]...";

/// A command for [`client_main`].
enum Command {
    List {
        url: String,
    },
    Call(Call),
    /// The first call; the moment its answer arrives, all the others.
    Race {
        first: Call,
        then: Vec<Call>,
    },
}

/// One `tools/call`: where, which tool, with what.
struct Call {
    url: String,
    tool: String,
    arguments: JsonObject,
}

fn parse(args: &[String]) -> Result<Command, String> {
    match args {
        [command, url] if command == "list" => Ok(Command::List { url: url.clone() }),
        [command, call @ ..] if command == "call" && call.len() == 3 => {
            Ok(Command::Call(parse_call(call)?))
        }
        [command, calls @ ..] if command == "race" && !calls.is_empty() && calls.len() % 3 == 0 => {
            let mut calls = calls.chunks(3).map(parse_call);
            let first = calls.next().unwrap_or_else(|| Err(USAGE.into()))?;
            let then = calls.collect::<Result<_, _>>()?;
            Ok(Command::Race { first, then })
        }
        _ => Err(USAGE.into()),
    }
}

/// `URL TOOL JSON_ARGS`.
fn parse_call(args: &[String]) -> Result<Call, String> {
    let [url, tool, json] = args else {
        return Err(USAGE.into());
    };
    let arguments = match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(arguments)) => arguments,
        Ok(_) => return Err("JSON_ARGS must be a JSON object".into()),
        Err(error) => return Err(format!("JSON_ARGS is not JSON: {error}")),
    };
    Ok(Call {
        url: url.clone(),
        tool: tool.clone(),
        arguments,
    })
}

/// What a command ended with, short of a failure.
enum Outcome {
    /// Lines for stdout, exit 0.
    Done(Vec<String>),
    /// A JSON-RPC error: code, message, and `data.reason` if it has one.
    RpcError(i32, String, Option<String>),
    /// A tool result with `isError: true`: its first text.
    ToolError(String),
}

/// A real MCP client on the command line, for a test binary whose `main`
/// dispatches `argv[1] == "mcp-client"` here with the arguments after it.
/// Builds its own current-thread runtime; call it with none running.
///
/// - `list URL`: initializes, follows every `tools/list` page (up to
///   [`CLIENT_MAX_PAGES`]) and prints each tool name on a line of its own.
/// - `call URL TOOL JSON_ARGS`: initializes and calls `TOOL` with the JSON
///   object `JSON_ARGS`. Prints `result: <first text content>` (exit
///   [`EXIT_OK`]); on a JSON-RPC error `error: <code> <message>`, then
///   `reason: <data.reason>` when it has one (exit [`EXIT_RPC_ERROR`]); on
///   a result with `isError: true`
///   `tool_error: <text>` (exit [`EXIT_TOOL_ERROR`]).
/// - `race URL TOOL JSON_ARGS [URL TOOL JSON_ARGS]...`: initializes a
///   session for every call first, makes the first call, and the moment its
///   answer arrives sends all the others at once, each on its own session
///   (and connection). Prints one line per call, in command-line order,
///   `<n>: ` and what `call` would print (`failed: …` included, on stdout);
///   exits as the first call would.
///
/// Anything else that goes wrong (connecting, HTTP, initialize, more than
/// [`CLIENT_TIMEOUT`]) prints `failed: <message>` to stderr, exit
/// [`EXIT_FAILED`]; a bad command line prints the usage, exit
/// [`EXIT_USAGE`].
///
/// The lifecycle is rmcp's: `initialize` (asking for
/// [`CLIENT_PROTOCOL_VERSION`]), `notifications/initialized`, the request,
/// then closing the session (`DELETE` when the server gave one). HTTP is
/// reqwest with its proxies from the environment: `HTTP_PROXY` is used
/// unless `NO_PROXY` names the host (e.g. `NO_PROXY=127.0.0.1,localhost`).
/// An expired session is reported, not silently renewed.
pub fn client_main(args: &[String]) -> i32 {
    let command = match parse(args) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("{message}");
            return EXIT_USAGE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("failed: cannot build a runtime: {error}");
            return EXIT_FAILED;
        }
    };
    let numbered = matches!(command, Command::Race { .. });
    let outcomes = runtime.block_on(async {
        tokio::time::timeout(CLIENT_TIMEOUT, run(command))
            .await
            .unwrap_or_else(|_| vec![Err(format!("timed out after {CLIENT_TIMEOUT:?}"))])
    });
    let mut stdout = io::stdout().lock();
    let mut codes = Vec::new();
    for (n, outcome) in outcomes.into_iter().enumerate() {
        let (lines, code) = shown(outcome);
        for line in lines {
            if numbered {
                let _ = writeln!(stdout, "{n}: {line}");
            } else if code == EXIT_FAILED {
                eprintln!("{line}");
            } else {
                let _ = writeln!(stdout, "{line}");
            }
        }
        codes.push(code);
    }
    let _ = stdout.flush();
    codes.first().copied().unwrap_or(EXIT_FAILED)
}

/// The lines an outcome prints and the exit code it stands for.
fn shown(outcome: Result<Outcome, String>) -> (Vec<String>, i32) {
    match outcome {
        Ok(Outcome::Done(lines)) => (lines, EXIT_OK),
        Ok(Outcome::RpcError(code, message, reason)) => {
            let mut lines = vec![format!("error: {code} {message}")];
            lines.extend(reason.map(|reason| format!("reason: {reason}")));
            (lines, EXIT_RPC_ERROR)
        }
        Ok(Outcome::ToolError(text)) => (vec![format!("tool_error: {text}")], EXIT_TOOL_ERROR),
        Err(message) => (vec![format!("failed: {message}")], EXIT_FAILED),
    }
}

/// A JSON-RPC error as an outcome; any other service error as a failure.
fn classify(error: ServiceError) -> Result<Outcome, String> {
    match error {
        ServiceError::McpError(error) => {
            let reason = error
                .data
                .as_ref()
                .and_then(|data| data.get("reason"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            Ok(Outcome::RpcError(
                error.code.0,
                error.message.into(),
                reason,
            ))
        }
        other => Err(other.to_string()),
    }
}

/// What each call ended with, in command-line order (a list is one call).
async fn run(command: Command) -> Vec<Result<Outcome, String>> {
    match command {
        Command::List { url } => vec![with_client(&url, async |client| list(client).await).await],
        Command::Call(call) => {
            let outcome = with_client(&call.url, async |client| {
                call_tool(client, call.tool, call.arguments).await
            });
            vec![outcome.await]
        }
        Command::Race { first, then } => race(first, then)
            .await
            .unwrap_or_else(|failure| vec![Err(failure)]),
    }
}

/// Connects to `url`, runs `what`, and ends the session.
async fn with_client(
    url: &str,
    what: impl AsyncFnOnce(&Client) -> Result<Outcome, String>,
) -> Result<Outcome, String> {
    let client = connect(url).await?;
    let outcome = what(&client).await;
    close(client).await;
    outcome
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>;

/// A client that has been through `initialize` with the server at `url`.
async fn connect(url: &str) -> Result<Client, String> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned())
            .reinit_on_expired_session(false),
    );
    let mut config = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("constle-testkit-mcp-client", env!("CARGO_PKG_VERSION")),
    );
    config.protocol_version = ProtocolVersion::V_2025_11_25;
    config
        .serve(transport)
        .await
        .map_err(|error| format!("initialize: {error}"))
}

/// Ends the session (DELETE); its failure changes no outcome.
async fn close(client: Client) {
    let _ = client.cancel().await;
}

async fn list(client: &Client) -> Result<Outcome, String> {
    let mut names = Vec::new();
    let mut cursor = None;
    for _ in 0..CLIENT_MAX_PAGES {
        let params =
            cursor.map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let page = match client.list_tools(params).await {
            Ok(page) => page,
            Err(error) => return classify(error),
        };
        names.extend(page.tools.into_iter().map(|tool| tool.name.into_owned()));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(Outcome::Done(names)),
        }
    }
    Err(format!("more than {CLIENT_MAX_PAGES} tools/list pages"))
}

async fn call_tool(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    tool: String,
    arguments: JsonObject,
) -> Result<Outcome, String> {
    let params = CallToolRequestParams::new(tool).with_arguments(arguments);
    let result = match peer.call_tool(params).await {
        Ok(result) => result,
        Err(error) => return classify(error),
    };
    let text = result
        .content
        .iter()
        .find_map(|content| content.as_text())
        .map(|text| text.text.clone())
        .unwrap_or_default();
    if result.is_error == Some(true) {
        Ok(Outcome::ToolError(text))
    } else {
        Ok(Outcome::Done(vec![format!("result: {text}")]))
    }
}

/// Every session is set up before the first call, so that nothing but the
/// calls themselves stands between the first answer and the others.
async fn race(first: Call, then: Vec<Call>) -> Result<Vec<Result<Outcome, String>>, String> {
    let mut clients = Vec::with_capacity(then.len() + 1);
    for call in std::iter::once(&first).chain(&then) {
        clients.push(connect(&call.url).await?);
    }
    let mut outcomes = vec![call_tool(&clients[0], first.tool, first.arguments).await];
    let racing: Vec<_> = then
        .into_iter()
        .zip(&clients[1..])
        .map(|(call, client)| {
            let peer = client.peer().clone();
            tokio::spawn(async move { call_tool(&peer, call.tool, call.arguments).await })
        })
        .collect();
    for call in racing {
        outcomes.push(call.await.map_err(|error| error.to_string())?);
    }
    for client in clients {
        close(client).await;
    }
    Ok(outcomes)
}
