//! The MCP gate and the human gates end to end: the real `constle run`,
//! bubblewrap, a real MCP server on the host and a real MCP client inside
//! the sandbox (both the official Rust SDK, from `constle_testkit::mcp`), a
//! decision endpoint signing with a real approver key, and the terminal
//! prompt answered through a pseudo-terminal (`script` from util-linux).
//!
//! This binary has its own `main`: started as `<exe> mcp-client …` it is
//! the MCP client. The tests hard-link it into the agent's workdir, the only
//! host directory the sandbox sees, and run it there. Loopback only.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use constle_identity::SigningIdentity;
use constle_testkit::mcp::{McpServerOptions, TestMcpServer};
use constle_testkit::{Answer, SimulatedApprover, require_root};
use libtest_mimic::{Arguments, Trial};
use serde_json::Value;

mod common;
use common::mcp::{CLIENT_SUBCOMMAND, Parties, Setup, call, step};
use common::{Case, report, text};

const WEBHOOK_VAR: &str = "TEST_GATE_WEBHOOK_URL";
const INVOICE: &str = r#"{"invoice_id":"INV-0042"}"#;

fn main() {
    common::mcp::be_the_client_if_asked();
    let mut tests: Vec<Trial> = vec![
        e2e(
            "declared_calls_pass_and_every_page_of_tools_list_is_filtered",
            || {
                declared_calls_pass(McpServerOptions {
                    page_size: Some(2),
                    ..McpServerOptions::default()
                })
            },
        ),
        e2e("json_responses_pass_through_the_gate_too", || {
            declared_calls_pass(McpServerOptions {
                json_response: true,
                stateful: false,
                page_size: Some(1),
                ..McpServerOptions::default()
            })
        }),
        e2e(
            "an_undeclared_tool_never_reaches_the_server",
            undeclared_tool,
        ),
        e2e("a_case_variant_of_a_gated_name_is_refused", case_variant),
        e2e(
            "a_flood_of_refused_calls_is_recorded_call_by_call",
            refused_flood,
        ),
        e2e(
            "a_gated_call_no_digest_can_hold_is_refused_on_record",
            undigestible,
        ),
        e2e("the_servers_url_stays_on_the_host", url_stays_on_host),
        e2e(
            "an_unreachable_server_is_an_error_and_the_gate_keeps_serving",
            unreachable_server,
        ),
        e2e(
            "a_declared_header_reaches_the_server_and_its_value_nothing_else",
            header_reaches_the_server_only,
        ),
        e2e(
            "a_header_without_a_usable_value_starts_nothing",
            header_without_a_value,
        ),
        e2e(
            "on_timeout_abort_refuses_the_call_and_stops_the_run",
            timeout_abort,
        ),
        e2e(
            "after_an_abort_no_call_reaches_any_server",
            abort_forwards_nothing,
        ),
        e2e(
            "on_timeout_proceed_forwards_after_the_deadline",
            timeout_proceed,
        ),
        e2e(
            "no_webhook_url_and_no_terminal_is_said_once_and_times_out",
            no_channel,
        ),
        e2e(
            "an_unreachable_decision_endpoint_is_no_decision",
            unreachable_endpoint,
        ),
        e2e(
            "a_recorded_webhook_approval_is_checked_against_approver_pubkey",
            forged_in_log,
        ),
        e2e("a_terminal_approval_forwards_the_call", || {
            terminal(INVOICE, "approve? [a]pprove / [d]eny", "a\n", true)
        }),
        e2e("a_terminal_denial_refuses_the_call", || {
            terminal(INVOICE, "approve? [a]pprove / [d]eny", "d\n", false)
        }),
        e2e("arguments_too_large_to_show_can_only_be_denied", || {
            let large = format!(r#"{{"invoice_id":"{}"}}"#, "9".repeat(8000));
            terminal(&large, "deny? [d]eny only", "a\nd\n", false)
        }),
        e2e(
            "the_terminal_holds_the_agents_output_while_it_asks",
            terminal_holds_the_agents_output,
        ),
    ];
    tests.extend([
        e2e(
            "a_hundred_concurrent_calls_against_a_cap_for_ten_forward_ten",
            hundred_against_ten,
        ),
        e2e(
            "the_day_cap_holds_across_runs_and_spend_show_says_so",
            day_cap_across_runs,
        ),
        e2e(
            "an_unusable_ledger_refuses_priced_calls_only",
            unusable_ledger,
        ),
        e2e(
            "runs_on_two_machines_share_caps_through_redis",
            redis_shared,
        ),
    ]);
    for (answer, forwarded, event, reason) in WEBHOOK_ROWS {
        tests.push(e2e(&format!("webhook_{answer:?}"), move || {
            webhook_row(answer, forwarded, event, reason)
        }));
    }
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

fn e2e(name: &str, test: impl FnOnce() + Send + 'static) -> Trial {
    common::e2e_when(name, |n| require_root(n, &["bwrap", "script"]), test)
}

// ---------------------------------------------------------------------------
// Fixture

/// One agent with an MCP server, a gate on `pay_invoice`, and an approver.
struct Fixture {
    case: Case,
    server: TestMcpServer,
    approver: SigningIdentity,
    agent_did: String,
}

impl Fixture {
    fn new(options: McpServerOptions) -> Fixture {
        let case = Case::new();
        let agent_did = case.keygen(&["keygen", "test-agent"]);
        case.install_mcp_client();
        Fixture {
            case,
            server: TestMcpServer::start(options).unwrap(),
            approver: SigningIdentity::generate(),
            agent_did,
        }
    }

    /// Writes the Agentfile: the agent runs `steps` (see [`step`]).
    fn agentfile(&self, setup: &Setup<'_>, steps: &[String]) -> PathBuf {
        let who = Parties {
            agent_did: &self.agent_did,
            approver_did: self.approver.did().as_str(),
            server: &self.server,
            webhook_var: WEBHOOK_VAR,
        };
        self.case.gated_agentfile(&who, setup, steps)
    }

    /// `constle run`, without a terminal, with the webhook at `webhook`.
    fn run(&self, file: &Path, webhook: Option<&SimulatedApprover>) -> Output {
        let mut command = self.case.command(&["run", file.to_str().unwrap()]);
        command.env_remove(WEBHOOK_VAR).stdin(Stdio::null());
        if let Some(webhook) = webhook {
            command.env(WEBHOOK_VAR, webhook.url());
        }
        command.output().unwrap()
    }

    fn webhook(&self, answer: Answer) -> SimulatedApprover {
        SimulatedApprover::start(
            SigningIdentity::from_pkcs8_pem(&self.approver.to_pkcs8_pem()).unwrap(),
            [],
            answer,
        )
        .unwrap()
    }

    fn forwarded(&self) -> Vec<String> {
        self.server.calls().into_iter().map(|c| c.tool).collect()
    }

    fn verify(&self, file: &Path) -> Output {
        let day = self.case.log_file();
        let agentfile = format!("--agentfile={}", file.display());
        self.case
            .run(&["audit", "verify", &agentfile, day.to_str().unwrap()])
    }
}

fn list(name: &str) -> String {
    step(name, "list $URL")
}

/// The output of step `name`, and its exit status.
fn outcome(out: &Output, name: &str) -> (String, i32) {
    common::mcp::outcome(&text(&out.stdout), name, &report(out))
}

fn events(case: &Case, prefix: &str) -> Vec<Value> {
    case.log()
        .into_iter()
        .filter(|e| e["event"].as_str().unwrap().starts_with(prefix))
        .collect()
}

fn names(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect()
}

// ---------------------------------------------------------------------------
// The gate

fn declared_calls_pass(options: McpServerOptions) {
    let fx = Fixture::new(options);
    let file = fx.agentfile(
        &Setup::default(),
        &[list("list"), call("get", "get_invoice", INVOICE)],
    );
    let out = fx.run(&file, None);
    assert!(out.status.success(), "{}", report(&out));
    let (listed, status) = outcome(&out, "list");
    assert_eq!(status, 0, "{}", report(&out));
    let mut listed: Vec<&str> = listed.lines().collect();
    // Each distinct page the agent was shown is on record, once, in order.
    let offered = events(&fx.case, "mcp_tools_offered");
    let shown: Vec<&str> = offered
        .iter()
        .flat_map(|e| e["tools"].as_array().unwrap())
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(shown, listed, "{offered:?}");
    let mut digests: Vec<&str> = offered
        .iter()
        .map(|e| e["digest"].as_str().unwrap())
        .collect();
    assert!(offered.iter().all(|e| e["server"] == "accounting"));
    assert!(
        digests
            .iter()
            .all(|d| d.len() == 71 && d.starts_with("sha256:"))
    );
    digests.sort_unstable();
    digests.dedup();
    assert_eq!(digests.len(), offered.len(), "{offered:?}");
    listed.sort_unstable();
    // The server also has Pay_Invoice, delete_everything and echo.
    assert_eq!(listed, ["get_invoice", "list_invoices", "pay_invoice"]);
    let (got, status) = outcome(&out, "get");
    assert_eq!(
        (got.trim(), status),
        ("result: invoice INV-0042: 120.00 EUR", 0)
    );
    assert_eq!(fx.forwarded(), ["get_invoice"]);
}

fn undeclared_tool() {
    let fx = Fixture::new(McpServerOptions::default());
    let file = fx.agentfile(
        &Setup::default(),
        &[
            call("undeclared", "delete_everything", "{}"),
            call("after", "get_invoice", INVOICE),
        ],
    );
    let out = fx.run(&file, None);
    assert!(out.status.success(), "{}", report(&out));
    let (said, status) = outcome(&out, "undeclared");
    assert_eq!(status, 3, "{said}");
    assert!(said.contains("not declared"), "{said}");
    assert_eq!(outcome(&out, "after").1, 0);
    assert_eq!(fx.forwarded(), ["get_invoice"]);
    let refused = events(&fx.case, "mcp_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    let fields = ["server", "http_method", "method", "tool", "reason"];
    assert_eq!(
        fields.map(|f| refused[0][f].as_str().unwrap_or_default()),
        [
            "accounting",
            "POST",
            "tools/call",
            "delete_everything",
            "mcp_tool_not_declared"
        ]
    );
    assert!(refused[0]["rpc_id"].is_number(), "{}", refused[0]);
}

fn case_variant() {
    let fx = Fixture::new(McpServerOptions::default());
    let setup = Setup {
        tools: &["pay_invoice", "Pay_Invoice"],
        ..Setup::default()
    };
    let file = fx.agentfile(&setup, &[call("variant", "Pay_Invoice", INVOICE)]);
    let out = fx.run(&file, None);
    let (said, status) = outcome(&out, "variant");
    assert_eq!(status, 3, "{said}");
    assert!(fx.forwarded().is_empty());
    assert!(events(&fx.case, "gate_").is_empty(), "refused, not gated");
    let refused = events(&fx.case, "mcp_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["reason"], "mcp_tool_case_variant");
    assert_eq!(refused[0]["tool"], "Pay_Invoice");
}

/// Refused calls at once: more than the log takes before refusals wait
/// their turn (100).
const FLOOD: usize = 120;

fn refused_flood() {
    let fx = Fixture::new(McpServerOptions::default());
    let file = fx.agentfile(
        &Setup::default(),
        &[concurrent_calls(FLOOD, "delete_everything")],
    );
    let out = fx.run(&file, None);
    assert!(out.status.success(), "{}", report(&out));
    assert!(fx.forwarded().is_empty());
    let refused = events(&fx.case, "mcp_refused");
    assert_eq!(refused.len(), FLOOD, "every refusal, none dropped");
    assert!(
        refused
            .iter()
            .all(|e| e["reason"] == "mcp_tool_not_declared")
    );
}

/// The human gates cannot put this call to anyone: JCS would round the
/// integer, so no digest pins it. Refused, and on record all the same.
fn undigestible() {
    let fx = Fixture::new(McpServerOptions::default());
    let arguments = r#"{"invoice_id":"INV-0042","amount":9007199254740993}"#;
    let file = fx.agentfile(&Setup::default(), &[call("pay", "pay_invoice", arguments)]);
    let out = fx.run(&file, None);
    let (said, status) = outcome(&out, "pay");
    assert_eq!(status, 3, "{said}");
    assert!(said.contains("2^53"), "{said}");
    assert!(fx.forwarded().is_empty());
    assert!(events(&fx.case, "gate_").is_empty(), "nobody was asked");
    let refused = events(&fx.case, "mcp_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["reason"], "mcp_gate_refused");
    assert_eq!(refused[0]["tool"], "pay_invoice");
}

fn url_stays_on_host() {
    let fx = Fixture::new(McpServerOptions::default());
    let file = fx.agentfile(&Setup::default(), &["env".to_owned()]);
    let out = fx.run(&file, None);
    let env = text(&out.stdout);
    assert!(
        env.contains("CONSTLE_MCP_ACCOUNTING_URL=http://127.0.0.1:4100/mcp"),
        "{env}"
    );
    let port = fx.server.addr().port().to_string();
    assert!(!env.contains(&port), "the server's port leaked: {env}");
    assert!(!env.contains(WEBHOOK_VAR), "{env}");
}

fn unreachable_server() {
    let fx = Fixture::new(McpServerOptions::default());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let setup = Setup {
        server_url: Some(url),
        ..Setup::default()
    };
    let file = fx.agentfile(&setup, &[list("first"), list("second")]);
    let out = fx.run(&file, None);
    assert!(out.status.success(), "{}", report(&out));
    for name in ["first", "second"] {
        let (said, status) = outcome(&out, name);
        assert_ne!(status, 0, "{said}");
        assert!(!said.contains(&fx.server.url()), "{said}");
    }
}

// ---------------------------------------------------------------------------
// Headers the gate adds

const TOKEN_VAR: &str = "TEST_MCP_TOKEN";
const TOKEN: &str = "S3CRET-e2e-t0ken";
const BEARER: &str = "[{name: Authorization, scheme: Bearer, value_secret_ref: TEST_MCP_TOKEN}]";

/// An MCP server that answers 401 unless `Authorization: Bearer TOKEN`.
fn guarded() -> Fixture {
    Fixture::new(McpServerOptions {
        required_headers: vec![("authorization".into(), format!("Bearer {TOKEN}"))],
        ..McpServerOptions::default()
    })
}

/// `constle run` with `TEST_MCP_TOKEN` set to `value`, or unset.
fn run_with_token(fx: &Fixture, file: &Path, value: Option<&str>) -> Output {
    let mut command = fx.case.command(&["run", file.to_str().unwrap()]);
    command.env_remove(WEBHOOK_VAR).env_remove(TOKEN_VAR);
    if let Some(value) = value {
        command.env(TOKEN_VAR, value);
    }
    command.stdin(Stdio::null()).output().unwrap()
}

/// Every file under `dir`, with its contents.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push((path.clone(), fs::read(&path).unwrap()));
        }
    }
    files
}

/// `secret` is in none of the run's output, the agent's included, and in
/// no file under `$CONSTLE_HOME` (the audit log, its anchors, the keys).
#[track_caller]
fn nowhere(fx: &Fixture, out: &Output, secret: &str) {
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!shown.contains(secret), "{secret} shown:\n{}", report(out));
    for (path, bytes) in files_under(&fx.case.home()) {
        let found = bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
        assert!(!found, "{secret} in {}", path.display());
    }
}

fn header_reaches_the_server_only() {
    let fx = guarded();
    let setup = Setup {
        headers: BEARER,
        ..Setup::default()
    };
    let steps = [
        list("list"),
        call("get", "get_invoice", INVOICE),
        "env".to_owned(),
    ];
    let file = fx.agentfile(&setup, &steps);
    let out = run_with_token(&fx, &file, Some(TOKEN));
    assert!(out.status.success(), "{}", report(&out));
    assert_eq!(outcome(&out, "get").1, 0, "{}", report(&out));
    assert_eq!(fx.forwarded(), ["get_invoice"]);
    let summary = text(&out.stderr);
    assert!(
        summary.contains("the gate sends Authorization: Bearer $TEST_MCP_TOKEN with every request"),
        "{summary}"
    );
    assert!(
        !text(&out.stdout).contains(TOKEN_VAR),
        "the agent's environment"
    );
    nowhere(&fx, &out, TOKEN);
    assert!(!events(&fx.case, "run_").is_empty());

    // A value the server refuses: the agent's call fails, and neither
    // value is shown or kept.
    let wrong = "WR0NG-e2e-t0ken";
    let out = run_with_token(&fx, &file, Some(wrong));
    let (said, status) = outcome(&out, "get");
    assert_ne!(status, 0, "{said}");
    nowhere(&fx, &out, wrong);
    nowhere(&fx, &out, TOKEN);
    assert_eq!(
        fx.forwarded(),
        ["get_invoice"],
        "the refused call got no further"
    );
}

fn header_without_a_value() {
    let fx = guarded();
    let setup = Setup {
        headers: BEARER,
        ..Setup::default()
    };
    let file = fx.agentfile(&setup, &[list("list")]);
    for (value, why) in [
        (None, "TEST_MCP_TOKEN is not set"),
        (Some(""), "TEST_MCP_TOKEN is empty"),
        (
            Some("S3CRET-e2e\n"),
            "the value of TEST_MCP_TOKEN cannot be sent in a header",
        ),
    ] {
        let out = run_with_token(&fx, &file, value);
        assert_eq!(out.status.code(), Some(125), "{}", report(&out));
        let said = text(&out.stderr);
        assert!(
            said.contains(&format!(
                "constle run: the MCP gate for server accounting cannot start: header Authorization cannot be sent: {why}"
            )),
            "{said}"
        );
        assert!(said.contains("nothing was started"), "{said}");
        // `constle validate`'s warning, printed before the run, says it too.
        assert!(said.contains("header_secret_"), "{said}");
        assert!(!said.contains("S3CRET"), "{said}");
        assert!(text(&out.stdout).is_empty(), "the agent ran");
        assert!(
            !fx.case.home().join("logs").exists(),
            "the audit log started"
        );
    }
    assert!(fx.server.calls().is_empty());
}

// ---------------------------------------------------------------------------
// The webhook: each row of the verification table

const WEBHOOK_ROWS: [(Answer, bool, &str, &str); 5] = [
    (Answer::Approve, true, "gate_approved", ""),
    (Answer::Deny, false, "gate_denied", "denied"),
    (
        Answer::ForgedSignature,
        false,
        "gate_denied",
        "gate_signature_invalid",
    ),
    (
        Answer::WrongRequestId,
        false,
        "gate_denied",
        "gate_request_id_mismatch",
    ),
    (
        Answer::WrongDigest,
        false,
        "gate_denied",
        "gate_digest_mismatch",
    ),
];

fn webhook_row(answer: Answer, forwarded: bool, event: &str, reason: &str) {
    let fx = Fixture::new(McpServerOptions::default());
    let webhook = fx.webhook(answer);
    let file = fx.agentfile(&Setup::default(), &[call("pay", "pay_invoice", INVOICE)]);
    let out = fx.run(&file, Some(&webhook));
    assert!(out.status.success(), "{}", report(&out));
    let (said, status) = outcome(&out, "pay");
    if forwarded {
        assert_eq!((said.trim(), status), ("result: paid INV-0042", 0));
        assert_eq!(fx.forwarded(), ["pay_invoice"]);
    } else {
        assert_eq!(status, 3, "{said}");
        assert!(fx.forwarded().is_empty());
    }
    let gate = events(&fx.case, "gate_");
    assert_eq!(names(&gate), ["gate_triggered", event]);
    let (triggered, decided) = (&gate[0], &gate[1]);
    assert_eq!(triggered["tool"], "pay_invoice");
    assert_eq!(triggered["server"], "accounting");
    assert_eq!(decided["request_id"], triggered["request_id"]);
    // What was asked is what was digested: the endpoint saw the same.
    let posted = &webhook.requests()[0];
    assert_eq!(posted["request_id"], triggered["request_id"]);
    assert_eq!(posted["subject_digest"], triggered["subject_digest"]);
    assert_eq!(
        posted["arguments"],
        serde_json::json!({"invoice_id": "INV-0042"})
    );
    if reason.is_empty() {
        assert_eq!(decided["decided_by"], "webhook");
        assert_eq!(decided["approver"], fx.approver.did().as_str());
    } else {
        assert_eq!(decided["reason"], reason);
    }
    let verified = fx.verify(&file);
    assert!(verified.status.success(), "{}", report(&verified));
}

fn forged_in_log() {
    let fx = Fixture::new(McpServerOptions::default());
    let webhook = fx.webhook(Answer::Approve);
    let file = fx.agentfile(&Setup::default(), &[call("pay", "pay_invoice", INVOICE)]);
    let out = fx.run(&file, Some(&webhook));
    assert_eq!(outcome(&out, "pay").1, 0, "{}", report(&out));
    // The same log, checked against an Agentfile naming another approver:
    // the recorded approval must not verify.
    let other = SigningIdentity::generate();
    let pinned = fs::read_to_string(&file)
        .unwrap()
        .replace(fx.approver.did().as_str(), other.did().as_str());
    let other_file = fx.case.path("other.yaml");
    fs::write(&other_file, pinned).unwrap();
    let verified = fx.verify(&other_file);
    assert_eq!(verified.status.code(), Some(1), "{}", report(&verified));
    assert!(
        text(&verified.stderr).contains("approval_signature_invalid")
            || text(&verified.stdout).contains("approval_signature_invalid"),
        "{}",
        report(&verified)
    );
}

// ---------------------------------------------------------------------------
// No decision

fn timeout_abort() {
    let fx = Fixture::new(McpServerOptions::default());
    let webhook = fx.webhook(Answer::Never);
    let setup = Setup {
        timeout_seconds: 2,
        ..Setup::default()
    };
    let file = fx.agentfile(
        &setup,
        &[call("pay", "pay_invoice", INVOICE), "sleep 30".into()],
    );
    let started = Instant::now();
    let out = fx.run(&file, Some(&webhook));
    assert_eq!(out.status.code(), Some(125), "{}", report(&out));
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the run was not stopped"
    );
    assert!(
        text(&out.stderr).contains("on_timeout is abort"),
        "{}",
        report(&out)
    );
    assert!(fx.forwarded().is_empty());
    let gate = events(&fx.case, "gate_");
    assert_eq!(names(&gate), ["gate_triggered", "gate_timeout"]);
    assert_eq!(gate[1]["on_timeout"], "abort");
    let finished = events(&fx.case, "run_finished");
    assert!(
        finished[0]["error"]
            .as_str()
            .unwrap()
            .contains("pay_invoice")
    );
}

