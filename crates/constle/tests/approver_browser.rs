//! The approver end to end, in a real browser: an agent's gated calls go
//! through the real `constle run` (bubblewrap, the MCP gate, a real MCP
//! server on the host and client in the sandbox, as in `gate.rs`) to
//! `constle approver serve`, and a person signs in and clicks Approve, then
//! Deny, in headless Chromium driven over WebDriver (chromedriver). The
//! approved call is forwarded, the denied one is not, both are in the audit
//! log, and the log verifies against the Agentfile.
//!
//! One browser start for the whole file. With `CONSTLE_SCREENSHOTS=DIR` it
//! also writes the page's screenshots there (`docs/img/` holds the ones the
//! docs show).
//!
//! This binary has its own `main`: started as `<exe> mcp-client …` it is
//! the MCP client that runs inside the sandbox.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the test reports through panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use constle_testkit::mcp::{McpServerOptions, TestMcpServer};
use constle_testkit::require_root;
use libtest_mimic::{Arguments, Trial};
use serde_json::Value;

mod common;
#[path = "approver/webdriver.rs"]
mod webdriver;

use common::mcp::{Parties, Setup, call, outcome};
use common::{Case, http, server, text};
use server::{Approver, PASSWORD};
use webdriver::Browser;

const WEBHOOK_VAR: &str = "TEST_APPROVER_WEBHOOK_URL";
const KEY: &str = "desk";
const SCRIPT: &str = "<script>alert(1)</script>";

fn main() {
    common::mcp::be_the_client_if_asked();
    let name = "a_person_approves_one_call_and_denies_another_in_a_real_browser";
    let tests = vec![Trial::test(name, move || {
        if require_root(name, &["bwrap", "chromium", "chromedriver"]) {
            approve_and_deny_in_a_browser();
        }
        Ok(())
    })];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

fn agentfile(case: &Case, who: &Parties<'_>) -> PathBuf {
    let setup = Setup {
        tools: &["pay_invoice"],
        timeout_seconds: 180,
        ..Setup::default()
    };
    let pay_script = format!(r#"{{"invoice_id":"{SCRIPT}"}}"#);
    let steps = [
        call("pay", "pay_invoice", r#"{"invoice_id":"INV-0042"}"#),
        call("pay-script", "pay_invoice", &pay_script),
    ];
    case.gated_agentfile(who, &setup, &steps)
}

/// Reloads the page until `ready` says yes about its DOM.
fn wait_for(browser: &Browser, url: &str, what: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        browser.goto(url);
        let source = browser.source();
        if ready(&source) {
            return source;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{source}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn screenshot(browser: &Browser, name: &str) {
    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    if let Some(dir) = std::env::var_os("CONSTLE_SCREENSHOTS") {
        fs::write(Path::new(&dir).join(name), png).unwrap();
    }
}

fn wait_exit(mut child: Child) -> Output {
    let deadline = Instant::now() + Duration::from_secs(200);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    child.wait_with_output().unwrap()
}

fn approve_and_deny_in_a_browser() {
    let case = Case::new();
    let agent_did = case.keygen(&["keygen", "test-agent"]);
    let approver_did = case.keygen(&["webhook-keygen", KEY]);
    case.install_mcp_client();
    let server = TestMcpServer::start(McpServerOptions::default()).unwrap();
    let approver = Approver::start(&case, KEY, None);
    let who = Parties {
        agent_did: &agent_did,
        approver_did: &approver_did,
        server: &server,
        webhook_var: WEBHOOK_VAR,
    };
    let file = agentfile(&case, &who);

    let run = case
        .command(&["run", file.to_str().unwrap()])
        .env(WEBHOOK_VAR, approver.gate_url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // A phone-sized window first.
    let browser = Browser::start(412, 915);
    let page = format!("http://{}/", approver.addr);
    browser.goto(&page);
    let login = browser.source();
    assert!(login.contains("Sign in"), "{login}");
    browser.type_into(&browser.find("#password"), PASSWORD);
    browser.submit(&browser.find("#sign-in"));
    assert!(
        browser.source().contains("Signed in as"),
        "the login did not stick"
    );

    let first = wait_for(&browser, &page, "the first request", |s| {
        s.contains("INV-0042")
    });
    assert!(first.contains("Waiting for a decision (1)"), "{first}");
    // Headless Chromium starts no narrower than 500 px; resizing goes below.
    browser.resize(412, 915);
    screenshot(&browser, "approver-pending-phone.png");
    browser.resize(1280, 900);
    screenshot(&browser, "approver-pending-desktop.png");
    browser.submit(&browser.find("button.approve"));

    let second = wait_for(&browser, &page, "the second request", |s| {
        s.contains("Waiting for a decision (1)") && s.contains("alert(1)")
    });
    // Shown as text, never as markup: the DOM has no script element at all,
    // and a person reads the argument exactly as the agent wrote it.
    assert!(browser.find_all("script").is_empty(), "{second}");
    assert!(
        second.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{second}"
    );
    let shown = browser.text(&browser.find("article.request pre.args"));
    assert!(shown.contains(SCRIPT), "{shown}");
    browser.submit(&browser.find("button.deny"));

    let out = wait_exit(run);
    let stdout = text(&out.stdout);
    let report = format!("status {:?}\n{stdout}\n{}", out.status, text(&out.stderr));
    assert!(out.status.success(), "{report}");

    browser.resize(412, 915);
    let history = wait_for(&browser, &page, "the history", |s| {
        s.contains("denied</span>")
    });
    assert!(history.contains("Waiting for a decision (0)"), "{history}");
    assert!(history.contains("approved</span>"), "{history}");
    screenshot(&browser, "approver-history-phone.png");
    drop(browser);

    let (paid, status) = outcome(&stdout, "pay", &report);
    assert_eq!(
        (paid.trim(), status),
        ("result: paid INV-0042", 0),
        "{report}"
    );
    let (_, status) = outcome(&stdout, "pay-script", &report);
    assert_eq!(status, 3, "{report}");
    let calls = server.calls();
    assert_eq!(calls.len(), 1, "only the approved call is forwarded");
    assert_eq!(calls[0].tool, "pay_invoice");
    assert_eq!(calls[0].arguments["invoice_id"], "INV-0042");

    let gate: Vec<Value> = case
        .log()
        .into_iter()
        .filter(|e| e["event"].as_str().unwrap().starts_with("gate_"))
        .collect();
    let names: Vec<&str> = gate.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "gate_triggered",
            "gate_approved",
            "gate_triggered",
            "gate_denied"
        ],
        "{gate:?}"
    );
    assert_eq!(gate[1]["decided_by"], "webhook");
    assert_eq!(gate[1]["approver"], approver_did.as_str());
    assert_eq!(gate[1]["request_id"], gate[0]["request_id"]);
    assert_eq!(gate[3]["reason"], "denied");
    assert_eq!(gate[3]["request_id"], gate[2]["request_id"]);

    let day = case.log_file();
    let verified = case.run(&[
        "audit",
        "verify",
        &format!("--agentfile={}", file.display()),
        day.to_str().unwrap(),
    ]);
    assert!(
        verified.status.success(),
        "{}{}",
        text(&verified.stdout),
        text(&verified.stderr)
    );
}
