//! How long after the k-th person approves does the gate let the call
//! through? Real `constle approver serve` instances on loopback, each with
//! its own home, key, store and login; a person's decide POST sent as
//! their browser would (session cookie, CSRF token), and the time taken
//! from the HTTP response to that POST (and, beside it, from just before
//! the POST was sent) to the moment the approval is known.
//!
//! Two ways to count, each against a baseline in the same run:
//!
//! - the gate's code, in this process: protocol v2 with two approvers,
//!   threshold 2 (one instance each): a [`BallotRequest`] put to both at
//!   once with [`WebhookClient::ballot`] (which POSTs, then polls with
//!   `Prefer: wait=20`), each answer checked by `verify_vote` inside it and
//!   counted by a [`Tally`], votes reported to every endpoint as they are
//!   counted: what `crates/constle-run/src/quorum.rs` does, but the audit
//!   log. The first person approves; once the gate has counted that, the
//!   second does, and the clock stops when the `Tally` says approved.
//!   Baseline: protocol v1, one approver (one instance), with
//!   [`WebhookClient::ask`], which polls every 0.5 s (the gate's
//!   `POLL_INTERVAL`) without asking to be held; the clock stops at the
//!   verdict. The gate runs on one current-thread runtime (thread
//!   `bench-gate`);
//! - with `--run` (root and bubblewrap): the real `constle run`, its agent
//!   in the sandbox calling a gated tool of the testkit's MCP server again
//!   and again, v2 (two instances, threshold 2) and v1 (one), and the
//!   clock stops when the call has reached the server (polled every
//!   0.2 ms): the audit log's appends (each vote, the approval) and the
//!   forward included.
//!
//! Each person clicks at a different point of the 0.5 s poll interval (a
//! golden-ratio sequence of waits before the click), as people do, so the
//! v1 numbers spread over the interval instead of sitting at one phase.
//!
//! Per path: p50, p99 and max over `-n` approvals (percentiles nearest
//! rank, as `constle_testkit::bench` defines them: below 100 approvals the
//! p99 is the max), the p50 from before the POST was sent, and the CPU
//! time per approval of the gate (thread `bench-gate`; not measured for
//! `--run`) and of the endpoints (all `approver serve` threads, from
//! `/proc/<pid>/task/*/schedstat`, including the people's page loads, the
//! same in both paths). The aim (issue 15): under 50 ms from the k-th
//! approval at the default poll settings. A JSON line with the numbers
//! ends the output. `bench/approvals.sh` runs this in release.

#![forbid(unsafe_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark that cannot set up must stop, and prints its table"
)]

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use constle_approval::quorum::{
    Approver as Listed, Ballot, BallotRequest, Binding, Progress, Tally,
};
use constle_approval::{PendingRequest, Verdict};
use constle_human_gate::{WebhookClient, WebhookOutcome, WebhookUrl};
use constle_identity::DidKey;
use constle_testkit::bench::{Process, Samples, threads_cpu};
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use serde_json::json;

#[path = "../tests/common/mod.rs"]
mod common;

use common::Case;
use common::mcp::{Parties, Setup, call, listed_approvers, quorum_webhook_var};
use common::server::{Approver, PASSWORD, Person, key_did};

const USAGE: &str = "usage: approvals [-n APPROVALS] [--run]";

/// The gate's poll interval (`constle-run`'s `human::POLL_INTERVAL`).
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The aim, in ms.
const AIM_MS: f64 = 50.0;

fn main() {
    common::mcp::be_the_client_if_asked();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = Options::parse(&args).unwrap_or_else(|e| {
        eprintln!("{e}\n{USAGE}");
        std::process::exit(2)
    });
    let desks = [Desk::open("alice"), Desk::open("bob")];
    let mut rows = Vec::new();
    rows.extend(gate_code(&desks, options.approvals));
    if options.run && constle_testkit::require_root("approvals --run", &["bwrap"]) {
        rows.extend(constle_run(&desks, options.approvals));
    }
    report(&rows, options.approvals);
}