/// Runs that race an aborted call: the failure this catches showed in
/// about one run in four. On a loaded machine the sandbox may be stopped
/// before the agent's next calls leave it in every run; the order itself
/// (every gate closed before the refusal is answered) is tested without a
/// race in constle-mcp-gate (`once_the_shutoff_is_thrown_no_gate_sends_anything`).
const ABORT_RACES: usize = 20;

/// The moment the gated call is refused under `on_timeout: abort`, the
/// agent calls the same server and another one. Neither call may reach
/// its server: the gates close before the refusal is answered.
fn abort_forwards_nothing() {
    let fx = Fixture::new(McpServerOptions::default());
    let other = TestMcpServer::start(McpServerOptions::default()).unwrap();
    let setup = Setup {
        timeout_seconds: 1,
        other_server: Some(other.url()),
        ..Setup::default()
    };
    let race = step(
        "race",
        &format!(
            "race $URL pay_invoice '{INVOICE}' $URL get_invoice '{INVOICE}' $OTHER_URL list_invoices '{{}}'"
        ),
    );
    let file = fx.agentfile(&setup, &[race, "sleep 30".into()]);
    // Runs in which a call got to a gate after the abort (and was refused
    // there), and the refusals recorded so far.
    let (mut raced, mut recorded) = (0, 0);
    for run in 1..=ABORT_RACES {
        let out = fx.run(&file, None);
        assert_eq!(out.status.code(), Some(125), "run {run}\n{}", report(&out));
        let reached: Vec<String> = fx
            .forwarded()
            .into_iter()
            .chain(other.calls().into_iter().map(|c| c.tool))
            .collect();
        assert!(
            reached.is_empty(),
            "run {run}: {reached:?} reached a server after the abort\n{}",
            report(&out)
        );
        let refused = events(&fx.case, "mcp_refused");
        assert!(refused.iter().all(|e| e["reason"] == "mcp_gate_closed"));
        raced += usize::from(refused.len() > recorded);
        recorded = refused.len();
    }
    // Said, not failed: whether the agent's calls get out before the
    // sandbox is stopped is up to the scheduler.
    eprintln!("abort race: a call got to a gate after the abort in {raced} of {ABORT_RACES} runs");
}

