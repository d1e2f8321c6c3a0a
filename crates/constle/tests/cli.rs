//! The `constle` binary as a user runs it: arguments in, output and exit
//! status out, each case in a fresh `$CONSTLE_HOME`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod common;

use common::fields;
use constle_audit::{Appender, Event};
use constle_identity::{KeyKind, KeyStore, Name};

struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        Case {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_constle"));
        command
            .args(args)
            .env("CONSTLE_HOME", self.home())
            .env_remove("NO_COLOR")
            .env_remove("HUMAN_GATE_WEBHOOK_URL")
            .current_dir(self.dir.path());
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Like [`Case::run`], failing the test (and killing the process) if it
    /// has not finished within `limit`.
    fn run_within(&self, args: &[&str], limit: Duration) -> Output {
        let child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        let (done, output) = mpsc::channel();
        std::thread::spawn(move || drop(done.send(child.wait_with_output())));
        match output.recv_timeout(limit) {
            Ok(out) => out.unwrap(),
            Err(_) => {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
                panic!("constle {args:?} did not finish within {limit:?}");
            }
        }
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        fs::write(&path, contents).unwrap();
        path
    }

    /// Makes an agent key and an Agentfile naming it; returns the Agentfile.
    fn signed_agent(&self) -> (PathBuf, String) {
        let out = self.run(&["keygen", "my-agent"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let did = stdout(&out).trim().to_owned();
        let agentfile = self.write(
            "agent.yaml",
            &format!("name: my-agent\nidentity:\n  did: {did}\nsandbox:\n  command: [\"true\"]\n"),
        );
        (agentfile, did)
    }

    /// Writes a signed log of `events` for my-agent and returns its path.
    fn log(&self, events: Vec<Event>) -> PathBuf {
        let store = KeyStore::open(&self.home()).unwrap();
        let key = store
            .load(KeyKind::Agent, &Name::new("my-agent").unwrap())
            .unwrap();
        let appender = Appender::new(
            &self.home().join("logs"),
            Name::new("my-agent").unwrap(),
            Some(key),
        )
        .unwrap();
        appender.append(events).unwrap()[0].path.clone()
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

fn event(name: &str, field: &str, value: &str) -> Event {
    Event::new(name).unwrap().with(field, value).unwrap()
}

const VALID: &str = "name: my-agent\nsandbox:\n  command: [\"python3\", \"agent.py\"]\n";

#[test]
fn validate_accepts_a_valid_file() {
    let case = Case::new();
    let file = case.write("agent.yaml", VALID);
    let out = case.run(&["validate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("is valid (0 warnings)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn validate_refuses_with_file_line_and_column() {
    let case = Case::new();
    let file = case.write(
        "agent.yaml",
        "name: my-agent\nsandbox:\n  command: [\"x\"]\n  netwrok: {}\n",
    );
    let out = case.run(&["validate", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("agent.yaml:4:3: error[unknown_field]"),
        "{text}"
    );
    assert!(text.contains("help:"), "{text}");
    assert!(text.contains("is invalid: 1 error"), "{text}");
    assert!(file.exists());
}

#[test]
fn validate_warns_but_passes() {
    let case = Case::new();
    let file = case.write(
        "agent.yaml",
        &format!(
            "{VALID}human_gates:\n  require_approval_for: [pay_invoice]\n  on_timeout: proceed\n"
        ),
    );
    let out = case.run(&["validate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("warning["), "{}", stdout(&out));
}

#[test]
fn validate_speaks_json_lines() {
    let case = Case::new();
    case.write("agent.yaml", "name: ../etc\nsandbox:\n  command: [\"x\"]\n");
    let out = case.run(&["validate", "--format", "json", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summary, diagnostics) = lines.split_last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["valid"], false);
    assert_eq!(diagnostics[0]["type"], "diagnostic");
    assert_eq!(diagnostics[0]["severity"], "error");
    assert_eq!(diagnostics[0]["location"]["line"], 1);
}

/// A witness key whose key ID is not the one its name and key give: the
/// strict parse `run` uses is `validate`'s too, so both refuse it the same
/// way, with its line and column, before anything starts.
#[test]
fn validate_and_run_refuse_a_witness_key_with_a_wrong_key_id_alike() {
    let case = Case::new();
    let (agentfile, _) = case.signed_agent();
    let good = "witness.example.org/w1+2ce32234+BD1AF8PoQ4lakrcKp00bfrycmCzPLsSWjMDNVfEq9GYM";
    let wrong_id = good.replace("+2ce32234+", "+2ce32235+");
    let base = fs::read_to_string(&agentfile).unwrap();
    let witnesses = |key: &str| {
        format!(
            "{base}audit:\n  deployment: ci.example.com\n  witnesses:\n    - url: http://192.0.2.10:7710\n      key: {key}\n"
        )
    };
    case.write("agent.yaml", &witnesses(good));
    let out = case.run(&["validate", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    case.write("agent.yaml", &witnesses(&wrong_id));
    let at = "agent.yaml:10:12: error[invalid_witness_key]";
    let says = "key ID 2ce32235 should be 2ce32234";
    let out = case.run(&["validate", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains(at) && text.contains(says), "{text}");

    let out = case.run(&["validate", "--format", "json", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let first: serde_json::Value =
        serde_json::from_str(stdout(&out).lines().next().unwrap()).unwrap();
    assert_eq!(first["code"], "invalid_witness_key", "{first}");
    assert_eq!(first["location"]["line"], 10, "{first}");
    assert_eq!(first["location"]["column"], 12, "{first}");
    assert!(first["message"].as_str().unwrap().contains(says), "{first}");

    // `run` refuses the same key for the same reason, as an invalid
    // Agentfile (exit 1), before it starts anything.
    let out = case.run_within(&["run", "agent.yaml"], Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(text.contains(at) && text.contains(says), "{text}");
    assert!(!case.home().join("logs").exists(), "nothing was logged");
}

#[test]
fn usage_errors_and_unreadable_files_exit_2() {
    let case = Case::new();
    assert_eq!(case.run(&["validate"]).status.code(), Some(2));
    assert_eq!(case.run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        case.run(&["validate", "--format", "xml", "a.yaml"])
            .status
            .code(),
        Some(2)
    );
    let missing = case.run(&["validate", "missing.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("missing.yaml"),
        "{}",
        stderr(&missing)
    );
    assert_eq!(
        case.run(&["audit", "verify", "missing-2026-01-01.jsonl"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn keygen_prints_the_did_alone_and_never_overwrites() {
    let case = Case::new();
    let out = case.run(&["keygen", "my-agent"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let did = stdout(&out);
    assert!(
        did.starts_with("did:key:z6Mk") && did.lines().count() == 1,
        "{did:?}"
    );
    let key = case.home().join("keys/agent/my-agent.pem");
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        (
            mode(&case.home()),
            mode(&case.home().join("keys")),
            mode(&key)
        ),
        (0o700, 0o700, 0o600)
    );
    let before = fs::read(&key).unwrap();

    let again = case.run(&["keygen", "my-agent"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("my-agent.pem"),
        "{}",
        stderr(&again)
    );
    assert_eq!(fs::read(&key).unwrap(), before);
}

#[test]
fn webhook_keygen_makes_an_approver_key_not_an_identity() {
    let case = Case::new();
    let out = case.run(&["webhook-keygen", "approver"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("did:key:z6Mk"));
    assert!(case.home().join("keys/approver/approver.pem").exists());
    assert!(!case.home().join("keys/agent/approver.pem").exists());
    assert!(stderr(&out).contains("human_gates.approver_pubkey"));
}

#[test]
fn keygen_refuses_unsafe_names() {
    let case = Case::new();
    for name in ["../x", "a/b", "", ".hidden", "a\u{7}b"] {
        assert_eq!(
            case.run(&["keygen", name]).status.code(),
            Some(2),
            "{name:?}"
        );
    }
}

#[test]
fn audit_verify_reports_a_pinned_verified_log() {
    let case = Case::new();
    let (agentfile, did) = case.signed_agent();
    let log = case.log(vec![
        event("run_started", "note", "a"),
        event("run_finished", "note", "b"),
    ]);
    let out = case.run(&[
        "audit",
        "verify",
        &format!("--agentfile={}", agentfile.display()),
        log.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("✓ audit log verified: {}", log.display())),
        "{text}"
    );
    assert!(
        text.contains("entries:   2 (all signatures valid, hash chain intact)"),
        "{text}"
    );
    assert!(text.contains(&format!("signed by: {did}")), "{text}");
    assert!(!text.contains("internal consistency only"), "{text}");

    let unpinned = stdout(&case.run(&["audit", "verify", log.to_str().unwrap()]));
    assert!(unpinned.contains("internal consistency only"), "{unpinned}");
}

#[test]
fn audit_verify_reports_tampering_by_line_and_exits_1() {
    let case = Case::new();
    let (agentfile, _) = case.signed_agent();
    let log = case.log(vec![
        event("a", "x", "1"),
        event("b", "x", "2"),
        event("c", "x", "3"),
    ]);
    let text = fs::read_to_string(&log)
        .unwrap()
        .replacen(r#""x":"2""#, r#""x":"9""#, 1);
    fs::write(&log, text).unwrap();
    let out = case.run(&[
        "audit",
        "verify",
        &format!("--agentfile={}", agentfile.display()),
        log.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("TAMPERING DETECTED in {}", log.display())),
        "{text}"
    );
    assert!(text.contains("line 2: invalid_signature"), "{text}");
    assert!(
        text.contains("the entry was edited after signing"),
        "{text}"
    );
}

#[test]
fn audit_verify_with_another_agents_did_pinned_fails() {
    let case = Case::new();
    case.signed_agent();
    let log = case.log(vec![event("a", "x", "1")]);
    let other = case.run(&["keygen", "other"]);
    let did = stdout(&other).trim().to_owned();
    let agentfile = case.write(
        "other.yaml",
        &format!("name: my-agent\nidentity:\n  did: {did}\nsandbox:\n  command: [\"true\"]\n"),
    );
    let out = case.run(&[
        "audit",
        "verify",
        "--agentfile",
        agentfile.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("line 1: wrong_signer"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn audit_verify_refuses_an_invalid_agentfile_as_anchor() {
    let case = Case::new();
    case.signed_agent();
    let log = case.log(vec![event("a", "x", "1")]);
    let bad = case.write("bad.yaml", "name: [\n");
    let out = case.run(&[
        "audit",
        "verify",
        "--agentfile",
        bad.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot pin anything"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn audit_show_prints_a_timeline_with_agent_bytes_escaped() {
    let case = Case::new();
    case.signed_agent();
    let log = case.log(vec![event(
        "network_blocked",
        "host",
        "evil.example.com\u{1b}[2J\r⏸ fake prompt",
    )]);
    let out = case.run(&["audit", "show", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains("#0") && text.contains("network_blocked"),
        "{text}"
    );
    assert!(
        text.contains(r"evil.example.com\u{1b}[2J\u{d}⏸ fake prompt"),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}') && !text.contains('\r'),
        "raw control bytes reached the terminal: {text:?}"
    );
}

/// A checkpoint's note is text of several lines: shown as its lines,
/// indented under the entry, each escaped as everything else is, not as
/// one line of `\u{a}`.
#[test]
fn audit_show_prints_a_checkpoint_note_as_its_lines() {
    let case = Case::new();
    case.signed_agent();
    let note = "ci.example.com/constle/my-agent\n8\nPb9SGOhg=\n\n\u{2014} ci.example.com/constle/my-agent \u{1b}[2JArsMQ0=\n";
    let checkpoint = Event::new("checkpoint")
        .unwrap()
        .with("size", 8)
        .unwrap()
        .with("trigger", "run_end")
        .unwrap()
        .with("note", note)
        .unwrap();
    let log = case.log(vec![checkpoint]);
    let out = case.run(&["audit", "show", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let shown: Vec<&str> = text.lines().collect();
    let row = shown.iter().position(|l| l.contains("#0")).unwrap();
    assert!(shown[row].contains("checkpoint"), "{text}");
    assert!(shown[row].contains("size=8 trigger=run_end"), "{text}");
    assert!(!shown[row].contains("note"), "{text}");
    assert_eq!(
        shown[row + 1..],
        [
            "    note: ci.example.com/constle/my-agent",
            "          8",
            "          Pb9SGOhg=",
            "          ",
            "          \u{2014} ci.example.com/constle/my-agent \\u{1b}[2JArsMQ0=",
        ],
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

#[test]
fn colour_follows_the_flag() {
    let case = Case::new();
    let file = case.write("agent.yaml", VALID);
    let plain = stdout(&case.run(&["validate", file.to_str().unwrap()]));
    assert!(!plain.contains('\u{1b}'));
    let coloured = stdout(&case.run(&["--color", "always", "validate", file.to_str().unwrap()]));
    assert!(coloured.contains("\u{1b}[32m"), "{coloured:?}");
}

/// What marks a secret written in a URL: it must appear in no output.
const MARKER: &str = "M4RK3R";

#[track_caller]
fn shows_no_secret(out: &Output) -> String {
    let shown = format!("{}{}", stdout(out), stderr(out));
    assert!(!shown.contains(MARKER), "shows the secret:\n{shown}");
    assert!(shown.contains("***"), "{shown}");
    shown
}

#[test]
fn validate_never_shows_a_secret_written_in_a_url() {
    let case = Case::new();
    let file = case.write(
        "agent.yaml",
        &format!(
            "{VALID}mcp:\n  servers:\n    - id: s\n      url: \"https://mcp.example.com/mcp?api_key={MARKER}\"\n      tools: [t]\n    - id: bad\n      url: \"http://u:{MARKER}@mcp.example.com/mcp?token={MARKER}\"\n      tools: [t]\nspending:\n  ledger: \"redis+unix:///run/r.sock?pass={MARKER}\"\n"
        ),
    );
    let file = file.to_str().unwrap();
    for args in [
        vec!["validate", file],
        vec!["validate", "--format", "json", file],
    ] {
        let out = case.run(&args);
        assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
        let shown = shows_no_secret(&out);
        for code in [
            "url_carries_secret",
            "redis_password_in_agentfile",
            "invalid_url",
        ] {
            assert!(shown.contains(code), "{args:?}: no {code}\n{shown}");
        }
    }
}

#[test]
fn validate_never_shows_a_header_secret() {
    let case = Case::new();
    let file = case.write(
        "agent.yaml",
        &format!(
            "{VALID}mcp:\n  servers:\n    - id: s\n      url: https://mcp.example.com/mcp\n      tools: [t]\n      headers:\n        - {{name: Authorization, scheme: Bearer, value_secret_ref: S_TOKEN}}\n"
        ),
    );
    let file = file.to_str().unwrap();
    for (value, warning) in [
        (format!("{MARKER}\n"), Some("header_secret_invalid")),
        (
            format!("{MARKER}\r\nX-Injected: 1"),
            Some("header_secret_invalid"),
        ),
        (MARKER.to_owned(), None),
    ] {
        for args in [
            vec!["validate", file],
            vec!["validate", "--format", "json", file],
        ] {
            let out = case.command(&args).env("S_TOKEN", &value).output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
            let shown = format!("{}{}", stdout(&out), stderr(&out));
            assert!(!shown.contains(MARKER), "shows the secret:\n{shown}");
            match warning {
                Some(code) => {
                    assert!(shown.contains(code), "{args:?}: {shown}");
                    assert!(shown.contains("S_TOKEN"), "{shown}");
                }
                None => assert!(!shown.contains("header_secret"), "{shown}"),
            }
        }
    }
}

#[test]
fn spend_show_never_shows_the_ledger_password() {
    if !constle_testkit::require_tools(
        "spend_show_never_shows_the_ledger_password",
        &["redis-server"],
    ) {
        return;
    }
    let redis = constle_testkit::RedisServer::start().unwrap();
    redis.require_password(MARKER).unwrap();
    let answering = format!("{}?pass={MARKER}", redis.url());
    let silent = format!("redis+unix:///nonexistent/redis.sock?pass={MARKER}");
    let case = Case::new();
    for (url, status, says) in [
        (answering, Some(0), "ledger    Redis redis+unix://"),
        (silent, Some(2), "cannot read the spend ledger of my-agent"),
    ] {
        let file = case.write(
            "agent.yaml",
            &format!("{VALID}spending:\n  max_per_day_usd: 5\n  ledger: \"{url}\"\n"),
        );
        let out = case.run(&["spend", "show", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), status, "{url}\n{}", stderr(&out));
        let shown = shows_no_secret(&out);
        assert!(shown.contains(says), "{url}\n{shown}");
        // The same status as JSON, the same ledger without its password;
        // on failure nothing on stdout and the same reason on stderr.
        let json = case.run(&["spend", "show", "--format=json", file.to_str().unwrap()]);
        assert_eq!(json.status.code(), status, "{url}\n{}", stderr(&json));
        assert_eq!(stderr(&json), stderr(&out));
        if status == Some(0) {
            let agent = &json_lines(&json)[0];
            assert_eq!(agent["type"], "agent");
            let ledger = agent["ledger"].as_str().unwrap();
            assert!(ledger.starts_with("Redis redis+unix://"), "{ledger}");
            assert!(
                ledger.contains("***") && !ledger.contains(MARKER),
                "{ledger}"
            );
        } else {
            assert_eq!(stdout(&json), "");
        }
    }
}

/// An Agentfile `spend show` cannot use: exit 1 either way, its errors on
/// stderr, nothing on stdout.
#[test]
fn spend_show_refuses_an_invalid_agentfile_alike_as_json() {
    let case = Case::new();
    let file = case.write("agent.yaml", "name: ../etc\nsandbox:\n  command: [\"x\"]\n");
    let file = file.to_str().unwrap();
    let human = case.run(&["spend", "show", file]);
    let json = case.run(&["spend", "show", "--format", "json", file]);
    assert_eq!(human.status.code(), Some(1), "{}", stderr(&human));
    assert_eq!(json.status.code(), Some(1), "{}", stderr(&json));
    assert_eq!(stdout(&json), "");
    assert_eq!(stderr(&json), stderr(&human));
    assert!(!stderr(&json).is_empty());
}

/// Writes a state file into the embedded ledger of `key`, for today.
fn seed_ledger(case: &Case, key: &str, state: &str) {
    let dir = case.home().join("ledger").join(key);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("state.json"), state).unwrap();
}

/// The UTC date `spend show` counts as today.
fn spend_show_today(case: &Case, file: &str) -> String {
    let out = case.run(&["spend", "show", file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let shown = stdout(&out);
    let today = shown.lines().find_map(|line| line.strip_prefix("  today "));
    today.unwrap()[..10].to_owned()
}

/// Model spend by provider and model beside MCP spend by server, what no
/// source accounts for (totals written before sources were kept), and the
/// model calls' own ledger: in the human output and in `--format json`.
#[test]
fn spend_show_lists_spend_by_source_and_the_model_ledger() {
    let case = Case::new();
    let file = case.write(
        "agent.yaml",
        &format!("{VALID}spending:\n  max_per_day_usd: 20\n"),
    );
    let file = file.to_str().unwrap();
    let mut today = spend_show_today(&case, file);
    let (human, json) = loop {
        let month = &today[..7];
        let sources = |mcp: &str, llm: &str| {
            format!(
                r#"{{"mcp":{{"accounting":"{mcp}"}},"llm":{{"anthropic":{{"claude-sonnet-4-5":"{llm}"}}}}}}"#
            )
        };
        let llm_only =
            |llm: &str| format!(r#"{{"llm":{{"anthropic":{{"claude-sonnet-4-5":"{llm}"}}}}}}"#);
        seed_ledger(
            &case,
            "name-my-agent",
            &format!(
                r#"{{"version":1,"days":{{"{today}":"3.5"}},"months":{{"{month}":"10"}},"last_run":null,"source_days":{{"{today}":{}}},"source_months":{{"{month}":{}}}}}"#,
                sources("0.5", "2"),
                sources("1", "4"),
            ),
        );
        seed_ledger(
            &case,
            "llm-name-my-agent",
            &format!(
                r#"{{"version":1,"days":{{"{today}":"2"}},"months":{{"{month}":"4"}},"last_run":null,"source_days":{{"{today}":{}}},"source_months":{{"{month}":{}}}}}"#,
                llm_only("2"),
                llm_only("4"),
            ),
        );
        let human = case.run(&["spend", "show", file]);
        let json = case.run(&["spend", "show", "--format", "json", file]);
        // Past midnight between the two reads, seed the new day again.
        let now = spend_show_today(&case, file);
        if now == today {
            break (stdout(&human), stdout(&json));
        }
        today = now;
    };
    for expected in [
        format!("  today {today}: 3.50 USD of 20.00 (max_per_day_usd)"),
        "  by source, today and this month:".to_owned(),
        "    mcp server accounting: 0.50 USD today, 1.00 USD this month".to_owned(),
        "    llm provider anthropic model claude-sonnet-4-5: 2.00 USD today, 4.00 USD this month"
            .to_owned(),
        "    unattributed (charged before totals were kept by source): 1.00 USD today, 5.00 USD this month"
            .to_owned(),
        "  model calls alone (llm.spending):".to_owned(),
        format!("    today {today}: 2.00 USD (no llm.spending.max_per_day_usd)"),
        "      llm provider anthropic model claude-sonnet-4-5: 2.00 USD today, 4.00 USD this month"
            .to_owned(),
    ] {
        assert!(human.lines().any(|line| line == expected), "{expected:?} in\n{human}");
    }
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let find = |want: serde_json::Value| {
        let want = want.as_object().unwrap();
        let found = lines
            .iter()
            .any(|line| want.iter().all(|(k, v)| &line[k] == v));
        assert!(found, "{want:?} in\n{json}");
    };
    find(serde_json::json!({"type": "agent", "agent": "my-agent"}));
    find(serde_json::json!({
        "type": "total", "scope": "all", "period": "day", "of": today,
        "usd": "3.50", "cap": "max_per_day_usd", "cap_usd": "20.00",
    }));
    find(serde_json::json!({
        "type": "total", "scope": "llm", "period": "month", "of": &today[..7],
        "usd": "4.00", "cap": "llm.spending.max_per_month_usd", "cap_usd": null,
    }));
    find(serde_json::json!({
        "type": "source", "scope": "all", "kind": "mcp", "server": "accounting",
        "day_usd": "0.50", "month_usd": "1.00",
    }));
    find(serde_json::json!({
        "type": "source", "scope": "llm", "kind": "llm", "provider": "anthropic",
        "model": "claude-sonnet-4-5", "day_usd": "2.00", "month_usd": "4.00",
    }));
    find(serde_json::json!({
        "type": "source", "scope": "all", "kind": "unattributed",
        "day_usd": "1.00", "month_usd": "5.00",
    }));
    assert!(lines.iter().all(|line| line["type"].is_string()), "{json}");
}

/// An agent whose model calls were never charged shows no model section
/// and no sources.
#[test]
fn spend_show_without_charges_shows_no_sources() {
    let case = Case::new();
    let file = case.write("agent.yaml", VALID);
    let out = case.run(&["spend", "show", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(!shown.contains("by source"), "{shown}");
    assert!(!shown.contains("model calls alone"), "{shown}");
    assert!(shown.contains("last run with charges: none"), "{shown}");
}

/// Makes `path` something other than a log file.
type NotALog = fn(&Path);

/// Things named like the log's files that are not one: none may be read.
const NOT_LOGS: [(&str, NotALog, &str); 4] = [
    (
        "a FIFO",
        |path| {
            let made = Command::new("mkfifo").arg(path).status().unwrap();
            assert!(made.success());
        },
        "not a regular file (a FIFO)",
    ),
    (
        "a link to /dev/zero",
        |path| std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        "not a regular file (a character device)",
    ),
    (
        "a directory",
        |path| fs::create_dir(path).unwrap(),
        "not a regular file (a directory)",
    ),
    (
        "a sparse file past the bound",
        |path| {
            let file = fs::File::create(path).unwrap();
            file.set_len(constle_audit::MAX_LOG_FILE_BYTES + 1).unwrap();
        },
        "larger than",
    ),
];

#[test]
fn audit_reads_only_regular_files_of_bounded_size() {
    for (what, make, says) in NOT_LOGS {
        let case = Case::new();
        case.signed_agent();
        let log = case.log(vec![event("a", "x", "1")]);
        let logs = log.parent().unwrap().to_owned();
        let day = constle_audit::DayFile::from_path(&log).unwrap();
        let named = |date: jiff::civil::Date| logs.join(format!("my-agent-{date}.jsonl"));
        let before = named(day.date.yesterday().unwrap());
        let after = named(day.date.tomorrow().unwrap());
        let head = constle_audit::head_path(&logs, &day.agent);
        let (today, shown) = (log.to_str().unwrap(), before.to_str().unwrap());
        // Which file is not a log, and what is run; the head goes last.
        let scenarios: [(&Path, [&str; 3]); 5] = [
            (&before, ["audit", "verify", shown]),
            (&before, ["audit", "show", shown]),
            (&before, ["audit", "verify", today]),
            (&after, ["audit", "verify", today]),
            (&head, ["audit", "verify", today]),
        ];
        for (victim, args) in scenarios {
            if victim == head.as_path() {
                fs::remove_file(&head).unwrap();
            }
            make(victim);
            let out = case.run_within(&args, Duration::from_secs(20));
            let text = stderr(&out);
            let expected = format!("{}: {says}", victim.display());
            assert_eq!(out.status.code(), Some(2), "{what}, {args:?}: {text}");
            assert!(text.contains(&expected), "{what}, {args:?}: {text}");
            fs::remove_file(victim)
                .or_else(|_| fs::remove_dir(victim))
                .unwrap();
        }
    }
}

/// The objects `--format json` printed, each alone on its line and the last
/// line ended, as `validate` prints them.
fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    let text = stdout(out);
    assert!(text.ends_with('\n'), "{text:?}");
    text.lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{e}: {line}\nstderr: {}", stderr(out)));
            assert!(value.is_object(), "{line}");
            value
        })
        .collect()
}

const LOG_FIELDS: [&str; 9] = [
    "entries",
    "error",
    "findings",
    "notes",
    "ok",
    "path",
    "pinned",
    "signed_by",
    "type",
];

/// `audit verify --format json`: a line per day file, then the summary;
/// the exit status the text gives.
#[test]
fn audit_verify_speaks_json_lines_with_the_same_exit_status() {
    let case = Case::new();
    let (agentfile, did) = case.signed_agent();
    let log = case.log(vec![
        event("run_started", "note", "a"),
        event("run_finished", "note", "b"),
    ]);
    let (pin, path) = (
        format!("--agentfile={}", agentfile.display()),
        log.to_str().unwrap(),
    );
    let out = case.run(&["audit", "verify", "--format", "json", &pin, path, path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 3, "{lines:?}");
    for line in &lines[..2] {
        assert_eq!(fields(line), LOG_FIELDS);
        assert_eq!(line["type"], "log");
        assert_eq!(line["ok"], true);
        assert_eq!(line["path"], path);
        assert_eq!(line["error"], serde_json::Value::Null);
        assert_eq!(line["entries"], 2);
        assert_eq!(line["signed_by"], did.as_str());
        assert_eq!(line["pinned"], true);
        assert_eq!(line["findings"], serde_json::json!([]));
        assert_eq!(line["notes"], serde_json::json!([]));
    }
    assert_eq!(
        lines[2],
        serde_json::json!({"type": "summary", "ok": true, "logs": 2, "failed": 0})
    );

    let unpinned = json_lines(&case.run(&["audit", "verify", "--format=json", path]));
    assert_eq!(unpinned[0]["pinned"], false);
    assert_eq!(unpinned[0]["signed_by"], did.as_str());

    let text = fs::read_to_string(&log)
        .unwrap()
        .replacen(r#""note":"b""#, r#""note":"c""#, 1);
    fs::write(&log, text).unwrap();
    let out = case.run(&["audit", "verify", "--format", "json", &pin, path]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines = json_lines(&out);
    let tampered = &lines[0];
    assert_eq!(fields(tampered), LOG_FIELDS);
    assert_eq!(tampered["ok"], false);
    assert_eq!(
        tampered["error"],
        format!("TAMPERING DETECTED in {}", log.display())
    );
    assert_eq!(tampered["entries"], serde_json::Value::Null);
    assert_eq!(tampered["signed_by"], serde_json::Value::Null);
    let finding = &tampered["findings"][0];
    assert_eq!(fields(finding), ["code", "detail", "line", "meaning"]);
    assert_eq!(finding["line"], 2);
    assert_eq!(finding["code"], "invalid_signature");
    assert!(finding["detail"].as_str().unwrap().len() > 1, "{finding}");
    assert!(
        finding["meaning"]
            .as_str()
            .unwrap()
            .contains("the entry was edited after signing"),
        "{finding}"
    );
    assert_eq!(
        lines[1],
        serde_json::json!({"type": "summary", "ok": false, "logs": 1, "failed": 1})
    );

    // No summary, nothing on stdout: exit 2, the reason on stderr, as the
    // text says it.
    for args in [
        vec!["audit", "verify", "missing-2026-01-01.jsonl"],
        vec!["audit", "verify", "--agentfile=missing.yaml", path],
    ] {
        let human = case.run(&args);
        let json = case.run(&[&args[..2], &["--format", "json"], &args[2..]].concat());
        assert_eq!(human.status.code(), Some(2), "{args:?}");
        assert_eq!(json.status.code(), Some(2), "{args:?}");
        assert_eq!(stdout(&json), "", "{args:?}");
        assert_eq!(stderr(&json), stderr(&human), "{args:?}");
    }
}

/// The text of `audit verify`, byte for byte, as it was before
/// `--format` (the default).
#[test]
fn audit_verify_prints_the_same_text_by_default() {
    let case = Case::new();
    let (agentfile, did) = case.signed_agent();
    let log = case.log(vec![event("a", "x", "1"), event("b", "x", "2")]);
    let (pin, path) = (
        format!("--agentfile={}", agentfile.display()),
        log.to_str().unwrap(),
    );
    let verified = format!(
        "✓ audit log verified: {path}\n\n  entries:   2 (all signatures valid, hash chain intact)\n  signed by: {did}\n"
    );
    for args in [
        vec!["audit", "verify", &pin, path, path],
        vec!["audit", "verify", "--format", "human", &pin, path, path],
    ] {
        let out = case.run(&args);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(stdout(&out), format!("{verified}\n{verified}"), "{args:?}");
    }
    let text = fs::read_to_string(&log)
        .unwrap()
        .replacen(r#""x":"2""#, r#""x":"9""#, 1);
    fs::write(&log, text).unwrap();
    let out = case.run(&["audit", "verify", &pin, path]);
    assert_eq!(out.status.code(), Some(1));
    let shown = stdout(&out);
    assert_eq!(
        shown,
        format!(
            "error: TAMPERING DETECTED in {path}\n  line 2: invalid_signature — signature does not verify against {did}\n  — the entry was edited after signing\n  line 2: tail_removed — line 2 is not the entry the head anchor records (sequence 1)\n  — entries were cut off the end of the log\n"
        )
    );
}

/// `audit verify-receipt --format json` on what is not a receipt: one
/// object, `ok` false and the reason the text gives, exit 1; on a missing
/// file, nothing on stdout and exit 2, as the text.
#[test]
fn verify_receipt_speaks_json_with_the_same_exit_status() {
    let case = Case::new();
    let receipt = case.write("run.receipt.json", "{}\n");
    let receipt = receipt.to_str().unwrap();
    let human = case.run(&["audit", "verify-receipt", receipt]);
    let out = case.run(&["audit", "verify-receipt", "--format", "json", receipt]);
    assert_eq!(human.status.code(), Some(1));
    assert_eq!(out.status.code(), Some(1));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let reason = stdout(&human).lines().nth(1).unwrap().trim().to_owned();
    assert_eq!(
        lines[0],
        serde_json::json!({"ok": false, "file": receipt, "error": reason, "receipt": null})
    );
    assert_eq!(
        stdout(&human),
        format!("error: RECEIPT INVALID: {receipt}\n  {reason}\n")
    );

    let human = case.run(&["audit", "verify-receipt", "missing.json"]);
    let out = case.run(&["audit", "verify-receipt", "--format=json", "missing.json"]);
    assert_eq!(human.status.code(), Some(2));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout(&out), "");
    assert_eq!(stderr(&out), stderr(&human));
}

/// An Agentfile with a secret in a URL pins nothing (it is invalid), and
/// neither format of `audit verify` or `verify-receipt` shows the secret.
#[test]
fn audit_verify_never_shows_a_secret_from_the_agentfile() {
    let case = Case::new();
    case.signed_agent();
    let log = case.log(vec![event("a", "x", "1")]);
    let receipt = case.write("run.receipt.json", "{}\n");
    let file = case.write(
        "secret.yaml",
        &format!(
            "{VALID}mcp:\n  servers:\n    - id: s\n      url: \"https://u:{MARKER}@mcp.example.com/mcp\"\n      tools: [t]\nspending:\n  ledger: \"redis://:{MARKER}@redis.example.com/\"\n"
        ),
    );
    let pin = format!("--agentfile={}", file.display());
    for (command, file) in [("verify", &log), ("verify-receipt", &receipt)] {
        let status = |format: &str| {
            let out = case.run(&[
                "audit",
                command,
                "--format",
                format,
                &pin,
                file.to_str().unwrap(),
            ]);
            let shown = format!("{}{}", stdout(&out), stderr(&out));
            assert!(
                !shown.contains(MARKER),
                "{command} shows the secret:\n{shown}"
            );
            out.status.code()
        };
        assert_eq!(status("human"), status("json"), "{command}");
    }
    assert_eq!(
        case.run(&["audit", "verify", &pin, log.to_str().unwrap()])
            .status
            .code(),
        Some(2)
    );
}

/// An approver set that does not verify: the only line before the
/// summary, with the reason the text gives, exit 1 either way.
#[test]
fn audit_verify_says_as_json_that_the_approver_set_does_not_verify() {
    let case = Case::new();
    let (_, did) = case.signed_agent();
    let log = case.log(vec![event("a", "x", "1")]);
    let file = case.write(
        "set.yaml",
        &format!(
            "name: my-agent\nidentity:\n  did: {did}\nsandbox:\n  command: [\"true\"]\nhuman_gates:\n  approver_set:\n    dir: ./set\n    pin: sha256:{}\n",
            "0".repeat(64)
        ),
    );
    let (pin, path) = (
        format!("--agentfile={}", file.display()),
        log.to_str().unwrap(),
    );
    let human = case.run(&["audit", "verify", &pin, path]);
    assert_eq!(human.status.code(), Some(1), "{}", stderr(&human));
    let said = stdout(&human);
    let error = said.trim_end().strip_prefix("error: ").unwrap();
    assert!(
        error.starts_with("TAMPERING DETECTED in the approver set: cannot read directory"),
        "{said}"
    );
    let out = case.run(&["audit", "verify", "--format", "json", &pin, path]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        json_lines(&out),
        [
            serde_json::json!({"type": "approver_set", "ok": false, "error": error}),
            serde_json::json!({"type": "summary", "ok": false, "logs": 0, "failed": 1}),
        ]
    );
}
