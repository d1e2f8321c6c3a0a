//! Two of three approvers, end to end with real processes only: three
//! `constle approver serve` instances on loopback, each with its own home,
//! approver key, SQLite store and login, are the `notify` webhooks of an
//! Agentfile that lists their three keys with `threshold: 2`. The real
//! `constle run` runs the testkit's MCP client in the sandbox, which calls
//! the gated tools of a real MCP server (which records what reaches it)
//! through the gate. The test is the three people: it signs in to each
//! instance's page, reads what the page shows and clicks Approve or Deny.
//!
//! In one run, three calls:
//!
//! 1. `pay_invoice`: alice approves; once the gate has counted her vote
//!    (bob's and carol's pages show it, as the gate reported it) the call is
//!    still held and has not reached the server; bob approves and it
//!    reaches the server, once;
//! 2. `get_invoice`: carol approves, alice denies: refused, never at the
//!    server;
//! 3. `list_invoices`: bob alone approves: held until the deadline, then
//!    `on_timeout: abort` ends the run.
//!
//! Then the audit log says so, and `constle audit verify --agentfile`
//! passes on it.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use constle_testkit::{McpServerOptions, TestMcpServer};
use libtest_mimic::Arguments;
use serde_json::Value;

mod common;
use common::mcp::{call, listed_approvers, outcome, quorum_webhook_var};
use common::server::{self, Approver, PASSWORD, Person, Shown};
use common::{Case, report, text};

const INVOICE: &str = r#"{"invoice_id":"INV-0042"}"#;

/// The people, each with their own `approver serve`.
const NAMES: [&str; 3] = ["alice", "bob", "carol"];

/// Each call's deadline. The last call waits it out, so it is what the
/// test costs; the people's clicks take well under a second.
const TIMEOUT_SECONDS: u32 = 5;

/// How long a counted approval must leave the call held before the second
/// person decides: the gate forwards within milliseconds of a quorum.
const STILL_HELD: Duration = Duration::from_millis(400);