struct Options {
    approvals: usize,
    run: bool,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            approvals: 21,
            run: false,
        };
        let mut args = args.iter().filter(|a| *a != "--bench");
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "-n" => {
                    let value = args.next().ok_or("-n needs a value")?;
                    options.approvals = value.parse().map_err(|_| "-n: a number")?;
                    if options.approvals == 0 {
                        return Err("-n: at least 1".into());
                    }
                }
                "--run" => options.run = true,
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0)
                }
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(options)
    }
}

/// One person's `approver serve` (own home, key, store), signed in.
struct Desk {
    approver: Approver,
    /// Dropped after the serve has stopped.
    _home: Case,
    did: DidKey,
    /// The session cookie and its CSRF token.
    cookie: String,
    csrf: String,
}

impl Desk {
    fn open(name: &str) -> Desk {
        let home = Case::new();
        let approver = Approver::start(&home, name, None);
        let did = key_did(&home, name);
        let person = Person::login(&approver, PASSWORD).0;
        let (cookie, csrf) = (person.cookie.clone().unwrap(), person.csrf());
        Desk {
            approver,
            _home: home,
            did,
            cookie,
            csrf,
        }
    }

    fn person(&self) -> Person<'_> {
        Person {
            approver: &self.approver,
            cookie: Some(self.cookie.clone()),
        }
    }

    fn url(&self) -> WebhookUrl {
        WebhookUrl::parse(&self.approver.gate_url()).unwrap()
    }

    /// Waits until the page lists a request whose article says `says`
    /// (`what` names it for a failure); its id.
    fn shown(&self, what: &str, says: &str) -> String {
        let person = self.person();
        person.wait_for(what, |s| s.html.contains(says)).id
    }

    /// The person approves `id`: when the POST was sent and answered.
    fn approve(&self, id: &str) -> (Instant, Instant) {
        let person = self.person();
        let sent = Instant::now();
        let response = person.decide(&self.csrf, id, "approved");
        let answered = Instant::now();
        assert_eq!(response.status, 303, "{}", response.text());
        (sent, answered)
    }

    /// CPU time of all of the serve's threads, in ns.
    fn cpu_ns(&self) -> u64 {
        nanos(threads_cpu(Process::Pid(self.approver.pid()), |_| true))
    }

    fn listed(&self, label: &str) -> Listed {
        Listed {
            did: self.did.as_str().into(),
            label: label.into(),
        }
    }
}

fn nanos(cpu: Duration) -> u64 {
    u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX)
}

fn gate_cpu_ns() -> u64 {
    nanos(threads_cpu(Process::Current, |name| {
        name.starts_with("bench-gate")
    }))
}

/// The wait before the `i`th click: spread evenly over the poll interval.
fn phase(i: usize) -> Duration {
    let golden = 0.618_033_988_749_895_f64;
    POLL_INTERVAL.mul_f64((i as f64 * golden).fract())
}

/// From `from` to `to` in ms, negative when `to` came first.
fn ms(from: Instant, to: Instant) -> f64 {
    match to.checked_duration_since(from) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -(from.duration_since(to).as_secs_f64() * 1e3),
    }
}

/// One measured path.
struct Row {
    name: &'static str,
    /// From the decide POST's response, and from before it was sent, ms.
    answered: Vec<f64>,
    sent: Vec<f64>,
    gate_cpu_ms: Option<f64>,
    endpoints_cpu_ms: f64,
}

/// What the gate thread says.
enum Heard {
    /// A vote was counted and more are needed.
    Counted,
    /// Approved (or not), at that instant.
    Settled(Instant, bool),
}

/// A current-thread runtime on thread `bench-gate`, kept running.
fn gate_runtime() -> tokio::runtime::Handle {
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .name("bench-gate".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            sender.send(runtime.handle().clone()).unwrap();
            runtime.block_on(std::future::pending::<()>());
        })
        .unwrap();
    receiver.recv().unwrap()
}

/// What one endpoint's channel said.
enum Said {
    Ballot(Ballot),
    Reported,
}

type Channel<'a> = Pin<Box<dyn Future<Output = Said> + Send + 'a>>;

