//! What the MCP gate adds to an ungated `tools/call`: the same client sends
//! the same call to a minimal MCP server directly and through the gate, at
//! fixed concurrency, and the two are compared in the same run.
//!
//! Everything runs in this process, on loopback only:
//!
//! - the upstream: a hyper HTTP/1.1 server on 127.0.0.1 on its own
//!   current-thread Tokio runtime (thread `bench-server`), answering every
//!   POST with `{"jsonrpc":"2.0","id":<its id>,"result":{"content":[{"type":
//!   "text","text":"ok"}]}}` as `application/json`. It does as little as a
//!   server can, so what differs between the paths is the gate. With
//!   `--server-delay-us`, it first waits on a blocking thread (without
//!   using CPU), as a server whose tools do real work elsewhere would;
//! - the gate, built as `constle run` builds it: an Agentfile parsed by
//!   [`constle_manifest::parse_str`], then `Gate::new(&server,
//!   ServerPolicy::new(&server, &gates), &env)?.serve(listener)` on one
//!   current-thread runtime (thread `bench-gate`), listening on a Unix
//!   socket (as in production) and on 127.0.0.1 TCP (to tell the socket
//!   type from the gate's own cost). With `--multi-thread`, also a gate on
//!   a two-worker multi-thread runtime (TCP, threads `bench-gate-mt`), to
//!   see what the single thread costs. With `--by-name`, the Agentfile
//!   names the server `localhost` instead of 127.0.0.1, as Agentfiles
//!   name their servers, so the gate has the name resolved to connect;
//! - with `--relays`, two plain relays without any policy, each on one
//!   current-thread runtime (TCP): one on a general-purpose stack (axum
//!   server, reqwest client; threads `bench-gate-ax`) and one on bare hyper
//!   (threads `bench-gate-hy`), the stack the gate itself is built on. They
//!   read the body, post it upstream and relay the answer: what any HTTP
//!   hop costs, the floor under the gate;
//! - the relay: the sandbox's own (`constle_sandbox::splice_bidirectional`,
//!   as `sandbox-init` runs it: accept on 127.0.0.1 TCP, connect to the
//!   gate's Unix socket, splice both ways), on one current-thread runtime
//!   (thread `bench-relay`), in front of the gate's Unix socket: the whole
//!   path an agent's call takes, but the sandbox's namespaces and system
//!   call filter;
//! - the load: a hyper HTTP/1.1 client on its own current-thread runtime
//!   (thread `bench-client`) with `-c` requests in flight, one per
//!   connection. Each request is timed from its send to the last byte of
//!   the answer, and its answer checked (status 200, its own id, the text
//!   `ok`).
//!
//! Three ways to connect, each a table of its own with its own server and
//! direct path (`--mode`):
//!
//! - keep-alive: each connection is opened before the round and carries
//!   request after request, and so do the gate's connections to the
//!   server;
//! - connection per request, as Python's `urllib` against an HTTP/1.0
//!   server: the client opens a connection for each request (timed from
//!   before the connect) and says `Connection: close`, and the server
//!   closes every connection after its answer, so the gate, too, connects
//!   anew for each call;
//! - the client's connection per request only, as `urllib` against an
//!   HTTP/1.1 server: the client as above, but the server keeps its
//!   connections alive, so the gate's pooled connections to it serve call
//!   after call whatever connection each came in on.
//!
//! For each way in turn, after a warm-up of each path, `-r` rounds: in each, every path runs for
//! `-d` seconds on fresh client connections, direct first in even rounds
//! and last in odd ones, so gate and direct rounds alternate and drift on
//! the shared machine hits both. Per path, the table gives the median over
//! rounds of requests/s, p50 and p99; against direct, the median over
//! rounds of each gate round's throughput ratio and latency deltas to the
//! direct round of the same round (with the range over rounds). It also
//! gives the CPU time per request of each thread group (client, gate or
//! relay, server; from `/proc/self/task/*/schedstat`; the sandbox relay is
//! a group of its own) and the CPU cores
//! busy in all, which say where the time goes (percentiles and CPU time
//! as `constle_testkit::bench` defines them). The aims (from the issue): at most
//! 0.2 ms added at p50 and 1 ms at p99, and 80% of direct throughput or
//! better. A JSON line with the same numbers ends the output.
//!
//! `bench/gate.sh` runs this in release; `-h` lists the options.

#![forbid(unsafe_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up must stop"
)]

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use constle_mcp_gate::{Gate, ServerPolicy};
use constle_testkit::bench::{Process, Samples, thread_cpu};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONNECTION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};