fn timeout_proceed() {
    let fx = Fixture::new(McpServerOptions::default());
    let webhook = fx.webhook(Answer::Never);
    let setup = Setup {
        timeout_seconds: 1,
        on_timeout: "proceed",
        ..Setup::default()
    };
    let file = fx.agentfile(&setup, &[call("pay", "pay_invoice", INVOICE)]);
    let out = fx.run(&file, Some(&webhook));
    assert!(out.status.success(), "{}", report(&out));
    assert_eq!(outcome(&out, "pay").1, 0);
    assert_eq!(fx.forwarded(), ["pay_invoice"]);
    let gate = events(&fx.case, "gate_");
    assert_eq!(names(&gate), ["gate_triggered", "gate_timeout"]);
    assert_eq!(gate[1]["on_timeout"], "proceed");
}

fn no_channel() {
    let fx = Fixture::new(McpServerOptions::default());
    let setup = Setup {
        timeout_seconds: 1,
        on_timeout: "proceed",
        ..Setup::default()
    };
    let pay = |n: &str| call(n, "pay_invoice", INVOICE);
    let file = fx.agentfile(&setup, &[pay("one"), pay("two")]);
    let out = fx.run(&file, None);
    assert!(out.status.success(), "{}", report(&out));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("no terminal").count(), 1, "{stderr}");
    assert!(
        stderr.contains(WEBHOOK_VAR),
        "the unset variable is named: {stderr}"
    );
    let gate = events(&fx.case, "gate_");
    assert_eq!(
        names(&gate),
        [
            "gate_triggered",
            "gate_timeout",
            "gate_triggered",
            "gate_timeout"
        ]
    );
    assert_eq!(
        gate[0]["channels"],
        serde_json::json!({"terminal": false, "webhook": false})
    );
}