/// The gate's counting for one v2 request, as `QuorumGate::count` does it:
/// every endpoint asked at once, each vote counted as it comes and
/// reported to every endpoint, until the `Tally` settles.
async fn count(
    client: WebhookClient,
    endpoints: Vec<(WebhookUrl, Listed)>,
    request: BallotRequest,
    threshold: usize,
    heard: mpsc::Sender<Heard>,
) {
    let keys: Vec<DidKey> = endpoints
        .iter()
        .map(|(_, l)| DidKey::parse(&l.did).unwrap())
        .collect();
    let listed: Vec<Listed> = endpoints.iter().map(|(_, l)| l.clone()).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (client, request, keys, listed) = (&client, &request, &keys, &listed);
    let mut channels: FuturesUnordered<Channel<'_>> = endpoints
        .iter()
        .map(|(url, _)| {
            Box::pin(async move {
                match client
                    .ballot(url, request, keys, deadline, POLL_INTERVAL)
                    .await
                {
                    Ok(ballot) => Said::Ballot(ballot),
                    Err(nothing) => panic!("no decision: {nothing}"),
                }
            }) as Channel<'_>
        })
        .collect();
    let mut tally = Tally::new(threshold);
    let mut approved = Vec::new();
    while let Some(said) = channels.next().await {
        let vote = match said {
            Said::Reported => continue,
            Said::Ballot(Ballot::Rejected(rejected)) => panic!("rejected: {rejected:?}"),
            Said::Ballot(Ballot::Counted(vote)) => vote,
        };
        if vote.approves() {
            approved.push(vote.clone());
            let report = request.votes_report(&approved, listed);
            for (url, _) in &endpoints {
                let report = report.clone();
                channels.push(Box::pin(async move {
                    client.report_votes(url, request, &report).await;
                    Said::Reported
                }));
            }
        }
        match tally.add(vote) {
            Progress::Approved(_) => {
                heard.send(Heard::Settled(Instant::now(), true)).unwrap();
                return;
            }
            Progress::Denied(_) => {
                heard.send(Heard::Settled(Instant::now(), false)).unwrap();
                return;
            }
            Progress::Waiting(_) => heard.send(Heard::Counted).unwrap(),
            Progress::AlreadyCounted | Progress::Settled => {}
        }
    }
}

fn binding() -> Binding {
    Binding {
        agent: "invoice-processor".into(),
        agent_did: None,
        server: "accounting".into(),
        tool: "pay_invoice".into(),
        policy_digest: format!("sha256:{}", "5e".repeat(32)),
        expires_at: jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120),
    }
}

fn heard(receiver: &mpsc::Receiver<Heard>) -> Heard {
    receiver.recv_timeout(Duration::from_secs(60)).unwrap()
}