const USAGE: &str = "\
usage: gate [-r ROUNDS] [-d SECONDS] [-c CONCURRENCY] [-w SECONDS] [--multi-thread] [--relays]
            [--server-delay-us US] [--by-name]
            [--mode keep-alive|per-request|client-per-request|both|all]
  -r ROUNDS        measured rounds of each path, alternating (default 5)
  -d SECONDS       length of one round of one path (default 3)
  -c CONCURRENCY   requests in flight, one on each connection (default 8)
  -w SECONDS       warm-up of each path before the rounds (default 1)
  --multi-thread   also a gate on a two-worker multi-thread runtime (TCP)
  --relays         also two policy-free relays (axum+reqwest, bare hyper): the floor
  --server-delay-us US  the upstream waits US µs (a sleeping thread, not CPU) before
                   answering, like a server whose tools work elsewhere (default 0:
                   the gate's cost alone)
  --by-name        the gate's Agentfile names the server localhost, not 127.0.0.1
  --mode MODE      keep-alive connections, a connection per request (the client's, and the
                   server closing each: as urllib against an HTTP/1.0 server), the client's
                   connection per request only (the server keeping its own alive: urllib
                   against an HTTP/1.1 server), both of the first two (the default), or all
                   three; each a table with its own server and direct path";

/// The tool called: declared, not gated.
const TOOL: &str = "list_invoices";

/// The approver key the Agentfile needs once a tool is gated (the W3C
/// did:key example); nothing is put to an approver here.
const APPROVER: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

/// The aims from the issue.
const AIM_P50_MS: f64 = 0.2;
const AIM_P99_MS: f64 = 1.0;
const AIM_THROUGHPUT: f64 = 0.8;

struct Config {
    rounds: usize,
    round: Duration,
    concurrency: usize,
    warmup: Duration,
    multi_thread: bool,
    relays: bool,
    server_delay: Duration,
    by_name: bool,
    modes: Vec<Mode>,
}

fn config() -> Result<Config, String> {
    let mut config = Config {
        rounds: 5,
        round: Duration::from_secs(3),
        concurrency: 8,
        warmup: Duration::from_secs(1),
        multi_thread: false,
        relays: false,
        server_delay: Duration::ZERO,
        by_name: false,
        modes: vec![Mode::KeepAlive, Mode::PerRequest],
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // `cargo bench` passes it to every bench target.
            "--bench" => {}
            "-r" => config.rounds = count(&arg, args.next())?,
            "-c" => config.concurrency = count(&arg, args.next())?,
            "-d" => config.round = seconds(&arg, args.next())?,
            "-w" => config.warmup = seconds(&arg, args.next())?,
            "--multi-thread" => config.multi_thread = true,
            "--mode" => config.modes = modes(args.next())?,
            "--relays" => config.relays = true,
            "--by-name" => config.by_name = true,
            "--server-delay-us" => {
                config.server_delay = Duration::from_micros(
                    count(&arg, args.next())?
                        .try_into()
                        .map_err(|_| "too long a delay")?,
                );
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(config)
}

fn modes(value: Option<String>) -> Result<Vec<Mode>, String> {
    match value.as_deref() {
        Some("keep-alive") => Ok(vec![Mode::KeepAlive]),
        Some("per-request") => Ok(vec![Mode::PerRequest]),
        Some("client-per-request") => Ok(vec![Mode::ClientPerRequest]),
        Some("both") => Ok(vec![Mode::KeepAlive, Mode::PerRequest]),
        Some("all") => Ok(vec![
            Mode::KeepAlive,
            Mode::PerRequest,
            Mode::ClientPerRequest,
        ]),
        _ => Err("--mode needs keep-alive, per-request, client-per-request, both or all".into()),
    }
}

/// How the client, and the server, treat connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Connections carry request after request.
    KeepAlive,
    /// A connection per request: the client's, and the server closes each.
    PerRequest,
    /// The client's connection per request; the server keeps its alive.
    ClientPerRequest,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::KeepAlive => "keep-alive connections",
            Mode::PerRequest => "a connection per request (client and server)",
            Mode::ClientPerRequest => "the client's connection per request (server keep-alive)",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Mode::KeepAlive => "keep_alive",
            Mode::PerRequest => "connection_per_request",
            Mode::ClientPerRequest => "client_connection_per_request",
        }
    }

    /// Whether the client opens a connection for each request.
    fn client_connects_per_request(self) -> bool {
        self != Mode::KeepAlive
    }

    /// Whether the server keeps a connection open after its answer.
    fn server_keeps_alive(self) -> bool {
        self != Mode::PerRequest
    }
}

