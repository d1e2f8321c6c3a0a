//! What the stdio bridge and its gate add to an ungated `tools/call`: the
//! same minimal stdio server (this binary, started as
//! `<exe> --stdio-bench-server`: it answers each line with a fixed result,
//! as little as a server can do) spoken to directly over its stdin and
//! stdout, and through a gate over the bridge, as `constle run` wires a
//! `command:` server (the sandbox left out: it costs at start, not per
//! call).
//!
//! - direct: this process writes the request line to the server's stdin and
//!   reads the response line, one call at a time;
//! - gate: a hyper HTTP/1.1 client on a keep-alive TCP connection to a gate
//!   on 127.0.0.1 (its own current-thread runtime, thread `bench-gate`, as
//!   in `constle run`), whose bridge writes to the server's pipes; one call
//!   at a time.
//!
//! After a warm-up of each, `-r` rounds of `-d` seconds of each path,
//! alternating which goes first. Per path: calls/s, p50 and p99 (medians
//! over rounds); the gate's added p50 and p99 (median over rounds of the
//! difference to the direct round of the same round); and this process's
//! CPU time per call (client, gate and bridge; `constle_testkit::bench`
//! defines it and the percentiles), whose
//! difference is the gate's and the bridge's. Aim (the issue): at most
//! 0.2 ms added at p50. `bench/gate.sh --stdio` runs this in release.

#![forbid(unsafe_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark that cannot set up must stop, and prints its table"
)]

use std::io::{BufRead as _, Write as _};
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use constle_manifest::{
    HumanGates, McpServer, McpTransport, Pricing, ServerId, StdioServer, ToolName,
};
use constle_mcp_gate::{Gate, ServerPolicy};
use constle_mcp_stdio::{Launch, LaunchFuture, Process, StdioBridge};
use constle_testkit::bench::{Samples, process_cpu};
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

const SERVER_FLAG: &str = "--stdio-bench-server";
const USAGE: &str = "usage: bridge [-r ROUNDS] [-d SECONDS] [-w SECONDS]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == SERVER_FLAG) {
        serve();
        return;
    }
    let options = Options::parse(&args).unwrap_or_else(|e| {
        eprintln!("{e}\n{USAGE}");
        std::process::exit(2)
    });
    bench(&options);
}

struct Options {
    rounds: usize,
    seconds: f64,
    warmup: f64,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            rounds: 5,
            seconds: 3.0,
            warmup: 1.0,
        };
        let mut args = args.iter().filter(|a| *a != "--bench");
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or(format!("{arg} needs a value"));
            match arg.as_str() {
                "-r" => options.rounds = value()?.parse().map_err(|_| "-r: a number")?,
                "-d" => options.seconds = value()?.parse().map_err(|_| "-d: a number")?,
                "-w" => options.warmup = value()?.parse().map_err(|_| "-w: a number")?,
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(options)
    }
}

/// The server: one fixed result per request line, by its id.
fn serve() {
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lines() {
        let Ok(line) = line else { return };
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let Some(id) = message
            .get("id")
            .filter(|_| message.get("method").is_some())
        else {
            continue;
        };
        let result = match message["method"].as_str() {
            Some("initialize") => serde_json::json!({"protocolVersion":"2025-06-18",
                "capabilities":{"tools":{}},"serverInfo":{"name":"bench","version":"1"}}),
            _ => serde_json::json!({"content":[{"type":"text","text":"ok"}]}),
        };
        let answer = serde_json::json!({"jsonrpc":"2.0","id":id,"result":result});
        if writeln!(stdout, "{answer}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return;
        }
    }
}

fn server_command() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(std::env::current_exe().unwrap());
    command
        .arg(SERVER_FLAG)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    command
}

struct Spawn;

impl Launch for Spawn {
    fn launch(&self) -> LaunchFuture {
        Box::pin(async {
            let mut child = server_command().spawn()?;
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

fn call(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"ok"}}}}}}"#
    )
}

/// One path: sends calls one at a time for `seconds`; the latencies.
trait Path {
    async fn call(&mut self, id: u64);
}

struct Direct {
    input: tokio::process::ChildStdin,
    output: BufReader<tokio::process::ChildStdout>,
    _child: tokio::process::Child,
}