fn unreachable_endpoint() {
    let fx = Fixture::new(McpServerOptions::default());
    let setup = Setup {
        timeout_seconds: 2,
        on_timeout: "proceed",
        ..Setup::default()
    };
    let file = fx.agentfile(&setup, &[call("pay", "pay_invoice", INVOICE)]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/gates", closed.local_addr().unwrap());
    drop(closed);
    let out = fx
        .case
        .command(&["run", file.to_str().unwrap()])
        .env(WEBHOOK_VAR, &url)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", report(&out));
    let gate = events(&fx.case, "gate_");
    assert_eq!(names(&gate), ["gate_triggered", "gate_timeout"]);
    assert_eq!(gate[0]["channels"]["webhook"], true);
    assert_eq!(gate[1]["webhook"], "the decision endpoint was unreachable");
    // The URL is a secret: it is in no entry and no message.
    assert!(
        !serde_json::to_string(&fx.case.log())
            .unwrap()
            .contains(&url)
    );
    assert!(!text(&out.stderr).contains(&url), "{}", report(&out));
}

// ---------------------------------------------------------------------------
// The terminal, through a pseudo-terminal

/// `constle run FILE` under `script`, whose pty becomes the run's
/// controlling terminal, its output gathered as it comes.
struct UnderPty {
    child: std::process::Child,
    seen: Arc<Mutex<Vec<u8>>>,
    reader: std::thread::JoinHandle<()>,
}

impl UnderPty {
    fn start(fx: &Fixture, file: &Path, webhook: &SimulatedApprover) -> UnderPty {
        let constle = env!("CARGO_BIN_EXE_constle");
        let mut child = Command::new("script")
            .args([
                "-qfec",
                &format!("{constle} run {}", file.display()),
                "/dev/null",
            ])
            .env("CONSTLE_HOME", fx.case.home())
            .env("SHELL", "/bin/sh")
            .env(WEBHOOK_VAR, webhook.url())
            .current_dir(fx.case.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut stdout = child.stdout.take().unwrap();
        let reader = {
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stdout.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    seen.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            })
        };
        UnderPty {
            child,
            seen,
            reader,
        }
    }

    fn shown(&self) -> String {
        text(&self.seen.lock().unwrap())
    }

    /// Waits until the terminal has shown `what`.
    fn wait_for(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.shown().contains(what) {
            assert!(Instant::now() < deadline, "no {what:?}: {}", self.shown());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `keys`, waits for the run to end: its status and all it showed.
    fn answer(mut self, keys: &str) -> (std::process::ExitStatus, String) {
        let mut stdin = self.child.stdin.take().unwrap();
        stdin.write_all(keys.as_bytes()).unwrap();
        let status = self.child.wait().unwrap();
        self.reader.join().unwrap();
        drop(stdin);
        (status, text(&self.seen.lock().unwrap()))
    }
}

/// A call with `arguments` put to the terminal; types `keys` once
/// `question` is shown.
fn terminal(arguments: &str, question: &str, keys: &str, approves: bool) {
    let fx = Fixture::new(McpServerOptions::default());
    // The webhook never decides: the terminal must.
    let webhook = fx.webhook(Answer::Never);
    let file = fx.agentfile(&Setup::default(), &[call("pay", "pay_invoice", arguments)]);
    let pty = UnderPty::start(&fx, &file, &webhook);
    pty.wait_for(question);
    let (status, shown) = pty.answer(keys);
    assert!(status.success(), "{shown}");
    for part in [
        "agent \"test-agent\" wants to call",
        "MCP tool \"pay_invoice\" on server \"accounting\"",
        "subject: sha256:",
        question,
        "(timeout 30s → abort)",
    ] {
        assert!(shown.contains(part), "{part:?} not in the prompt:\n{shown}");
    }
    // Small arguments are shown in full; large ones not at all.
    let shown_in_full = shown.contains("— shown in full:");
    assert_eq!(shown_in_full, arguments.len() < 4096, "{shown}");
    assert_eq!(shown.contains(arguments), shown_in_full, "{shown}");
    let gate = events(&fx.case, "gate_");
    if approves {
        assert_eq!(names(&gate), ["gate_triggered", "gate_approved"]);
        assert_eq!(fx.forwarded(), ["pay_invoice"]);
        assert!(shown.contains("result: paid INV-0042"), "{shown}");
    } else {
        assert_eq!(names(&gate), ["gate_triggered", "gate_denied"]);
        assert!(fx.forwarded().is_empty());
    }
    assert_eq!(gate[1]["decided_by"], "terminal");
    assert_eq!(gate[0]["channels"]["terminal"], true);
}

/// While the terminal asks, nothing the agent prints reaches the terminal:
/// a background loop of the agent's keeps printing, and its lines appear
/// before the question or after the answer, never in between.
fn terminal_holds_the_agents_output() {
    let fx = Fixture::new(McpServerOptions::default());
    let webhook = fx.webhook(Answer::Never);
    let noise = "(i=0; while [ $i -lt 150 ]; do echo \"noise $i\"; i=$((i+1)); sleep 0.02; done) &";
    let file = fx.agentfile(
        &Setup::default(),
        &[
            noise.into(),
            "sleep 0.3".into(),
            call("pay", "pay_invoice", INVOICE),
            "wait".into(),
        ],
    );
    let pty = UnderPty::start(&fx, &file, &webhook);
    let question = "approve? [a]pprove / [d]eny";
    pty.wait_for(question);
    // The agent keeps printing all the while; give it time to be seen.
    std::thread::sleep(Duration::from_millis(500));
    let (status, shown) = pty.answer("a\n");
    assert!(status.success(), "{shown}");
    let asked = shown.find("human gate:").expect("the prompt");
    let answered = shown.find("approved at the terminal").expect("the answer");
    let during = &shown[asked..answered];
    assert!(
        !during.contains("noise"),
        "agent output inside the prompt:\n{during}"
    );
    assert!(shown[..asked].contains("noise 0"), "{shown}");
    assert!(
        shown[answered..].contains("noise 149"),
        "lines were lost:\n{shown}"
    );
}

// ---------------------------------------------------------------------------
// Spend caps

/// `n` concurrent calls of `tool`; prints `charged N` and `refused N`.
fn concurrent_calls(n: usize, tool: &str) -> String {
    format!(
        r#"for i in $(seq {n}); do ( ./mcp-client {CLIENT_SUBCOMMAND} call "$CONSTLE_MCP_ACCOUNTING_URL" {tool} '{INVOICE}' > /tmp/out.$i 2>&1 ) & done; wait
echo "charged $(cat /tmp/out.* | grep -c '^result: invoice')"
echo "refused $(cat /tmp/out.* | grep -c 'spend cap')""#
    )
}

fn count(out: &Output, what: &str) -> usize {
    text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{what} ")))
        .unwrap_or_else(|| panic!("no {what} count\n{}", report(out)))
        .parse()
        .unwrap()
}

fn priced(spending: &str) -> Setup<'static> {
    Setup {
        pricing: "{default_usd: \"0.10\"}",
        spending: spending.to_owned(),
        ..Setup::default()
    }
}

fn hundred_against_ten() {
    let fx = Fixture::new(McpServerOptions::default());
    let file = fx.agentfile(
        &priced("max_per_run_usd: \"1.00\""),
        &[concurrent_calls(100, "get_invoice")],
    );
    let out = fx.run(&file, None);
    assert!(out.status.success(), "{}", report(&out));
    assert_eq!(
        (count(&out, "charged"), count(&out, "refused")),
        (10, 90),
        "{}",
        report(&out)
    );
    assert_eq!(fx.forwarded().len(), 10);
    let charged = events(&fx.case, "spend_charged");
    let refused = events(&fx.case, "spend_refused");
    assert_eq!((charged.len(), refused.len()), (10, 90));
    assert!(charged.iter().any(|e| e["run_usd"] == "1.00"));
    assert!(
        refused
            .iter()
            .all(|e| e["cap"] == "max_per_run_usd" && e["amount_usd"] == "0.10")
    );
}

fn day_cap_across_runs() {
    let fx = Fixture::new(McpServerOptions::default());
    let setup = priced("max_per_day_usd: \"0.25\"");
    let calls: Vec<String> = (1..=3)
        .map(|n| call(&format!("c{n}"), "get_invoice", INVOICE))
        .collect();
    let file = fx.agentfile(&setup, &calls);
    let first = fx.run(&file, None);
    let statuses: Vec<i32> = (1..=3)
        .map(|n| outcome(&first, &format!("c{n}")).1)
        .collect();
    assert_eq!(statuses, [0, 0, 3], "{}", report(&first));
    assert!(
        text(&first.stderr).contains("max_per_day_usd 0.25 USD: 0.00 spent today"),
        "{}",
        report(&first)
    );
    let second = fx.run(&file, None);
    let statuses: Vec<i32> = (1..=3)
        .map(|n| outcome(&second, &format!("c{n}")).1)
        .collect();
    assert_eq!(
        statuses,
        [3, 3, 3],
        "the day's total is durable\n{}",
        report(&second)
    );
    assert!(
        text(&second.stderr).contains("0.20 spent today"),
        "{}",
        report(&second)
    );
    assert_eq!(fx.forwarded().len(), 2);
    let shown = fx.case.run(&["spend", "show", file.to_str().unwrap()]);
    assert!(shown.status.success(), "{}", report(&shown));
    let shown = text(&shown.stdout);
    assert!(shown.contains(&fx.agent_did), "{shown}");
    assert!(
        shown.contains("0.20 USD of 0.25 (max_per_day_usd)"),
        "{shown}"
    );
    // The second run charged nothing: the last run with charges is the first.
    assert!(shown.contains("last run with charges"), "{shown}");
    assert!(shown.contains("0.20 USD (no max_per_run_usd)"), "{shown}");
}

fn unusable_ledger() {
    let fx = Fixture::new(McpServerOptions::default());
    // Where the embedded ledger's directory should be, a file.
    fs::create_dir_all(fx.case.home()).unwrap();
    fs::write(fx.case.home().join("ledger"), "not a directory").unwrap();
    let setup = Setup {
        pricing: "{tools: {get_invoice: \"0.10\"}}",
        spending: "max_per_run_usd: 5".into(),
        ..Setup::default()
    };
    let file = fx.agentfile(
        &setup,
        &[
            call("priced", "get_invoice", INVOICE),
            call("free", "list_invoices", "{}"),
        ],
    );
    let out = fx.run(&file, None);
    assert!(out.status.success(), "{}", report(&out));
    let (said, status) = outcome(&out, "priced");
    assert_eq!(status, 3, "{said}");
    assert!(said.contains("ledger"), "{said}");
    assert_eq!(outcome(&out, "free").1, 0);
    assert_eq!(fx.forwarded(), ["list_invoices"]);
    let refused = events(&fx.case, "spend_refused");
    assert_eq!(refused[0]["reason"], "ledger_unavailable");
}

fn redis_shared() {
    if !constle_testkit::require_tools("runs share caps through redis", &["redis-server"]) {
        return;
    }
    let redis = constle_testkit::RedisServer::start().unwrap();
    // Two machines: two homes with the same agent key, one Redis.
    let one = Fixture::new(McpServerOptions::default());
    let two = Fixture::new(McpServerOptions::default());
    fs::remove_dir_all(two.case.home().join("keys")).unwrap();
    copy_dir(&one.case.home().join("keys"), &two.case.home().join("keys"));
    let setup = priced(&format!("max_per_day_usd: 1\n  ledger: {}", redis.url()));
    let spawn = |fx: &Fixture| {
        let mut fx_file = fx.agentfile(&setup, &[concurrent_calls(20, "get_invoice")]);
        let text = fs::read_to_string(&fx_file)
            .unwrap()
            .replace(&fx.agent_did, &one.agent_did);
        fx_file.set_file_name("shared.yaml");
        fs::write(&fx_file, text).unwrap();
        fx.case
            .command(&["run", fx_file.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(&one), spawn(&two));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(
        a.status.success() && b.status.success(),
        "{}\n{}",
        report(&a),
        report(&b)
    );
    assert_eq!(
        count(&a, "charged") + count(&b, "charged"),
        10,
        "{}\n{}",
        report(&a),
        report(&b)
    );
    assert_eq!(one.forwarded().len() + two.forwarded().len(), 10);
}

fn copy_dir(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    fs::create_dir_all(to).unwrap();
    fs::set_permissions(to, fs::Permissions::from_mode(0o700)).unwrap();
    for entry in fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}