fn count(name: &str, value: Option<String>) -> Result<usize, String> {
    value
        .as_deref()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| (1..=10_000).contains(&n))
        .ok_or_else(|| format!("{name} needs a whole number from 1 to 10000"))
}

fn seconds(name: &str, value: Option<String>) -> Result<Duration, String> {
    value
        .as_deref()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && (0.1..=3600.0).contains(s))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{name} needs seconds from 0.1 to 3600"))
}

// ------------------------------------------------------------ the upstream

/// Starts the upstream MCP server on its own thread, answering after
/// `delay` and, unless `mode` keeps server connections alive, closing each
/// connection after its answer (as an HTTP/1.0 server does); returns its
/// address.
fn start_upstream(delay: Duration, mode: Mode) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("upstream address");
    std::thread::Builder::new()
        .name("bench-server".to_string())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name("bench-server")
                .build()
                .expect("the upstream's runtime");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("the upstream listener");
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .keep_alive(mode.server_keeps_alive())
                            .serve_connection(
                                TokioIo::new(stream),
                                hyper::service::service_fn(move |request| answer(request, delay)),
                            )
                            .await;
                    });
                }
            });
        })
        .expect("the upstream's thread");
    addr
}

/// The upstream's answer to any POST: a `tools/call` result with the
/// request's id.
async fn answer(
    request: Request<Incoming>,
    delay: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let id = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|mut message| message.get_mut("id").map(Value::take))
        .unwrap_or(Value::Null);
    if !delay.is_zero() {
        // A thread's sleep, not Tokio's timer, which rounds up to whole ms.
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(delay)).await;
    }
    let reply = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"ok"}}]}}}}"#
    );
    let mut response = Response::new(Full::new(Bytes::from(reply)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

// ---------------------------------------------------------------- the gate

fn agentfile(url: &str) -> String {
    format!(
        "name: bench\n\
         sandbox:\n  command: [agent]\n\
         mcp:\n  servers:\n    - id: accounting\n      url: {url}\n      tools: [{TOOL}, pay_invoice]\n\
         human_gates:\n  enabled: true\n  require_approval_for: [pay_invoice]\n  approver_pubkey: {APPROVER}\n"
    )
}

struct Gates {
    tcp: SocketAddr,
    multi_thread: Option<SocketAddr>,
}

/// Starts the gates in front of `upstream`: TCP and `socket` on one
/// current-thread runtime, and the multi-thread one if asked.
fn start_gates(upstream: SocketAddr, socket: &Path, config: &Config) -> Gates {
    let url = if config.by_name {
        format!("http://localhost:{}/mcp", upstream.port())
    } else {
        format!("http://{upstream}/mcp")
    };
    let manifest =
        constle_manifest::parse_str(&agentfile(&url), Path::new("/bench/agent.yaml"), &|_| None)
            .unwrap_or_else(|rejected| panic!("the bench Agentfile is refused:\n{rejected}"))
            .manifest;
    let server = manifest
        .mcp
        .server("accounting")
        .expect("the declared server");
    let gates = &manifest.human_gates;
    let gate = || Gate::new(server, ServerPolicy::new(server, gates), &|_| None).expect("a gate");

    let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the gate (TCP)");
    tcp.set_nonblocking(true).expect("nonblocking");
    let tcp_addr = tcp.local_addr().expect("the gate's address");
    let unix = std::os::unix::net::UnixListener::bind(socket).expect("bind the gate (Unix)");
    unix.set_nonblocking(true).expect("nonblocking");
    let (tcp_gate, unix_gate) = (gate(), gate());
    std::thread::Builder::new()
        .name("bench-gate".to_string())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name("bench-gate")
                .build()
                .expect("the gate's runtime");
            runtime.block_on(async move {
                let tcp = tokio::net::TcpListener::from_std(tcp).expect("TCP listener");
                let unix = tokio::net::UnixListener::from_std(unix).expect("Unix listener");
                let (tcp, unix) = tokio::join!(tcp_gate.serve(tcp), unix_gate.serve(unix));
                panic!("the gate stopped: TCP {tcp:?}, Unix {unix:?}");
            });
        })
        .expect("the gate's thread");

    let multi_thread = config.multi_thread.then(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the gate (MT)");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("the gate's address");
        let gate = gate();
        std::thread::Builder::new()
            .name("bench-gate-mt".to_string())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .thread_name("bench-gate-mt")
                    .build()
                    .expect("the gate's runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("TCP listener");
                    let result = gate.serve(listener).await;
                    panic!("the gate stopped: {result:?}");
                });
            })
            .expect("the gate's thread");
        addr
    });
    Gates {
        tcp: tcp_addr,
        multi_thread,
    }
}