impl Path for Direct {
    async fn call(&mut self, id: u64) {
        let mut line = call(id);
        line.push('\n');
        self.input.write_all(line.as_bytes()).await.unwrap();
        let mut answer = String::new();
        self.output.read_line(&mut answer).await.unwrap();
        assert!(answer.contains(r#""ok""#), "{answer}");
    }
}

struct Through {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    session: String,
}

impl Through {
    async fn post(&mut self, body: String, session: Option<&str>) -> (Option<String>, Bytes) {
        let mut request = Request::post("/mcp")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        let request = request.body(Full::new(Bytes::from(body))).unwrap();
        let response = self.sender.send_request(request).await.unwrap();
        let session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (session, body)
    }
}

impl Path for Through {
    async fn call(&mut self, id: u64) {
        let session = self.session.clone();
        let (_, body) = self.post(call(id), Some(&session)).await;
        assert!(body.windows(4).any(|w| w == br#""ok""#), "{body:?}");
    }
}

/// Calls for `seconds`: latencies in µs, and this process's CPU time per
/// call in µs.
async fn round(path: &mut impl Path, seconds: f64, next_id: &mut u64) -> (Samples<f64>, f64) {
    let cpu = process_cpu();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut latencies = Vec::new();
    while Instant::now() < end {
        let start = Instant::now();
        path.call(*next_id).await;
        *next_id += 1;
        latencies.push(start.elapsed().as_secs_f64() * 1e6);
    }
    let per_call = (process_cpu() - cpu).as_secs_f64() * 1e6 / latencies.len() as f64;
    (Samples::new(latencies), per_call)
}

fn median(values: Vec<f64>) -> f64 {
    Samples::new(values).median().unwrap()
}

fn declared() -> McpServer {
    McpServer {
        id: ServerId::new("bench").unwrap(),
        transport: McpTransport::Stdio(StdioServer {
            command: vec![SERVER_FLAG.into()],
            workdir: None,
            env_secret_refs: Default::default(),
            allowed_hosts: Vec::new(),
        }),
        tools: vec![ToolName::new("echo").unwrap()],
        pricing: Pricing::default(),
        allow_methods: Vec::new(),
    }
}

/// A gate over a bridge to the server, on its own thread and runtime; its
/// address.
fn start_gate() -> std::net::SocketAddr {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("bench-gate".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (events, _ignored) = tokio::sync::mpsc::unbounded_channel();
                let bridge = StdioBridge::start("bench", Spawn, Duration::from_secs(30), events)
                    .await
                    .unwrap();
                let server = declared();
                let policy = ServerPolicy::new(&server, &HumanGates::default());
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                sender.send(listener.local_addr().unwrap()).unwrap();
                Gate::with_transport(policy, bridge).serve(listener).await
            })
        })
        .unwrap();
    receiver.recv().unwrap()
}

async fn connect_direct() -> Direct {
    let mut child = server_command().spawn().unwrap();
    let input = child.stdin.take().unwrap();
    let output = BufReader::new(child.stdout.take().unwrap());
    Direct {
        input,
        output,
        _child: child,
    }
}

async fn connect_gate(addr: std::net::SocketAddr) -> Through {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut through = Through {
        sender,
        session: String::new(),
    };
    let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
    let (session, _) = through.post(initialize.into(), None).await;
    through.session = session.expect("a session id");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let session = through.session.clone();
    through.post(initialized.into(), Some(&session)).await;
    through
}

fn bench(options: &Options) {
    let addr = start_gate();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut direct = connect_direct().await;
        let mut through = connect_gate(addr).await;
        let mut id = 1;
        round(&mut direct, options.warmup, &mut id).await;
        round(&mut through, options.warmup, &mut id).await;
        let mut rows: [Vec<(f64, f64, f64, f64)>; 2] = [Vec::new(), Vec::new()];
        for r in 0..options.rounds {
            let (d, t) = if r % 2 == 0 {
                let d = round(&mut direct, options.seconds, &mut id).await;
                (d, round(&mut through, options.seconds, &mut id).await)
            } else {
                let t = round(&mut through, options.seconds, &mut id).await;
                (round(&mut direct, options.seconds, &mut id).await, t)
            };
            for (row, (latencies, cpu)) in rows.iter_mut().zip([d, t]) {
                let rate = latencies.len() as f64 / options.seconds;
                row.push((
                    rate,
                    latencies.median().unwrap(),
                    latencies.percentile(99.0).unwrap(),
                    cpu,
                ));
            }
        }
        report(&rows);
    });
}

fn report(rows: &[Vec<(f64, f64, f64, f64)>; 2]) {
    let column = |row: &[(f64, f64, f64, f64)], f: fn(&(f64, f64, f64, f64)) -> f64| {
        median(row.iter().map(f).collect())
    };
    println!(
        "stdio bridge: one tools/call at a time, median of {} rounds",
        rows[0].len()
    );
    println!(
        "{:<8} {:>9} {:>9} {:>9} {:>14}",
        "path", "calls/s", "p50 ms", "p99 ms", "CPU µs/call"
    );
    for (name, row) in ["direct", "gate"].iter().zip(rows) {
        println!(
            "{name:<8} {:>9.0} {:>9.3} {:>9.3} {:>14.1}",
            column(row, |r| r.0),
            column(row, |r| r.1) / 1e3,
            column(row, |r| r.2) / 1e3,
            column(row, |r| r.3),
        );
    }
    let delta = |i: usize| {
        median(
            rows[0]
                .iter()
                .zip(&rows[1])
                .map(|(d, t)| [t.1 - d.1, t.2 - d.2, t.3 - d.3][i])
                .collect(),
        )
    };
    let (p50, p99, cpu) = (delta(0), delta(1), delta(2));
    println!(
        "added by gate and bridge: p50 +{:.3} ms (aim +0.2 ms: {}), p99 +{:.3} ms, CPU +{cpu:.1} µs/call",
        p50 / 1e3,
        if p50 <= 200.0 { "met" } else { "NOT met" },
        p99 / 1e3,
    );
    println!(
        "{}",
        serde_json::json!({"bench": "stdio_bridge", "added_p50_ms": p50 / 1e3,
            "added_p99_ms": p99 / 1e3, "added_cpu_us_per_call": cpu})
    );
}