/// The gate's code in this process: v2 two of two, then v1, alternating.
fn gate_code(desks: &[Desk; 2], approvals: usize) -> [Row; 2] {
    let gate = gate_runtime();
    let client = WebhookClient::new().unwrap();
    let [alice, bob] = desks;
    let mut v2 = Row {
        name: "v2 2 of 2, held polls (gate code)",
        answered: Vec::new(),
        sent: Vec::new(),
        gate_cpu_ms: Some(0.0),
        endpoints_cpu_ms: 0.0,
    };
    let mut v1 = Row {
        name: "v1 1 approver, 0.5 s polls (gate code)",
        answered: Vec::new(),
        sent: Vec::new(),
        gate_cpu_ms: Some(0.0),
        endpoints_cpu_ms: 0.0,
    };
    for i in 0..approvals {
        // v2: alice, then (once counted) bob.
        let (cpu, endpoints_cpu) = (gate_cpu_ns(), alice.cpu_ns() + bob.cpu_ns());
        let endpoints = vec![
            (alice.url(), alice.listed("alice")),
            (bob.url(), bob.listed("bob")),
        ];
        let request = BallotRequest::new(
            binding(),
            json!({"invoice_id": format!("INV-{i}")}),
            &[alice.listed("alice"), bob.listed("bob")],
            2,
        )
        .unwrap();
        let id = request.request_id().to_string();
        let (sender, receiver) = mpsc::channel();
        gate.spawn(count(client.clone(), endpoints, request, 2, sender));
        alice.shown(&id, &id);
        bob.shown(&id, &id);
        alice.approve(&id);
        assert!(matches!(heard(&receiver), Heard::Counted));
        std::thread::sleep(phase(i));
        let (sent, answered) = bob.approve(&id);
        let Heard::Settled(at, true) = heard(&receiver) else {
            panic!("not approved");
        };
        v2.answered.push(ms(answered, at));
        v2.sent.push(ms(sent, at));
        add_cpu(&mut v2, cpu, endpoints_cpu, alice.cpu_ns() + bob.cpu_ns());

        // v1: alice alone.
        let (cpu, endpoints_cpu) = (gate_cpu_ns(), alice.cpu_ns());
        let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let args = json!({"invoice_id": format!("INV-{i}")});
        let pending = PendingRequest::new(
            "invoice-processor",
            "accounting",
            "pay_invoice",
            args,
            expires,
        )
        .unwrap();
        let id = pending.request_id().to_string();
        let (sender, receiver) = mpsc::channel();
        let (client, url, did) = (client.clone(), alice.url(), alice.did.clone());
        gate.spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            let outcome = client
                .ask(&url, pending, &did, deadline, POLL_INTERVAL)
                .await;
            let approved = matches!(outcome, WebhookOutcome::Decided(Verdict::Approved(_)));
            sender
                .send(Heard::Settled(Instant::now(), approved))
                .unwrap();
        });
        alice.shown(&id, &id);
        std::thread::sleep(phase(i));
        let (sent, answered) = alice.approve(&id);
        let Heard::Settled(at, true) = heard(&receiver) else {
            panic!("not approved");
        };
        v1.answered.push(ms(answered, at));
        v1.sent.push(ms(sent, at));
        add_cpu(&mut v1, cpu, endpoints_cpu, alice.cpu_ns());
    }
    for row in [&mut v2, &mut v1] {
        let n = row.answered.len() as f64;
        row.gate_cpu_ms = row.gate_cpu_ms.map(|c| c / n);
        row.endpoints_cpu_ms /= n;
    }
    [v2, v1]
}

/// Adds the CPU time since `gate_before` and `endpoints_before`, in ms.
fn add_cpu(row: &mut Row, gate_before: u64, endpoints_before: u64, endpoints_now: u64) {
    let ms = |ns: u64| ns as f64 / 1e6;
    if let Some(cpu) = row.gate_cpu_ms.as_mut() {
        *cpu += ms(gate_cpu_ns().saturating_sub(gate_before));
    }
    row.endpoints_cpu_ms += ms(endpoints_now.saturating_sub(endpoints_before));
}