// -------------------------------------------------------------- the relays

/// Binds 127.0.0.1:0 and runs `serve` on it on a current-thread runtime in
/// a thread named `name`; returns the address.
fn spawn_server<F, Fut>(name: &str, serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("address");
    let name = name.to_string();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name(name)
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                serve(tokio::net::TcpListener::from_std(listener).expect("a listener")).await;
            });
        })
        .expect("a thread");
    addr
}

/// A relay on a general-purpose stack (axum server, reqwest client, with
/// the settings the gate's client has), without any policy: body in, body
/// out.
fn start_axum_relay(upstream: SocketAddr) -> SocketAddr {
    spawn_server("bench-gate-ax", move |listener| async move {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .expect("a reqwest client");
        let url = reqwest::Url::parse(&format!("http://{upstream}/mcp")).expect("a URL");
        let app = axum::Router::new().fallback(move |body: Bytes| {
            let request = client
                .post(url.clone())
                .header(CONTENT_TYPE, "application/json")
                .header(ACCEPT, "application/json, text/event-stream")
                .body(body);
            async move {
                let Ok(upstream) = request.send().await else {
                    return axum::response::Response::new(axum::body::Body::empty());
                };
                let status = upstream.status();
                let body = upstream.bytes().await.unwrap_or_default();
                let mut response = axum::response::Response::new(axum::body::Body::from(body));
                *response.status_mut() = status;
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                response
            }
        });
        let _ = axum::serve(listener, app).await;
    })
}

type HyperClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// A relay on bare hyper (server and pooled client), without any policy.
fn start_hyper_relay(upstream: SocketAddr) -> SocketAddr {
    spawn_server("bench-gate-hy", move |listener| async move {
        let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
        connector.set_nodelay(true);
        let client: HyperClient =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        let uri: hyper::Uri = format!("http://{upstream}/mcp").parse().expect("a URI");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (client, uri) = (client.clone(), uri.clone());
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let (client, uri) = (client.clone(), uri.clone());
                async move { Ok::<_, Infallible>(hyper_relay(&client, uri, request).await) }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

async fn hyper_relay(
    client: &HyperClient,
    uri: hyper::Uri,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let fail = || {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::BAD_GATEWAY;
        response
    };
    let Ok(body) = request.into_body().collect().await else {
        return fail();
    };
    let Ok(upstream) = Request::post(uri)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json, text/event-stream")
        .body(Full::new(body.to_bytes()))
    else {
        return fail();
    };
    let Ok(answer) = client.request(upstream).await else {
        return fail();
    };
    let status = answer.status();
    let Ok(body) = answer.into_body().collect().await else {
        return fail();
    };
    let mut response = Response::new(Full::new(body.to_bytes()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

// ------------------------------------------------------- the sandbox relay

/// The sandbox's relay in front of the gate's Unix `socket`, as
/// `sandbox-init` runs it: each TCP connection to the returned address is
/// spliced to a new connection to the socket, both ways.
fn start_sandbox_relay(socket: PathBuf) -> SocketAddr {
    spawn_server("bench-relay", move |listener| async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let socket = socket.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                if let Ok(unix) = tokio::net::UnixStream::connect(&socket).await {
                    let _ = constle_sandbox::splice_bidirectional(&tcp, &unix).await;
                }
            });
        }
    })
}

// ---------------------------------------------------------------- the load

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Direct,
    GateTcp,
    GateUnix,
    SandboxRelayGateUnix,
    GateTcpMultiThread,
    RelayAxumReqwest,
    RelayHyper,
}

impl Route {
    fn label(self) -> &'static str {
        match self {
            Route::Direct => "direct TCP",
            Route::GateTcp => "gate TCP",
            Route::GateUnix => "gate Unix socket",
            Route::SandboxRelayGateUnix => "sandbox relay + gate Unix",
            Route::GateTcpMultiThread => "gate TCP, multi-thread rt",
            Route::RelayAxumReqwest => "relay axum+reqwest TCP",
            Route::RelayHyper => "relay bare hyper TCP",
        }
    }

    /// Whether the aims apply: a gate, not a baseline.
    fn is_gate(self) -> bool {
        matches!(
            self,
            Route::GateTcp
                | Route::GateUnix
                | Route::SandboxRelayGateUnix
                | Route::GateTcpMultiThread
        )
    }

    fn key(self) -> &'static str {
        match self {
            Route::Direct => "direct_tcp",
            Route::GateTcp => "gate_tcp",
            Route::GateUnix => "gate_unix",
            Route::SandboxRelayGateUnix => "sandbox_relay_gate_unix",
            Route::GateTcpMultiThread => "gate_tcp_multi_thread",
            Route::RelayAxumReqwest => "relay_axum_reqwest_tcp",
            Route::RelayHyper => "relay_hyper_tcp",
        }
    }
}

