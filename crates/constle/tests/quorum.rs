//! Several approvers and a threshold (`human_gates.approvers`, protocol
//! v2), end to end: the real `constle run`, the testkit's rmcp client in the
//! sandbox calling a real MCP server through the gate, and simulated
//! decision endpoints signing with real keys, honestly or not. Then
//! `constle audit verify --agentfile` on the log, and on the log rewritten
//! and re-signed by whoever holds the agent key. Loopback only.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use constle_identity::{Name, SigningIdentity};
use constle_testkit::{Answer, McpServerOptions, SimulatedApprover, TestMcpServer};
use libtest_mimic::Arguments;
use serde_json::Value;

mod common;
use common::log::reseal;
use common::mcp::{call, listed_approvers, outcome, quorum_webhook_var};
use common::{Case, e2e, report, text};

const INVOICE: &str = r#"{"invoice_id":"INV-0042"}"#;

fn main() {
    common::mcp::be_the_client_if_asked();
    let tests = vec![
        e2e(
            "two_of_three_approve_once_one_denial_denies_and_misbound_votes_count_for_nothing",
            two_of_three,
        ),
        e2e(
            "one_key_twice_an_expired_a_v1_and_an_outsider_signature_are_not_a_quorum",
            not_a_quorum,
        ),
        e2e(
            "an_approver_set_rotates_a_key_out_and_refuses_rollbacks_and_under_signed_versions",
            approver_set,
        ),
        e2e(
            "a_set_that_cannot_be_loaded_at_call_time_refuses_the_call_naming_no_host_path",
            set_unusable_at_call_time,
        ),
        e2e(
            "a_terminal_vote_written_into_the_log_completes_no_quorum_the_agentfile_denies_it",
            terminal_vote_rewritten,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

/// An agent with an identity whose three gated tools need two of three
/// approvers, and the invoice server it calls.
struct Fixture {
    case: Case,
    approvers: [SigningIdentity; 3],
    agent_did: String,
    server: TestMcpServer,
}

impl Fixture {
    fn new() -> Fixture {
        let case = Case::new();
        case.install_mcp_client();
        let agent_did = case.keygen(&["keygen", "agent"]);
        Fixture {
            case,
            approvers: std::array::from_fn(|_| SigningIdentity::generate()),
            agent_did,
            server: TestMcpServer::start(McpServerOptions::default()).unwrap(),
        }
    }

    /// The Agentfile, its webhooks in `quorum_webhook_var(0..endpoints)`.
    fn agentfile(&self, endpoints: usize, steps: &[String]) -> PathBuf {
        let dids: Vec<String> = self.approvers.iter().map(|k| k.did().to_string()).collect();
        let listed: Vec<(&str, &str)> = ["alice", "bob", "carol"]
            .into_iter()
            .zip(dids.iter().map(String::as_str))
            .collect();
        self.agentfile_with(&listed_approvers(&listed, 2), endpoints, steps)
    }

    /// With `approvers` (the `human_gates` lines naming them).
    fn agentfile_with(&self, approvers: &str, endpoints: usize, steps: &[String]) -> PathBuf {
        let url = self.server.url();
        self.case
            .quorum_agentfile(&self.agent_did, &url, approvers, endpoints, 4, steps)
    }

    /// An endpoint signing with approver `n`'s key (or `key`).
    fn endpoint(&self, key: &SigningIdentity, answers: &[(&str, Answer)]) -> SimulatedApprover {
        let key = SigningIdentity::from_pkcs8_pem(&key.to_pkcs8_pem()).unwrap();
        let answers = answers.iter().map(|(tool, a)| ((*tool).to_owned(), *a));
        SimulatedApprover::start(key, answers, Answer::Never).unwrap()
    }

    fn run(&self, file: &Path, endpoints: &[&SimulatedApprover]) -> Output {
        let mut command = self.case.command(&["run", file.to_str().unwrap()]);
        for (n, endpoint) in endpoints.iter().enumerate() {
            command.env(quorum_webhook_var(n), endpoint.url());
        }
        command.stdin(Stdio::null()).output().unwrap()
    }

    /// How often `tool` reached the server.
    fn reached(&self, tool: &str) -> usize {
        self.server
            .calls()
            .iter()
            .filter(|c| c.tool == tool)
            .count()
    }

    /// `constle audit verify --agentfile` passes on `log`.
    fn verifies(&self, file: &Path, log: &Path) {
        let (status, said) = self.verify(file, log);
        assert_eq!(status, Some(0), "{said}");
    }

    /// `constle audit verify --agentfile` on `log`: its status and output.
    fn verify(&self, file: &Path, log: &Path) -> (Option<i32>, String) {
        self.case.audit_verify(file, log)
    }
}

/// The `gate_vote` entries for `tool`: each vote's approver, and its
/// reason when it was rejected.
fn votes(case: &Case, tool: &str) -> Vec<(Option<String>, Option<String>)> {
    let triggered = case.events("gate_triggered");
    let request = triggered.iter().find(|e| e["tool"] == tool).unwrap()["request_id"].clone();
    case.events("gate_vote")
        .iter()
        .filter(|v| v["request_id"] == request)
        .map(|v| {
            let text = |k: &str| v[k].as_str().map(str::to_owned);
            (text("approver"), text("reason"))
        })
        .collect()
}

fn two_of_three() {
    let fx = Fixture::new();
    let [a, b, c] = &fx.approvers;
    use Answer::{Approve, Deny, Never, WrongPolicy, WrongServer, WrongTool};
    let alice = fx.endpoint(
        a,
        &[
            ("pay_invoice", Approve),
            ("get_invoice", Approve),
            ("list_invoices", WrongPolicy),
        ],
    );
    let bob = fx.endpoint(
        b,
        &[
            ("pay_invoice", Approve),
            ("get_invoice", Deny),
            ("list_invoices", WrongTool),
        ],
    );
    let carol = fx.endpoint(
        c,
        &[
            ("pay_invoice", Never),
            ("get_invoice", Never),
            ("list_invoices", WrongServer),
        ],
    );
    let steps = [
        call("pay", "pay_invoice", INVOICE),
        call("get", "get_invoice", INVOICE),
        call("list", "list_invoices", "{}"),
    ];
    let file = fx.agentfile(3, &steps);
    let out = fx.run(&file, &[&alice, &bob, &carol]);
    let report = report(&out);
    let stdout = text(&out.stdout);
    // Two approvals forward the call, once.
    assert_eq!(outcome(&stdout, "pay", &report).1, 0, "{report}");
    assert_eq!(fx.reached("pay_invoice"), 1, "{report}");
    // One verified denial denies, whatever the approvals.
    let (said, status) = outcome(&stdout, "get", &report);
    assert_eq!(status, 3, "{said}");
    assert!(said.contains("an approver denied it"), "{said}");
    assert_eq!(fx.reached("get_invoice"), 0);
    // Votes for another policy, tool or server count for nothing: no
    // quorum by the deadline, and on_timeout: abort stops the run.
    assert_eq!(out.status.code(), Some(125), "{report}");
    assert_eq!(fx.reached("list_invoices"), 0);
    let reasons: BTreeSet<Option<String>> = votes(&fx.case, "list_invoices")
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let expected = [
        "gate_policy_mismatch",
        "gate_tool_mismatch",
        "gate_server_mismatch",
    ];
    assert_eq!(
        reasons,
        expected.iter().map(|r| Some((*r).to_owned())).collect(),
        "{report}"
    );
    let approved = fx.case.events("gate_approved");
    assert_eq!(approved.len(), 1);
    assert_eq!(approved[0]["decided_by"], "quorum");
    let mut quorum: Vec<&str> = approved[0]["approvers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    quorum.sort_unstable();
    let mut expected = [a.did().as_str(), b.did().as_str()];
    expected.sort_unstable();
    assert_eq!(quorum, expected);
    // The salt went to the endpoints and nowhere into the log.
    let salt = alice.requests()[0]["salt"].as_str().unwrap().to_owned();
    assert_eq!(salt.len(), 64);
    assert!(
        !fs::read_to_string(fx.case.log_file())
            .unwrap()
            .contains(&salt)
    );

    let log = fx.case.log_file();
    fx.verifies(&file, &log);
    caught_when_rewritten(&fx, &file);
}

/// The log rewritten and re-signed with the agent's own key, as its holder
/// could: a vote relabeled to another tool, a denial edited into an
/// approval, a vote of the quorum removed. Each is caught.
fn caught_when_rewritten(fx: &Fixture, file: &Path) {
    type Edit = Box<dyn FnMut(&mut Value) -> bool>;
    let (pay, get) = (
        request_of(&fx.case, "pay_invoice"),
        request_of(&fx.case, "get_invoice"),
    );
    let relabel: Edit = Box::new({
        let pay = pay.clone();
        move |e| {
            if vote_of(e, &pay) {
                e["tool"] = Value::from("get_invoice");
            }
            true
        }
    });
    let approve_denial: Edit = Box::new(move |e| {
        if vote_of(e, &get) && e["decision"] == "denied" {
            e["decision"] = Value::from("approved");
        }
        true
    });
    let mut removed = false;
    let remove_vote: Edit = Box::new(move |e| {
        let first = !removed && vote_of(e, &pay);
        removed |= first;
        !first
    });
    let edits = [
        ("relabeled", relabel, "approval_signature_invalid"),
        (
            "denial_edited",
            approve_denial,
            "approval_signature_invalid",
        ),
        ("vote_removed", remove_vote, "quorum_unproven"),
    ];
    for (name, edit, finding) in edits {
        let rewritten = rewrite(fx, name, edit);
        let (status, said) = fx.verify(file, &rewritten);
        assert_eq!(status, Some(1), "{name}: {said}");
        assert!(said.contains(finding), "{name}: {said}");
    }
}

fn request_of(case: &Case, tool: &str) -> Value {
    case.events("gate_triggered")
        .iter()
        .find(|e| e["tool"] == tool)
        .unwrap()["request_id"]
        .clone()
}

fn vote_of(entry: &Value, request: &Value) -> bool {
    entry["event"] == "gate_vote" && entry["request_id"] == *request && entry["verified"] == true
}

/// The run's log written again by a writer holding the agent's key, each
/// entry as `keep` leaves it (edited in place), those it returns false
/// for left out: the day file of the new log.
fn rewrite(fx: &Fixture, name: &str, mut keep: Box<dyn FnMut(&mut Value) -> bool>) -> PathBuf {
    let mut entries = fx.case.log();
    entries.retain_mut(|entry| keep(entry));
    resealed(fx, name, &entries)
}

/// `entries` written as a new log by a writer holding the agent's key: the
/// day file of the new log.
fn resealed(fx: &Fixture, name: &str, entries: &[Value]) -> PathBuf {
    let key = fs::read_to_string(fx.case.home().join("keys/agent/agent.pem")).unwrap();
    let key = SigningIdentity::from_pkcs8_pem(&key).unwrap();
    let dir = fx.case.path(&format!("rewritten-{name}"));
    fs::create_dir(&dir).unwrap();
    let agent = Name::new("test-agent").unwrap();
    reseal(entries, &dir, &agent, key).remove(0)
}

fn not_a_quorum() {
    let fx = Fixture::new();
    let [a, b, c] = &fx.approvers;
    let outsider = SigningIdentity::generate();
    let pay = |answer| [("pay_invoice", answer)];
    let endpoints = [
        fx.endpoint(a, &pay(Answer::Approve)),
        // The same approver's signature relayed by a second endpoint.
        fx.endpoint(a, &pay(Answer::Approve)),
        fx.endpoint(b, &pay(Answer::Expired)),
        fx.endpoint(c, &pay(Answer::V1Signature)),
        fx.endpoint(&outsider, &pay(Answer::Approve)),
    ];
    let file = fx.agentfile(endpoints.len(), &[call("pay", "pay_invoice", INVOICE)]);
    let out = fx.run(&file, &endpoints.iter().collect::<Vec<_>>());
    let report = report(&out);
    assert_eq!(out.status.code(), Some(125), "{report}");
    assert_eq!(fx.reached("pay_invoice"), 0, "{report}");
    let mut seen = votes(&fx.case, "pay_invoice");
    seen.sort();
    let mut expected = vec![
        (Some(a.did().to_string()), None),
        (Some(a.did().to_string()), None),
        (
            Some(b.did().to_string()),
            Some("gate_request_expired".to_owned()),
        ),
        (
            Some(c.did().to_string()),
            Some("gate_signature_invalid".to_owned()),
        ),
        (
            Some(outsider.did().to_string()),
            Some("gate_approver_unknown".to_owned()),
        ),
    ];
    expected.sort();
    assert_eq!(seen, expected, "{report}");
    let timeout = fx.case.events("gate_timeout");
    assert_eq!(
        (
            timeout[0]["approvals"].as_u64(),
            timeout[0]["threshold"].as_u64()
        ),
        (Some(1), Some(2))
    );
}

/// Two of alice and bob must approve, and the Agentfile says an approval at
/// the terminal does not count. Alice approves, bob never answers: no
/// quorum. The agent key's holder rewrites the log so that a terminal
/// approval after alice's vote completes the quorum and the call is
/// approved. `audit verify --agentfile` takes `terminal_approves` from the
/// Agentfile, not from the log: TAMPERING, the quorum unproven. (Under an
/// Agentfile whose terminal approvals count, the same log verifies.)
fn terminal_vote_rewritten() {
    let fx = Fixture::new();
    let [a, b, _] = &fx.approvers;
    let listed = [("alice", a.did().as_str()), ("bob", b.did().as_str())];
    let approvers = listed_approvers(&listed, 2);
    let steps = [call("pay", "pay_invoice", INVOICE)];
    let file = fx.agentfile_with(
        &format!("{approvers}  terminal_approves: false\n"),
        2,
        &steps,
    );
    let alice = fx.endpoint(a, &[("pay_invoice", Answer::Approve)]);
    let bob = fx.endpoint(b, &[("pay_invoice", Answer::Never)]);
    let out = fx.run(&file, &[&alice, &bob]);
    assert_eq!(out.status.code(), Some(125), "{}", report(&out));
    assert_eq!(fx.reached("pay_invoice"), 0);

    let pay = request_of(&fx.case, "pay_invoice");
    let triggered = fx
        .case
        .events("gate_triggered")
        .into_iter()
        .find(|e| e["request_id"] == pay)
        .unwrap();
    let decided = |event: &str, fields: Value| {
        let mut entry = triggered.clone();
        entry["event"] = Value::from(event);
        for (key, value) in fields.as_object().unwrap() {
            entry[key] = value.clone();
        }
        entry
    };
    let terminal = decided(
        "gate_vote",
        serde_json::json!({"decided_by": "terminal", "decision": "approved"}),
    );
    let approved = decided(
        "gate_approved",
        serde_json::json!({"version": 2, "decided_by": "quorum", "approvers": [a.did().as_str()], "terminal": true, "threshold": 2}),
    );
    // Alice's vote comes before the timeout: the forged entries take its
    // place.
    let mut entries = fx.case.log();
    let timeout = entries
        .iter()
        .position(|e| e["event"] == "gate_timeout" && e["request_id"] == pay)
        .unwrap();
    entries.splice(timeout..=timeout, [terminal, approved]);
    let rewritten = resealed(&fx, "terminal", &entries);
    let (status, said) = fx.verify(&file, &rewritten);
    assert_eq!(status, Some(1), "{said}");
    assert!(said.contains("TAMPERING DETECTED"), "{said}");
    assert!(said.contains("quorum_unproven"), "{said}");
    assert!(said.contains("terminal_approves: false"), "{said}");

    let counting = fx.case.path("terminal-counts.yaml");
    let text = fs::read_to_string(&file).unwrap();
    fs::write(
        &counting,
        text.replace("terminal_approves: false", "terminal_approves: true"),
    )
    .unwrap();
    fx.verifies(&counting, &rewritten);
}

/// An approver set in a directory: version 1 of alice, bob and carol (2 of
/// 3); version 2, signed by alice and bob, rotates carol out for dave. A
/// run under version 2 refuses carol's vote as a stranger's; a directory
/// put back to version 1 (a rollback) and a version 3 signed by one old
/// key stop the run before anything starts; and `audit verify` refuses a
/// log naming a set version the set does not have.
/// The approvers as a set's members, labelled.
fn named(keys: &[(&SigningIdentity, &str)]) -> Vec<constle_approver_set::Approver> {
    use constle_approver_set::{Approver, Label};
    keys.iter()
        .map(|(k, l)| Approver {
            did: k.did().clone(),
            label: Label::new(l).unwrap(),
        })
        .collect()
}

fn set_expiry() -> jiff::Timestamp {
    "2099-01-01T00:00:00Z".parse().unwrap()
}

/// An approver set in `approvers/`: version 1 (alice, bob and carol, two of
/// three, signed by alice and bob). Its directory, its version 1, and the
/// Agentfile's `human_gates` line naming it.
fn set_of_three(fx: &Fixture) -> (PathBuf, constle_approver_set::SetBody, String) {
    use constle_approver_set::{SetBody, SetPin, VersionFile, write_new_version};
    let [a, b, c] = &fx.approvers;
    let dir = fx.case.path("approvers");
    fs::create_dir(&dir).unwrap();
    let members = named(&[(a, "alice"), (b, "bob"), (c, "carol")]);
    let one = SetBody::new(1, set_expiry(), 2, members).unwrap();
    let mut first = VersionFile::unsigned(one.clone());
    let pin = SetPin::new(first.digest());
    first.sign(a);
    first.sign(b);
    write_new_version(&dir, &first).unwrap();
    let lines = format!("  approver_set: {{dir: ./approvers, pin: {pin}}}\n");
    (dir, one, lines)
}

/// Version 2 after `one`: `dave` in, carol out, signed by alice and bob.
fn rotate_carol_out(
    fx: &Fixture,
    dir: &Path,
    one: &constle_approver_set::SetBody,
    dave: &SigningIdentity,
) -> constle_approver_set::SetBody {
    use constle_approver_set::{VersionFile, write_new_version};
    let [a, b, c] = &fx.approvers;
    let two = one
        .next(
            named(&[(dave, "dave")]),
            &[c.did().clone()],
            None,
            set_expiry(),
        )
        .unwrap();
    let mut second = VersionFile::unsigned(two.clone());
    second.sign(a);
    second.sign(b);
    write_new_version(dir, &second).unwrap();
    two
}

fn approver_set() {
    use constle_approver_set::{VersionFile, write_new_version};
    let fx = Fixture::new();
    let [a, b, c] = &fx.approvers;
    let dave = SigningIdentity::generate();
    let expires = set_expiry();
    let (dir, one, lines) = set_of_three(&fx);
    let file = fx.agentfile_with(&lines, 2, &[call("pay", "pay_invoice", INVOICE)]);
    use Answer::Approve;
    let (alice, carol) = (
        fx.endpoint(a, &[("pay_invoice", Approve)]),
        fx.endpoint(c, &[("pay_invoice", Approve)]),
    );
    // Under version 1, alice and carol make two.
    let out = fx.run(&file, &[&alice, &carol]);
    assert!(out.status.success(), "{}", report(&out));
    assert_eq!(fx.reached("pay_invoice"), 1);

    let two = rotate_carol_out(&fx, &dir, &one, &dave);
    let out = fx.run(&file, &[&alice, &carol]);
    assert_eq!(out.status.code(), Some(125), "{}", report(&out));
    assert_eq!(fx.reached("pay_invoice"), 1, "carol's key is revoked");
    let reasons: Vec<Option<String>> = fx
        .case
        .events("gate_vote")
        .iter()
        .rev()
        .take(2)
        .map(|v| v["reason"].as_str().map(str::to_owned))
        .collect();
    assert!(
        reasons.contains(&Some("gate_approver_unknown".into())),
        "{reasons:?}"
    );
    let in_force: Vec<u64> = fx
        .case
        .events("approver_set_in_force")
        .iter()
        .map(|e| e["version"].as_u64().unwrap())
        .collect();
    assert_eq!(in_force, [1, 2]);
    let log = fx.case.log_file();
    fx.verifies(&file, &log);
    let forged = rewrite(
        &fx,
        "forged-set",
        Box::new(|e| {
            if e["event"] == "approver_set_in_force" && e["version"] == 2 {
                e["digest"] = Value::from(format!("sha256:{}", "0".repeat(64)));
            }
            true
        }),
    );
    let (status, said) = fx.verify(&file, &forged);
    assert_eq!(status, Some(1), "{said}");
    assert!(said.contains("approver_set_unknown"), "{said}");

    // Version 2 removed from the directory: a rollback, refused.
    let kept = dir.join("2.approvers.json");
    let saved = fs::read(&kept).unwrap();
    fs::remove_file(&kept).unwrap();
    let out = fx.run(&file, &[&alice]);
    assert_eq!(out.status.code(), Some(125), "{}", report(&out));
    assert!(
        text(&out.stderr).contains("approver set"),
        "{}",
        report(&out)
    );
    assert!(text(&out.stderr).contains("version 2"), "{}", report(&out));
    fs::write(&kept, saved).unwrap();
    // Version 3 signed by alice alone (version 2 needs two): refused.
    let three = two
        .next(Vec::new(), &[b.did().clone()], Some(1), expires)
        .unwrap();
    let mut third = VersionFile::unsigned(three);
    third.sign(a);
    write_new_version(&dir, &third).unwrap();
    let out = fx.run(&file, &[&alice]);
    assert_eq!(out.status.code(), Some(125), "{}", report(&out));
    assert!(text(&out.stderr).contains("it needs 2"), "{}", report(&out));
    assert_eq!(fx.reached("pay_invoice"), 1);
}

/// Issue 22: the set is fine when the run starts, then version 2 is taken
/// away (a rollback, which names the set's directory and the copy under
/// `$CONSTLE_HOME`). The gated call is refused; the agent gets the code
/// and what failed, never a host path; the audit log has the whole error.
fn set_unusable_at_call_time() {
    let fx = Fixture::new();
    let (dir, one, lines) = set_of_three(&fx);
    rotate_carol_out(&fx, &dir, &one, &SigningIdentity::generate());
    // The agent says when it is running, then waits for the word to go on.
    let wait =
        "touch ready; n=0; while [ ! -e go ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done";
    let steps = [wait.to_owned(), call("pay", "pay_invoice", INVOICE)];
    let file = fx.agentfile_with(&lines, 1, &steps);
    let alice = fx.endpoint(&fx.approvers[0], &[("pay_invoice", Answer::Approve)]);
    let child = fx
        .case
        .command(&["run", file.to_str().unwrap()])
        .env(quorum_webhook_var(0), alice.url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = fx.case.path("work/ready");
    let started = std::time::Instant::now();
    while !ready.exists() {
        assert!(started.elapsed().as_secs() < 60, "the agent never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    fs::remove_file(dir.join("2.approvers.json")).unwrap();
    fs::write(fx.case.path("work/go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let report = report(&out);
    let (said, status) = outcome(&text(&out.stdout), "pay", &report);
    assert_eq!(status, 3, "a JSON-RPC error: {said}\n{report}");
    assert!(said.contains("error: -32001 "), "{said}");
    assert!(said.contains("reason: mcp_gate_refused"), "{said}");
    assert!(said.contains("the approver set cannot be used"), "{said}");
    let root = fx.case.dir.path();
    for host in [dir.as_path(), &fx.case.home(), root] {
        let host = host.to_str().unwrap();
        assert!(!said.contains(host), "{host} shown to the agent: {said}");
    }
    assert_eq!(fx.reached("pay_invoice"), 0);
    let refused = fx.case.events("mcp_refused");
    let [refused] = refused.as_slice() else {
        panic!("one mcp_refused: {refused:?}\n{report}");
    };
    assert_eq!(refused["reason"], "mcp_gate_refused", "{refused}");
    let detail = refused["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(dir.to_str().unwrap()), "{refused}");
    assert!(
        detail.contains(fx.case.home().to_str().unwrap()),
        "{refused}"
    );
}