/// The whole path: `constle run`, its agent calling `pay_invoice`
/// `approvals` times, decided by the people; v2 then v1.
fn constle_run(desks: &[Desk; 2], approvals: usize) -> [Row; 2] {
    let [alice, bob] = desks;
    let server =
        constle_testkit::TestMcpServer::start(constle_testkit::McpServerOptions::default())
            .unwrap();
    let agent = Case::new();
    agent.install_mcp_client();
    let agent_did = agent.keygen(&["keygen", "agent"]);
    let steps: Vec<String> = (0..approvals)
        .map(|i| {
            let args = format!(r#"{{"invoice_id":"INV-{i}"}}"#);
            call(&format!("pay{i}"), "pay_invoice", &args)
        })
        .collect();
    let mut rows = Vec::new();
    for v2 in [true, false] {
        let file = if v2 {
            let listed = [("alice", alice.did.as_str()), ("bob", bob.did.as_str())];
            let approvers = listed_approvers(&listed, 2);
            agent.quorum_agentfile(&agent_did, &server.url(), &approvers, 2, 60, &steps)
        } else {
            let who = Parties {
                agent_did: &agent_did,
                approver_did: alice.did.as_str(),
                server: &server,
                webhook_var: &quorum_webhook_var(0),
            };
            let setup = Setup {
                timeout_seconds: 60,
                ..Setup::default()
            };
            agent.gated_agentfile(&who, &setup, &steps)
        };
        let mut command = agent.command(&["run", file.to_str().unwrap()]);
        command.env(quorum_webhook_var(0), alice.approver.gate_url());
        command.env(quorum_webhook_var(1), bob.approver.gate_url());
        let mut run = command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut row = Row {
            name: if v2 {
                "v2 2 of 2 (constle run, to the server)"
            } else {
                "v1 1 approver (constle run, to the server)"
            },
            answered: Vec::new(),
            sent: Vec::new(),
            gate_cpu_ms: None,
            endpoints_cpu_ms: 0.0,
        };
        let endpoints_cpu = || alice.cpu_ns() + if v2 { bob.cpu_ns() } else { 0 };
        for i in 0..approvals {
            let before = (endpoints_cpu(), server.calls().len());
            let invoice = format!("INV-{i}&quot;");
            let id = alice.shown(&format!("INV-{i}"), &invoice);
            let last = if v2 {
                assert_eq!(bob.shown(&format!("INV-{i}"), &invoice), id);
                alice.approve(&id);
                // Counted once the gate reports it to bob's page.
                let reported = format!("approved</span> alice <code>{}", alice.did.as_str());
                bob.person().wait_for("alice's approval, as reported", |s| {
                    s.id == id && s.html.contains(&reported)
                });
                bob
            } else {
                alice
            };
            std::thread::sleep(phase(i));
            let (sent, answered) = last.approve(&id);
            while server.calls().len() == before.1 {
                assert!(sent.elapsed() < Duration::from_secs(30), "never forwarded");
                std::thread::sleep(Duration::from_micros(200));
            }
            let at = Instant::now();
            row.answered.push(ms(answered, at));
            row.sent.push(ms(sent, at));
            row.endpoints_cpu_ms += (endpoints_cpu() - before.0) as f64 / 1e6;
        }
        let status = run.wait().unwrap();
        assert!(status.success(), "constle run failed: {status}");
        row.endpoints_cpu_ms /= approvals as f64;
        rows.push(row);
    }
    [rows.remove(0), rows.remove(0)]
}

fn sorted(values: &[f64]) -> Samples<f64> {
    Samples::new(values.iter().copied())
}

fn report(rows: &[Row], approvals: usize) {
    println!(
        "approvals: from the HTTP response to the k-th person's decide POST to the approval, {approvals} approvals per path"
    );
    println!(
        "{:<44} {:>8} {:>8} {:>8} {:>14} {:>13} {:>17}",
        "path", "p50 ms", "p99 ms", "max ms", "p50 from sent", "gate CPU ms", "endpoints CPU ms"
    );
    let mut json = serde_json::Map::new();
    for row in rows {
        let (answered, sent) = (sorted(&row.answered), sorted(&row.sent));
        let (p50, p99) = (
            answered.median().unwrap(),
            answered.percentile(99.0).unwrap(),
        );
        let (max, sent_p50) = (answered.max().unwrap(), sent.median().unwrap());
        let gate = row
            .gate_cpu_ms
            .map_or_else(|| "-".to_owned(), |c| format!("{c:.2}"));
        println!(
            "{:<44} {p50:>8.1} {p99:>8.1} {:>8.1} {:>14.1} {gate:>13} {:>17.2}",
            row.name, max, sent_p50, row.endpoints_cpu_ms,
        );
        json.insert(
            row.name.into(),
            json!({"p50_ms": p50, "p99_ms": p99, "max_ms": max,
                "p50_from_sent_ms": sent_p50, "gate_cpu_ms": row.gate_cpu_ms,
                "endpoints_cpu_ms": row.endpoints_cpu_ms}),
        );
    }
    for pair in rows.chunks(2) {
        let [v2, v1] = pair else { continue };
        let (a, b) = (sorted(&v2.answered), sorted(&v1.answered));
        let (p50, p99) = (a.median().unwrap(), a.percentile(99.0).unwrap());
        println!(
            "{}: p50 {p50:.1} ms against v1's {:.1} ms; p99 {p99:.1} ms (aim < {AIM_MS} ms: {})",
            v2.name,
            b.median().unwrap(),
            if p99 < AIM_MS { "met" } else { "NOT met" },
        );
    }
    println!(
        "{}",
        json!({"bench": "approvals", "approvals": approvals, "paths": json})
    );
}