#[derive(Clone, Debug)]
enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(target: &Target) -> Result<Sender, String> {
    match target {
        Target::Tcp(addr) => {
            let stream = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|err| format!("connect (TCP): {err}"))?;
            stream.set_nodelay(true).expect("nodelay");
            handshake(stream).await
        }
        Target::Unix(path) => {
            let stream = tokio::net::UnixStream::connect(path)
                .await
                .map_err(|err| format!("connect (Unix): {err}"))?;
            handshake(stream).await
        }
    }
}

async fn handshake<T>(io: T) -> Result<Sender, String>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|err| format!("HTTP/1.1 handshake: {err}"))?;
    tokio::spawn(connection);
    Ok(sender)
}

/// Where one load task sends its requests.
enum Link {
    /// One connection, opened before the round, for every request.
    Kept(Sender),
    /// A connection of its own for each request, to this target.
    PerRequest(Target),
}

/// What one connection saw in one round.
#[derive(Default)]
struct Sample {
    latencies_ns: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl Sample {
    fn fail(&mut self, what: String) {
        self.errors += 1;
        self.first_error.get_or_insert(what);
    }
}

/// Sends calls over `link`, one at a time, until `until`. A connection per
/// request is timed from before its connect.
async fn load(mut link: Link, connection: u64, until: Instant) -> Sample {
    let mut sample = Sample::default();
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let id = connection * 1_000_000_000 + n;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{TOOL}","arguments":{{"month":"2025-01"}}}}}}"#
        );
        let mut request = Request::post("/mcp")
            .header(HOST, "127.0.0.1")
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18");
        if matches!(link, Link::PerRequest(_)) {
            request = request.header(CONNECTION, "close");
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .expect("a request");
        let start = Instant::now();
        let mut fresh;
        let sender = match &mut link {
            Link::Kept(sender) => sender,
            Link::PerRequest(target) => match connect(target).await {
                Ok(sender) => {
                    fresh = sender;
                    &mut fresh
                }
                Err(err) => {
                    sample.fail(err);
                    continue;
                }
            },
        };
        if let Err(err) = sender.ready().await {
            sample.fail(format!("connection closed: {err}"));
            break;
        }
        let response = match sender.send_request(request).await {
            Ok(response) => response,
            Err(err) => {
                sample.fail(format!("send: {err}"));
                break;
            }
        };
        let status = response.status();
        let body = match response.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(err) => {
                sample.fail(format!("body: {err}"));
                break;
            }
        };
        let elapsed = start.elapsed();
        let text = String::from_utf8_lossy(&body);
        if status == StatusCode::OK
            && text.contains(&format!(r#""id":{id}"#))
            && text.contains(r#""text":"ok""#)
        {
            sample
                .latencies_ns
                .push(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
        } else {
            sample.fail(format!("{status}: {text}"));
        }
    }
    sample
}

/// CPU time so far of each thread group, in ns.
#[derive(Clone, Copy, Debug, Default)]
struct Cpu {
    client: u64,
    relay: u64,
    gate: u64,
    server: u64,
}

impl Cpu {
    fn now() -> Cpu {
        let mut cpu = Cpu::default();
        for (name, time) in thread_cpu(Process::Current) {
            let ns = u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
            if name.starts_with("bench-client") {
                cpu.client += ns;
            } else if name.starts_with("bench-relay") {
                cpu.relay += ns;
            } else if name.starts_with("bench-gate") {
                cpu.gate += ns;
            } else if name.starts_with("bench-server") {
                cpu.server += ns;
            }
        }
        cpu
    }

    fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            client: self.client.saturating_sub(earlier.client),
            relay: self.relay.saturating_sub(earlier.relay),
            gate: self.gate.saturating_sub(earlier.gate),
            server: self.server.saturating_sub(earlier.server),
        }
    }
}

/// One path in one round.
#[derive(Clone, Debug)]
struct Measured {
    requests: u64,
    errors: u64,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// CPU µs per request: client, sandbox relay, gate, server.
    cpu_us: [f64; 4],
    /// CPU cores busy on average, all four groups.
    cores: f64,
    first_error: Option<String>,
}

async fn round(target: &Target, mode: Mode, concurrency: usize, length: Duration) -> Measured {
    let mut links = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        links.push(if mode.client_connects_per_request() {
            Link::PerRequest(target.clone())
        } else {
            Link::Kept(connect(target).await.expect("a connection"))
        });
    }
    let cpu_before = Cpu::now();
    let start = Instant::now();
    let until = start + length;
    let tasks: Vec<_> = links
        .into_iter()
        .zip(1u64..)
        .map(|(link, connection)| tokio::spawn(load(link, connection, until)))
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    for task in tasks {
        let sample = task.await.expect("a load task");
        latencies.extend(sample.latencies_ns);
        errors += sample.errors;
        first_error = first_error.or(sample.first_error);
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = Cpu::now().since(cpu_before);
    let latencies = Samples::new(latencies);
    let requests = latencies.len() as u64;
    let per_request = |ns: u64| ns as f64 / 1e3 / requests.max(1) as f64;
    Measured {
        requests,
        errors,
        rps: requests as f64 / wall,
        p50_ms: ms(latencies.median()),
        p99_ms: ms(latencies.percentile(99.0)),
        cpu_us: [
            per_request(cpu.client),
            per_request(cpu.relay),
            per_request(cpu.gate),
            per_request(cpu.server),
        ],
        cores: (cpu.client + cpu.relay + cpu.gate + cpu.server) as f64 / 1e9 / wall,
        first_error,
    }
}

/// Nanoseconds in ms; NaN for no value.
fn ms(ns: Option<u64>) -> f64 {
    ns.map_or(f64::NAN, |ns| ns as f64 / 1e6)
}

fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    Samples::new(values).median().unwrap_or(f64::NAN)
}