fn main() {
    common::mcp::be_the_client_if_asked();
    let name = "three_approver_serve_instances_two_of_three_one_approval_holds_two_forward_once_one_denial_denies";
    let tests = vec![common::e2e(name, two_of_three_people)];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

/// One person's own endpoint: their home (key and store), the running
/// `approver serve`, and their key's DID.
struct Desk {
    approver: Approver,
    /// Dropped after the serve has stopped.
    _home: Case,
    did: String,
}

impl Desk {
    fn open(name: &str) -> Desk {
        let home = Case::new();
        let approver = Approver::start(&home, name, None);
        let did = server::key_did(&home, name).to_string();
        Desk {
            approver,
            _home: home,
            did,
        }
    }
}

/// `constle run`, killed if the test fails before it ends.
struct Running(Option<Child>);

impl Running {
    fn finish(mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `<li>` a page shows for an approval the gate reported.
fn reported_approval(label: &str, did: &str) -> String {
    format!(
        "<li class=\"approved\"><span class=\"badge\">approved</span> {label} <code>{did}</code></li>"
    )
}

/// How often `tool` reached the server.
fn reached(server: &TestMcpServer, tool: &str) -> usize {
    server.calls().iter().filter(|c| c.tool == tool).count()
}

/// Waits (at most 10 s) until `tool` has reached the server; how long
/// that took.
fn until_reached(server: &TestMcpServer, tool: &str) -> Duration {
    let start = Instant::now();
    while reached(server, tool) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{tool} never reached the server"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    start.elapsed()
}

/// Reloads `person`'s page (for at most 20 s) until request `id` shows
/// `says`, checking each time that `tool` has not reached the server.
fn held_until_shown(
    person: &Person<'_>,
    server: &TestMcpServer,
    tool: &str,
    id: &str,
    says: &str,
) -> Shown {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert_eq!(
            reached(server, tool),
            0,
            "the gate forwarded {tool} after one approval"
        );
        let shown = person.waiting().into_iter().find(|s| s.id == id);
        if let Some(shown) = shown.filter(|s| s.html.contains(says)) {
            return shown;
        }
        assert!(Instant::now() < deadline, "{id} never showed {says}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every person's page, once it lists a request for `tool`: the same
/// request on each.
fn shown_to_all(people: &[Person<'_>], tool: &str) -> Vec<Shown> {
    let shown: Vec<Shown> = people
        .iter()
        .map(|p| p.wait_for(tool, |s| s.tool() == tool))
        .collect();
    assert!(
        shown.iter().all(|s| s.id == shown[0].id),
        "the pages show different requests for {tool}"
    );
    shown
}

#[track_caller]
fn clicked(person: &Person<'_>, id: &str, word: &str) {
    let response = person.click(id, word);
    assert_eq!(response.status, 303, "{}", response.text());
}

fn two_of_three_people() {
    let started = Instant::now();
    let agent = Case::new();
    agent.install_mcp_client();
    let agent_did = agent.keygen(&["keygen", "agent"]);
    let server = TestMcpServer::start(McpServerOptions::default()).unwrap();
    let desks: Vec<Desk> = NAMES.iter().map(|name| Desk::open(name)).collect();
    let dids: Vec<&str> = desks.iter().map(|d| d.did.as_str()).collect();
    let people: Vec<Person<'_>> = desks
        .iter()
        .map(|d| Person::login(&d.approver, PASSWORD).0)
        .collect();
    // Each login is that instance's own: alice's session is nobody at bob's.
    let stranger = Person {
        approver: &desks[1].approver,
        cookie: people[0].cookie.clone(),
    };
    assert!(stranger.cookie.is_some());
    assert_eq!(stranger.get("/").status, 303);

    let listed: Vec<(&str, &str)> = NAMES.into_iter().zip(dids.iter().copied()).collect();
    let steps = [
        call("pay", "pay_invoice", INVOICE),
        call("get", "get_invoice", INVOICE),
        call("list", "list_invoices", "{}"),
    ];
    let file = agent.quorum_agentfile(
        &agent_did,
        &server.url(),
        &listed_approvers(&listed, 2),
        desks.len(),
        TIMEOUT_SECONDS,
        &steps,
    );
    let mut command = agent.command(&["run", file.to_str().unwrap()]);
    for (n, desk) in desks.iter().enumerate() {
        command.env(quorum_webhook_var(n), desk.approver.gate_url());
    }
    let run = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run = Running(Some(run));
    let [alice, bob, carol] = &people[..] else {
        unreachable!()
    };

    // 1. One approval holds the call; the second forwards it, once.
    let pay = shown_to_all(&people, "pay_invoice");
    let mut says = vec![
        "<dd>test-agent</dd>",
        agent_did.as_str(),
        "<span class=\"server\">accounting</span>",
        "&quot;invoice_id&quot;: &quot;INV-0042&quot;",
        "<dd class=\"threshold\">2 of 3</dd>",
        "None reported.",
        "(this endpoint's key)",
    ];
    says.extend(&dids);
    for shown in &pay {
        shown.says(&says);
    }
    let pay_id = pay[0].id.clone();
    clicked(alice, &pay_id, "approved");
    // The gate reports a vote once it has counted it, so when bob's and
    // carol's pages show alice's approval the gate has counted it. Until
    // then, and for a while after, the call must not reach the server.
    let alices = reported_approval("alice", dids[0]);
    for person in [bob, carol] {
        let shown = held_until_shown(person, &server, "pay_invoice", &pay_id, &alices);
        shown.says(&["(reported by the gate, not verified)"]);
    }
    std::thread::sleep(STILL_HELD);
    assert_eq!(
        reached(&server, "pay_invoice"),
        0,
        "the gate forwarded pay_invoice after one approval"
    );
    clicked(bob, &pay_id, "approved");
    let forwarded_in = until_reached(&server, "pay_invoice");

    // 2. One denial denies, whatever the approvals.
    let get_id = shown_to_all(&people, "get_invoice")[0].id.clone();
    clicked(carol, &get_id, "approved");
    alice.wait_for("carol's approval, as reported", |s| {
        s.id == get_id && s.html.contains(&reported_approval("carol", dids[2]))
    });
    clicked(alice, &get_id, "denied");

    // 3. One approval, and nobody else: held until the deadline.
    let list_id = shown_to_all(&people, "list_invoices")[0].id.clone();
    clicked(bob, &list_id, "approved");
    let bobs = reported_approval("bob", dids[1]);
    held_until_shown(alice, &server, "list_invoices", &list_id, &bobs);

    let out = run.finish();
    let report = report(&out);
    let stdout = text(&out.stdout);
    // on_timeout: abort stopped the run at the third call.
    assert_eq!(out.status.code(), Some(125), "{report}");
    assert_eq!(outcome(&stdout, "pay", &report).1, 0, "{report}");
    let (said, status) = outcome(&stdout, "get", &report);
    assert_eq!(status, 3, "{said}");
    assert!(said.contains("an approver denied it"), "{said}");
    let calls = server.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].tool, "pay_invoice");
    assert_eq!(calls[0].arguments["invoice_id"], "INV-0042");

    // The log: the quorum that approved, the denial, the timeout.
    let triggered = agent.events("gate_triggered");
    let request = |id: &str| -> Value {
        triggered
            .iter()
            .find(|e| e["request_id"] == id)
            .unwrap_or_else(|| panic!("no gate_triggered for {id}"))
            .clone()
    };
    let approved = agent.events("gate_approved");
    assert_eq!(approved.len(), 1, "{approved:?}");
    assert_eq!(approved[0]["request_id"], pay_id.as_str());
    assert_eq!(approved[0]["decided_by"], "quorum");
    let mut quorum: Vec<&str> = approved[0]["approvers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    quorum.sort_unstable();
    let mut expected = [dids[0], dids[1]];
    expected.sort_unstable();
    assert_eq!(quorum, expected);
    let denied = agent.events("gate_denied");
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["request_id"], get_id.as_str());
    assert_eq!(denied[0]["approver"], dids[0]);
    let timeout = agent.events("gate_timeout");
    assert_eq!(timeout.len(), 1, "{timeout:?}");
    assert_eq!(timeout[0]["request_id"], list_id.as_str());
    assert_eq!(
        (
            timeout[0]["approvals"].as_u64(),
            timeout[0]["threshold"].as_u64()
        ),
        (Some(1), Some(2))
    );
    // What each page showed of the first call is what the gate asked.
    let policy = agent.events("run_started")[0]["policy_digest"].clone();
    let policy = policy.as_str().unwrap();
    let expires = request(&pay_id)["expires_at"].clone();
    for shown in &pay {
        assert_eq!(
            shown.between("<code class=\"digest policy\">", "</code>"),
            policy
        );
        assert_eq!(
            shown.between("<dd class=\"expires\">", "</dd>"),
            expires.as_str().unwrap()
        );
        assert_eq!(
            shown.between("<dd class=\"agent-did\"><code>", "</code>"),
            agent_did
        );
    }

    let (status, said) = agent.audit_verify(&file, &agent.log_file());
    assert_eq!(status, Some(0), "{said}");
    eprintln!(
        "quorum_serve: pay_invoice reached the server {:.1} ms after bob's approval was answered; the test took {:.1} s",
        forwarded_in.as_secs_f64() * 1e3,
        started.elapsed().as_secs_f64()
    );
}
