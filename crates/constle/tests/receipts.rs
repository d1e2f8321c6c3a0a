//! `constle audit receipt` and `constle audit verify-receipt` end to end:
//! real runs, checkpointed and cosigned by real `constle witness serve`s in
//! network namespaces of their own (see `common::witnesses`), their
//! receipts written, verified offline with and without the Agentfile and
//! against the log, edited, and held against a log started over with the
//! agent's own key.

// Helpers outside `#[test]` functions report through panics too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Output;

use constle_identity::SigningIdentity;
use constle_testkit::Agentfile;
use constle_testkit::mcp::{McpServerOptions, TestMcpServer};
use libtest_mimic::Arguments;
use serde_json::Value;

mod common;

use common::mcp::{Parties, Setup, step};
use common::witnesses::{Agent, DEPLOYMENT, NsWitness};
use common::{e2e, report, text};

fn main() {
    common::mcp::be_the_client_if_asked();
    let tests = vec![
        e2e(
            "a_receipt_shows_the_tools_the_server_offered_the_agent",
            tools_offered,
        ),
        e2e(
            "a_receipt_of_a_witnessed_run_verifies_offline_and_against_its_log",
            written_and_verified,
        ),
        e2e("an_edited_receipt_does_not_verify", edited),
        e2e(
            "a_log_started_over_after_the_receipt_is_caught_with_log",
            started_over,
        ),
        e2e(
            "a_run_nobody_witnessed_has_no_receipt_and_says_why",
            unwitnessed,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

/// An agent whose runs two witnesses cosign, both required.
struct Witnessed {
    agent: Agent,
    agentfile: PathBuf,
    // Kept serving while the test runs.
    _witnesses: [NsWitness; 2],
}

impl Witnessed {
    fn new() -> Witnessed {
        Witnessed::with(|agent, entries| agent.agentfile("echo hello", entries, 2, false))
    }

    /// The witnesses serving, and the Agentfile `agentfile` writes for
    /// them (given their entries).
    fn with(agentfile: impl FnOnce(&Agent, &[String]) -> PathBuf) -> Witnessed {
        let agent = Agent::new();
        let mut w1 = NsWitness::new(&agent.case, "w1.example.org", &agent.log);
        let mut w2 = NsWitness::new(&agent.case, "w2.example.org", &agent.log);
        let entries = [w1.serve().entry(), w2.serve().entry()];
        let agentfile = agentfile(&agent, &entries);
        Witnessed {
            agent,
            agentfile,
            _witnesses: [w1, w2],
        }
    }

    /// Runs the agent, which must succeed: its `run_started`'s seq.
    fn run(&self) -> u64 {
        let out = self.agent.run(&self.agentfile);
        assert_eq!(out.status.code(), Some(0), "{}", report(&out));
        let started = self.agent.events("run_started");
        started.last().unwrap()["seq"].as_u64().unwrap()
    }

    fn logs(&self) -> PathBuf {
        self.agent.case.home().join("logs")
    }

    fn pin(&self) -> String {
        format!("--agentfile={}", self.agentfile.display())
    }

    fn constle(&self, args: &[&str]) -> Output {
        self.agent.case.run(args)
    }

    /// `audit receipt` into `out` with `extra` arguments, which must succeed.
    fn receipt(&self, out: &Path, extra: &[&str]) -> Output {
        let (pin, out) = (self.pin(), format!("--out={}", out.display()));
        let mut args = vec!["audit", "receipt", &pin, &out];
        args.extend(extra);
        let done = self.constle(&args);
        assert_eq!(done.status.code(), Some(0), "{}", report(&done));
        done
    }

    /// `audit verify-receipt FILE` with `extra` arguments.
    fn verify(&self, file: &Path, extra: &[&str]) -> Output {
        let mut args = vec!["audit", "verify-receipt", file.to_str().unwrap()];
        args.extend(extra);
        self.constle(&args)
    }
}

fn receipt_json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

fn written_and_verified() {
    let fx = Witnessed::new();
    let first = fx.run();
    let second = fx.run();
    let logs = fx.logs();
    let file = fx.agent.case.path("latest.receipt.json");
    let written = fx.receipt(&file, &[logs.to_str().unwrap()]);
    let said = text(&written.stdout);
    assert!(said.contains("✓ receipt written"), "{said}");
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o644
    );
    let receipt = receipt_json(&file);
    assert_eq!(receipt["type"], "constle-run-receipt");
    assert_eq!(
        receipt["run_started"]["entry"]["seq"], second,
        "the latest run"
    );
    assert_eq!(receipt["witnesses"].as_array().unwrap().len(), 2);
    let recorded = fx.agent.events("run_started");
    assert_eq!(receipt["policy_digest"], recorded[1]["policy_digest"]);

    // Offline, pinned by the Agentfile.
    let out = fx.verify(&file, &[&fx.pin()]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    assert!(said.contains("✓ receipt verified"), "{said}");
    assert!(
        said.contains("w1.example.org") && said.contains("w2.example.org"),
        "{said}"
    );
    assert!(!said.contains("taken from the receipt itself"), "{said}");
    // Offline, with nothing but the receipt.
    let out = fx.verify(&file, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    assert!(
        text(&out.stdout).contains("taken from the receipt itself"),
        "{}",
        report(&out)
    );
    // Against the log, given as its directory and as a day file.
    let day = fx.agent.case.log_file();
    for log in [logs.as_path(), day.as_path()] {
        let log = format!("--log={}", log.display());
        let out = fx.verify(&file, &[&fx.pin(), &log]);
        assert_eq!(out.status.code(), Some(0), "{}", report(&out));
        assert!(
            text(&out.stdout).contains("are the cosigned ones"),
            "{}",
            report(&out)
        );
    }

    // The first run, by its seq, into the default file name, from the
    // log under $CONSTLE_HOME.
    let run = first.to_string();
    let pin = fx.pin();
    let out = fx.constle(&["audit", "receipt", &pin, "--run", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let default = fx
        .agent
        .case
        .path(&format!("test-agent-run-{first}.receipt.json"));
    assert_eq!(
        receipt_json(&default)["run_finished"]["entry"]["run_started_seq"],
        first
    );
    let out = fx.verify(&default, &[&fx.pin()]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
}

fn edited() {
    let fx = Witnessed::new();
    fx.run();
    let file = fx.agent.case.path("run.receipt.json");
    fx.receipt(&file, &[]);
    let bytes = fs::read(&file).unwrap();
    let copy = fx.agent.case.path("edited.receipt.json");
    // Bytes spread over the whole file, each edited alone.
    for index in (0..bytes.len()).step_by(bytes.len() / 40) {
        let mut edited = bytes.clone();
        edited[index] ^= 0x01;
        fs::write(&copy, &edited).unwrap();
        let out = fx.verify(&copy, &[]);
        assert_eq!(out.status.code(), Some(1), "byte {index}: {}", report(&out));
        assert!(
            text(&out.stdout).contains("RECEIPT INVALID"),
            "{}",
            report(&out)
        );
    }
    // Unedited, but for another installation's Agentfile.
    let elsewhere = fs::read_to_string(&fx.agentfile)
        .unwrap()
        .replace("deployment: ci.example.com", "deployment: prod.example.com");
    let other = fx.agent.case.path("other.yaml");
    fs::write(&other, elsewhere).unwrap();
    let out = fx.verify(&file, &[&format!("--agentfile={}", other.display())]);
    assert_eq!(out.status.code(), Some(1), "{}", report(&out));
    assert!(text(&out.stdout).contains("origin"), "{}", report(&out));
    // A file that is not there is no verdict.
    let out = fx.verify(&fx.agent.case.path("missing.json"), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", report(&out));
}

fn started_over() {
    let fx = Witnessed::new();
    fx.run();
    let file = fx.agent.case.path("run.receipt.json");
    fx.receipt(&file, &[]);
    // The key holder moves the log aside and runs again: a new chain,
    // signed with the same key (the witnesses refuse to cosign it).
    let logs = fx.logs();
    fs::rename(&logs, fx.agent.case.path("old-logs")).unwrap();
    fx.run();
    let log = format!("--log={}", logs.display());
    let out = fx.verify(&file, &[&fx.pin(), &log]);
    assert_eq!(out.status.code(), Some(1), "{}", report(&out));
    assert!(text(&out.stdout).contains("rewritten"), "{}", report(&out));
    // Offline, what it shows of the past still holds.
    let out = fx.verify(&file, &[&fx.pin()]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    // And the new log has no receipt.
    let pin = fx.pin();
    let out = fx.constle(&["audit", "receipt", &pin]);
    assert_eq!(out.status.code(), Some(2), "{}", report(&out));
    assert!(
        text(&out.stderr).contains("cosignatures"),
        "{}",
        report(&out)
    );
}

fn unwitnessed() {
    let agent = Agent::new();
    let agentfile = agent.case.write_agentfile(
        &Agentfile::new("test-agent")
            .did(agent.log.did().as_str())
            .egress("none")
            .section("audit:\n  deployment: ci.example.com\n"),
    );
    let out = agent.run(&agentfile);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let pin = format!("--agentfile={}", agentfile.display());
    let out = agent.case.run(&["audit", "receipt", &pin]);
    assert_eq!(out.status.code(), Some(2), "{}", report(&out));
    assert!(
        text(&out.stderr).contains("declares no witnesses"),
        "{}",
        report(&out)
    );
}

/// An agent that lists the tools of an MCP server twice (the server has
/// more than the Agentfile declares), then exits: its receipt shows the
/// filtered list once, as the agent got it.
fn tools_offered() {
    let server = TestMcpServer::start(McpServerOptions::default()).unwrap();
    let approver = SigningIdentity::generate();
    let fx = Witnessed::with(|agent, entries| {
        agent.case.install_mcp_client();
        let who = Parties {
            agent_did: agent.log.did().as_str(),
            approver_did: approver.did().as_str(),
            server: &server,
            webhook_var: "TEST_RECEIPT_WEBHOOK_URL",
        };
        let steps = [step("list", "list $URL"), step("again", "list $URL")];
        let file = agent.case.gated_agentfile(&who, &Setup::default(), &steps);
        let audit = format!(
            "audit:\n  deployment: {DEPLOYMENT}\n  witnesses:\n{}  witness_quorum: 2\n",
            entries.concat()
        );
        let mut text = fs::read_to_string(&file).unwrap();
        text.push_str(&audit);
        fs::write(&file, text).unwrap();
        file
    });
    let started = fx.run();
    let file = fx.agent.case.path("run.receipt.json");
    fx.receipt(&file, &[]);
    let receipt = receipt_json(&file);
    let offered = receipt["tools_offered"].as_array().unwrap();
    assert_eq!(offered.len(), 1, "{offered:?}");
    let entry = &offered[0]["entry"];
    let mut tools: Vec<&str> = (entry["tools"].as_array().unwrap().iter())
        .map(|t| t.as_str().unwrap())
        .collect();
    tools.sort_unstable();
    assert_eq!(tools, ["get_invoice", "list_invoices", "pay_invoice"]);
    assert_eq!(entry["server"], "accounting");
    assert!(entry["seq"].as_u64().unwrap() > started);
    let log = format!("--log={}", fx.logs().display());
    let out = fx.verify(&file, &[&fx.pin(), &log]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let said = text(&out.stdout);
    assert!(said.contains("accounting (entry"), "{said}");
    // The list left out: offline it still verifies, against the log not.
    let mut value = receipt.clone();
    value["tools_offered"] = Value::Array(Vec::new());
    fs::write(&file, constle_json::canonical_value(&value)).unwrap();
    let out = fx.verify(&file, &[&fx.pin()]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let out = fx.verify(&file, &[&fx.pin(), &log]);
    assert_eq!(out.status.code(), Some(1), "{}", report(&out));
    assert!(
        text(&out.stdout).contains("leaves some out"),
        "{}",
        report(&out)
    );
}
