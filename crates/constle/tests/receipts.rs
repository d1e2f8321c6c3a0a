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
use common::{e2e, fields, report, text};

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
            "a_receipt_and_a_witnessed_log_verify_as_json_with_the_same_exit_status",
            as_json,
        ),
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

/// The one object `--format json` printed, alone on its line.
fn json_object(out: &Output) -> Value {
    let said = text(&out.stdout);
    assert_eq!(said.lines().count(), 1, "{}", report(out));
    assert!(said.ends_with('\n'), "{}", report(out));
    serde_json::from_str(&said).unwrap()
}

/// `verify-receipt --format json` and `audit verify --format json` of a
/// witnessed log: what the text says, field by field, and the same exit
/// status for a good receipt and an edited one.
fn as_json() {
    let fx = Witnessed::new();
    let started = fx.run();
    let file = fx.agent.case.path("run.receipt.json");
    fx.receipt(&file, &[]);
    let written = receipt_json(&file);
    let logs = fx.logs();
    let (pin, log) = (fx.pin(), format!("--log={}", logs.display()));

    let out = fx.verify(&file, &[&pin, &log, "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let said = json_object(&out);
    assert_eq!(said["ok"], true);
    assert_eq!(said["file"], file.to_str().unwrap());
    assert_eq!(said["error"], Value::Null);
    let receipt = &said["receipt"];
    let human = text(&fx.verify(&file, &[&pin, &log]).stdout);
    assert_eq!(receipt["agent"], "test-agent");
    let did = receipt["did"].as_str().unwrap();
    assert!(
        human.contains(&format!("agent:      test-agent ({did})")),
        "{human}"
    );
    let origin = receipt["origin"].as_str().unwrap();
    assert!(human.contains(&format!("origin:     {origin}")), "{human}");
    assert_eq!(receipt["pinned"], true);
    let run = &receipt["run"];
    assert_eq!(run["started_seq"], started);
    assert_eq!(run["finished_seq"], written["run_finished"]["entry"]["seq"]);
    assert_eq!(run["exit_status"], 0);
    for at in ["started_at", "finished_at"] {
        let ts: jiff::Timestamp = run[at].as_str().unwrap().parse().unwrap();
        let shown = ts.strftime("%Y-%m-%d %H:%M:%S UTC").to_string();
        assert!(human.contains(&shown), "{at}: {shown}\n{human}");
    }
    assert_eq!(receipt["policy_digest"], written["policy_digest"]);
    assert_eq!(receipt["tools"], serde_json::json!([]));
    let checkpoint = &receipt["checkpoint"];
    let line = format!(
        "checkpoint: size {}, root {}, signed by the agent's key",
        checkpoint["size"],
        checkpoint["root"].as_str().unwrap()
    );
    assert!(human.contains(&line), "{line}\n{human}");
    let witnesses: Vec<&str> = receipt["cosignatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert!(c["timestamp"].as_u64().unwrap() > 0, "{c}");
            c["witness"].as_str().unwrap()
        })
        .collect();
    assert_eq!(witnesses.len(), 2, "{receipt}");
    assert!(witnesses.contains(&"w1.example.org") && witnesses.contains(&"w2.example.org"));
    assert_eq!(receipt["quorum"], 2);
    assert_eq!(receipt["entries"], 2);
    let matched = &receipt["log"];
    assert_eq!(matched["dir"], logs.to_str().unwrap());
    assert!(
        matched["log_entries"].as_u64().unwrap() >= checkpoint["size"].as_u64().unwrap(),
        "{matched}"
    );
    assert!(matched["run_entries"].as_u64().unwrap() >= 2, "{matched}");
    let unpinned = json_object(&fx.verify(&file, &["--format=json"]));
    assert_eq!(unpinned["receipt"]["pinned"], false);
    assert_eq!(unpinned["receipt"]["log"], Value::Null);

    // An edited receipt: exit 1 either way, and the reason the text gives.
    let edited = fx.agent.case.path("edited.receipt.json");
    let bytes = fs::read_to_string(&file).unwrap();
    fs::write(
        &edited,
        bytes.replacen("w1.example.org", "w9.example.org", 1),
    )
    .unwrap();
    let human = fx.verify(&edited, &[&pin]);
    let out = fx.verify(&edited, &[&pin, "--format", "json"]);
    assert_eq!(human.status.code(), Some(1), "{}", report(&human));
    assert_eq!(out.status.code(), Some(1), "{}", report(&out));
    let said = json_object(&out);
    let reason = text(&human.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(
        said,
        serde_json::json!({"ok": false, "file": edited.to_str().unwrap(), "error": reason, "receipt": null})
    );

    // The log and what its witnesses cosigned of it: a line each, then
    // the summary.
    let day = fx.agent.case.log_file();
    let out = fx.constle(&[
        "audit",
        "verify",
        "--format",
        "json",
        &pin,
        day.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{}", report(&out));
    assert_eq!(lines[0]["type"], "log");
    assert_eq!(lines[0]["ok"], true);
    let witnessed = &lines[1];
    assert_eq!(
        fields(witnessed),
        [
            "agent",
            "cosigned",
            "coverage",
            "dir",
            "entries",
            "error",
            "findings",
            "notes",
            "ok",
            "quorum",
            "type",
            "witnessed"
        ]
    );
    assert_eq!(witnessed["type"], "witnesses");
    assert_eq!(witnessed["ok"], true);
    assert_eq!(witnessed["agent"], "test-agent");
    assert_eq!(witnessed["dir"], day.parent().unwrap().to_str().unwrap());
    assert_eq!(witnessed["error"], Value::Null);
    assert_eq!(witnessed["quorum"], 2);
    let size = witnessed["entries"].as_u64().unwrap();
    let upto = witnessed["witnessed"].as_u64().unwrap();
    assert!(upto > 0 && upto <= size, "{witnessed}");
    for reach in witnessed["cosigned"].as_array().unwrap() {
        assert!(reach["size"].as_u64().unwrap() >= upto, "{witnessed}");
    }
    let human = text(
        &fx.constle(&["audit", "verify", &pin, day.to_str().unwrap()])
            .stdout,
    );
    let coverage = witnessed["coverage"].as_str().unwrap();
    assert!(
        human.contains(&format!("  witnessed: {coverage}\n")),
        "{human}"
    );
    assert_eq!(
        lines[2],
        serde_json::json!({"type": "summary", "ok": true, "logs": 1, "failed": 0})
    );
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
    let json = json_object(&fx.verify(&file, &[&fx.pin(), &log, "--format=json"]));
    let listed = &json["receipt"]["tools"];
    assert_eq!(listed.as_array().unwrap().len(), 1, "{json}");
    assert_eq!(listed[0]["server"], "accounting");
    assert_eq!(listed[0]["seq"], entry["seq"]);
    assert_eq!(listed[0]["tools"], entry["tools"]);
    let digest = listed[0]["digest"].as_str().unwrap();
    assert!(said.contains(&format!("({digest})")), "{said}");
    assert_eq!(json["receipt"]["entries"], 3);
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
    let out = fx.verify(&file, &[&fx.pin(), &log, "--format", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", report(&out));
    let said = json_object(&out);
    assert_eq!(said["ok"], false);
    assert!(
        said["error"].as_str().unwrap().contains("leaves some out"),
        "{said}"
    );
}