fn range(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values
        .into_iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

/// Every round of every path; `rounds[i][p]` is path `p` in round `i`.
async fn measure(config: &Config, mode: Mode, routes: &[(Route, Target)]) -> Vec<Vec<Measured>> {
    for (route, target) in routes {
        let warm = round(target, mode, config.concurrency, config.warmup).await;
        eprintln!(
            "warm-up {:<26} {:>8.0} req/s, {} errors",
            route.label(),
            warm.rps,
            warm.errors
        );
        if warm.requests == 0 {
            panic!(
                "{} answers no call correctly: {}",
                route.label(),
                warm.first_error.unwrap_or_default()
            );
        }
    }
    let mut rounds = Vec::with_capacity(config.rounds);
    for i in 0..config.rounds {
        let mut order: Vec<usize> = (0..routes.len()).collect();
        if i % 2 == 1 {
            order.reverse();
        }
        let mut measured = vec![None; routes.len()];
        for p in order {
            let (route, target) = &routes[p];
            let m = round(target, mode, config.concurrency, config.round).await;
            eprintln!(
                "round {}/{} {:<26} {:>8.0} req/s  p50 {:.3} ms  p99 {:.3} ms  CPU µs/req {}  {:.2} cores  {} errors",
                i + 1,
                config.rounds,
                route.label(),
                m.rps,
                m.p50_ms,
                m.p99_ms,
                cpu_columns(m.cpu_us),
                m.cores,
                m.errors
            );
            measured[p] = Some(m);
        }
        rounds.push(measured.into_iter().map(Option::unwrap).collect());
    }
    rounds
}

// ------------------------------------------------------------- the report

struct Summary {
    route: Route,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_us: [f64; 4],
    cores: f64,
    errors: u64,
    /// Against direct (None for direct itself): median and range over
    /// rounds of throughput ratio, +p50, +p99.
    versus: Option<Versus>,
}

struct Versus {
    throughput: f64,
    throughput_range: (f64, f64),
    p50_ms: f64,
    p50_range: (f64, f64),
    p99_ms: f64,
    p99_range: (f64, f64),
}

impl Versus {
    fn aims(&self) -> [(bool, String); 3] {
        [
            (
                self.p50_ms <= AIM_P50_MS,
                format!("+p50 {:.3} ms (aim <= {AIM_P50_MS} ms)", self.p50_ms),
            ),
            (
                self.p99_ms <= AIM_P99_MS,
                format!("+p99 {:.3} ms (aim <= {AIM_P99_MS} ms)", self.p99_ms),
            ),
            (
                self.throughput >= AIM_THROUGHPUT,
                format!(
                    "throughput {:.0}% of direct (aim >= {:.0}%)",
                    self.throughput * 100.0,
                    AIM_THROUGHPUT * 100.0
                ),
            ),
        ]
    }
}

fn summarize(routes: &[(Route, Target)], rounds: &[Vec<Measured>]) -> Vec<Summary> {
    let direct = routes
        .iter()
        .position(|(r, _)| *r == Route::Direct)
        .expect("direct is measured");
    routes
        .iter()
        .enumerate()
        .map(|(p, (route, _))| {
            let of = |f: &dyn Fn(&Measured) -> f64| median(rounds.iter().map(|r| f(&r[p])));
            let versus = (p != direct).then(|| {
                let pair = |f: &dyn Fn(&Measured, &Measured) -> f64| {
                    let values: Vec<f64> = rounds.iter().map(|r| f(&r[p], &r[direct])).collect();
                    (median(values.iter().copied()), range(values))
                };
                let (throughput, throughput_range) = pair(&|g, d| g.rps / d.rps);
                let (p50_ms, p50_range) = pair(&|g, d| g.p50_ms - d.p50_ms);
                let (p99_ms, p99_range) = pair(&|g, d| g.p99_ms - d.p99_ms);
                Versus {
                    throughput,
                    throughput_range,
                    p50_ms,
                    p50_range,
                    p99_ms,
                    p99_range,
                }
            });
            Summary {
                route: *route,
                rps: of(&|m| m.rps),
                p50_ms: of(&|m| m.p50_ms),
                p99_ms: of(&|m| m.p99_ms),
                cpu_us: [0, 1, 2, 3].map(|i| of(&|m| m.cpu_us[i])),
                cores: of(&|m| m.cores),
                errors: rounds.iter().map(|r| r[p].errors).sum(),
                versus,
            }
        })
        .collect()
}

/// CPU µs per request of client, sandbox relay, gate and server.
fn cpu_columns(cpu_us: [f64; 4]) -> String {
    let [client, relay, gate, server] = cpu_us;
    format!("{client:.1}/{relay:.1}/{gate:.1}/{server:.1}")
}

fn report(config: &Config, mode: Mode, summaries: &[Summary]) -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nMCP gate: an ungated tools/call, {} in flight over {}, \
         {} rounds x {:.1} s per path, alternating, after {:.1} s warm-up; {cpus} CPUs; \
         upstream answers after {} µs; the gate knows it as {}. \
         Medians over rounds; ratios and deltas are per round against the direct round \
         of the same round [range over rounds].\n",
        config.concurrency,
        mode.label(),
        config.rounds,
        config.round.as_secs_f64(),
        config.warmup.as_secs_f64(),
        config.server_delay.as_micros(),
        if config.by_name {
            "localhost"
        } else {
            "127.0.0.1"
        },
    );
    let _ = writeln!(
        out,
        "{:<26} {:>9} {:>8} {:>8}  {:>18}  {:>22}  {:>22}  {:>24} {:>6}",
        "path",
        "req/s",
        "p50 ms",
        "p99 ms",
        "throughput",
        "+p50 ms",
        "+p99 ms",
        "CPU µs/req cli/relay/gate/srv",
        "cores"
    );
    for s in summaries {
        let (throughput, p50, p99) = match &s.versus {
            None => ("100%".to_string(), "-".to_string(), "-".to_string()),
            Some(v) => (
                format!(
                    "{:.0}% [{:.0}-{:.0}]",
                    v.throughput * 100.0,
                    v.throughput_range.0 * 100.0,
                    v.throughput_range.1 * 100.0
                ),
                format!(
                    "{:+.3} [{:+.3},{:+.3}]",
                    v.p50_ms, v.p50_range.0, v.p50_range.1
                ),
                format!(
                    "{:+.3} [{:+.3},{:+.3}]",
                    v.p99_ms, v.p99_range.0, v.p99_range.1
                ),
            ),
        };
        let cpu = cpu_columns(s.cpu_us);
        let _ = writeln!(
            out,
            "{:<26} {:>9.0} {:>8.3} {:>8.3}  {:>18}  {:>22}  {:>22}  {:>24} {:>6.2}",
            s.route.label(),
            s.rps,
            s.p50_ms,
            s.p99_ms,
            throughput,
            p50,
            p99,
            cpu,
            s.cores
        );
    }
    let _ = writeln!(out, "\naims against direct:");
    for s in summaries.iter().filter(|s| s.route.is_gate()) {
        if let Some(v) = &s.versus {
            let aims = v.aims();
            let line: Vec<String> = aims
                .iter()
                .map(|(met, what)| format!("{what} {}", if *met { "met" } else { "MISSED" }))
                .collect();
            let _ = writeln!(out, "  {:<26} {}", s.route.label(), line.join("; "));
        }
    }
    let errors: u64 = summaries.iter().map(|s| s.errors).sum();
    if errors > 0 {
        let _ = writeln!(
            out,
            "\nWARNING: {errors} calls failed (see the round lines)"
        );
    }
    out
}

/// One table of the JSON line: a mode and its paths.
fn json_table(mode: Mode, summaries: &[Summary]) -> Value {
    let paths: Vec<Value> = summaries
        .iter()
        .map(|s| {
            let mut path = json!({
                "path": s.route.key(),
                "rps": s.rps,
                "p50_ms": s.p50_ms,
                "p99_ms": s.p99_ms,
                "cpu_us_per_request": {
                    "client": s.cpu_us[0],
                    "sandbox_relay": s.cpu_us[1],
                    "gate": s.cpu_us[2],
                    "server": s.cpu_us[3],
                },
                "cores": s.cores,
                "errors": s.errors,
            });
            if let Some(v) = &s.versus {
                let [p50, p99, throughput] = v.aims().map(|(met, _)| met);
                path["vs_direct"] = json!({
                    "throughput_ratio": v.throughput,
                    "throughput_ratio_range": [v.throughput_range.0, v.throughput_range.1],
                    "p50_delta_ms": v.p50_ms,
                    "p50_delta_ms_range": [v.p50_range.0, v.p50_range.1],
                    "p99_delta_ms": v.p99_ms,
                    "p99_delta_ms_range": [v.p99_range.0, v.p99_range.1],
                });
                if s.route.is_gate() {
                    path["vs_direct"]["aims_met"] =
                        json!({"p50": p50, "p99": p99, "throughput": throughput});
                }
            }
            path
        })
        .collect();
    json!({"mode": mode.key(), "paths": paths})
}

fn json_line(config: &Config, tables: Vec<Value>) -> Value {
    json!({
        "bench": "constle-mcp-gate/gate",
        "rounds": config.rounds,
        "round_seconds": config.round.as_secs_f64(),
        "warmup_seconds": config.warmup.as_secs_f64(),
        "concurrency": config.concurrency,
        "server_delay_us": config.server_delay.as_micros(),
        "server_by_name": config.by_name,
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "aims": {"p50_delta_ms": AIM_P50_MS, "p99_delta_ms": AIM_P99_MS, "throughput_ratio": AIM_THROUGHPUT},
        "tables": tables,
    })
}

/// The paths of one mode: its own server, and gates and relays in front
/// of it.
fn routes(config: &Config, mode: Mode, dir: &Path) -> Vec<(Route, Target)> {
    let upstream = start_upstream(config.server_delay, mode);
    let socket = dir.join(format!("mcp-accounting-{}.sock", mode.key()));
    let gates = start_gates(upstream, &socket, config);
    let relay = start_sandbox_relay(socket.clone());
    let mut routes = vec![
        (Route::Direct, Target::Tcp(upstream)),
        (Route::GateTcp, Target::Tcp(gates.tcp)),
        (Route::GateUnix, Target::Unix(socket)),
        (Route::SandboxRelayGateUnix, Target::Tcp(relay)),
    ];
    if let Some(addr) = gates.multi_thread {
        routes.push((Route::GateTcpMultiThread, Target::Tcp(addr)));
    }
    if config.relays {
        routes.push((
            Route::RelayAxumReqwest,
            Target::Tcp(start_axum_relay(upstream)),
        ));
        routes.push((Route::RelayHyper, Target::Tcp(start_hyper_relay(upstream))));
    }
    routes
}

fn main() {
    let config = match config() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("gate bench: {err}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tables: Vec<(Mode, Vec<(Route, Target)>)> = config
        .modes
        .iter()
        .map(|&mode| (mode, routes(&config, mode, dir.path())))
        .collect();
    let client = std::thread::Builder::new()
        .name("bench-client".to_string())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name("bench-client")
                .build()
                .expect("the client's runtime");
            let mut json = Vec::new();
            for (mode, routes) in &tables {
                let rounds = runtime.block_on(measure(&config, *mode, routes));
                let summaries = summarize(routes, &rounds);
                print!("{}", report(&config, *mode, &summaries));
                json.push(json_table(*mode, &summaries));
            }
            println!("{}", json_line(&config, json));
        })
        .expect("the client's thread");
    if client.join().is_err() {
        std::process::exit(1);
    }
}
