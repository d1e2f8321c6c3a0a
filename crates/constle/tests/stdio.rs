//! Stdio MCP servers end to end: the real `constle run` starts the
//! testkit's rmcp invoice server over stdio (this test binary itself, as
//! `<exe> mcp-stdio-server`, hard-linked into the server's work directory)
//! in a sandbox of its own, and the testkit's rmcp client in the agent's
//! sandbox reaches it through the gate exactly as it reaches a URL server.
//! A gated call is approved by a simulated decision endpoint. Loopback
//! only.
//!
//! Started as `<exe> mcp-client …` this binary is the MCP client, as
//! `<exe> mcp-stdio-server …` the server.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use constle_identity::SigningIdentity;
use constle_testkit::mcp::stdio_server_main;
use constle_testkit::{Answer, HostsFile, SimulatedApprover, TestHost};
use libtest_mimic::Arguments;
use serde_json::Value;

mod common;
use common::mcp::{call, outcome, step};
use common::{Case, e2e, report, text};

const SERVER_SUBCOMMAND: &str = "mcp-stdio-server";
const WEBHOOK_VAR: &str = "TEST_STDIO_WEBHOOK_URL";
const SECRET_VAR: &str = "TEST_STDIO_BOOKS_SECRET";
const INVOICE: &str = r#"{"invoice_id":"INV-0042"}"#;

fn main() {
    common::mcp::be_the_client_if_asked();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == SERVER_SUBCOMMAND) {
        std::process::exit(stdio_server_main(&args[2..]));
    }
    let tests = vec![
        e2e(
            "a_stdio_server_behind_the_gate_like_a_url_server",
            behind_the_gate,
        ),
        e2e(
            "a_missing_secret_stops_the_run_before_anything_starts",
            missing_secret,
        ),
        e2e(
            "the_server_started_for_the_run_is_stopped_with_it",
            stopped_with_the_run,
        ),
        e2e(
            "a_stdio_server_reaches_its_allowed_hosts_only",
            allowed_hosts_only,
        ),
        e2e(
            "a_server_dies_with_constle_killed_by_sigkill",
            dies_with_constle,
        ),
        e2e(
            "a_server_at_its_memory_limit_is_ended_and_recorded",
            memory_limit,
        ),
        e2e(
            "when_a_servers_proxy_dies_the_run_fails_closed",
            server_proxy_dies,
        ),
        e2e(
            "a_servers_ended_sessions_leave_no_sockets_behind",
            sessions_leave_no_sockets_behind,
        ),
        e2e(
            "a_server_that_cannot_start_fails_the_run_before_the_agent",
            server_cannot_start,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

/// An agent, a stdio server `accounting` run from `server-work`, a gate on
/// `pay_invoice` and its approver. `marker` is on the server's command
/// line, to find its processes by.
struct Fixture {
    case: Case,
    approver: SigningIdentity,
    marker: String,
    /// Made at run time, so that it is in no binary (the test binary is
    /// the agent's client too).
    secret: String,
}

impl Fixture {
    fn new() -> Fixture {
        let case = Case::new();
        case.install_mcp_client();
        let server_work = case.path("server-work");
        fs::create_dir(&server_work).unwrap();
        let exe = std::env::current_exe().unwrap();
        // A copy: a hard link would be refused, since what runs in the
        // sandbox could change the test binary through it.
        fs::copy(&exe, server_work.join("server")).unwrap();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        // Its own, so that the servers of tests running beside it are not
        // taken for its own.
        let marker = format!("marker-{}-{nanos:x}", std::process::id());
        Fixture {
            case,
            approver: SigningIdentity::generate(),
            marker,
            secret: format!("s3cr3t-{nanos:x}"),
        }
    }

    fn agentfile(&self, steps: &[String]) -> PathBuf {
        self.agentfile_with("", steps)
    }

    /// With `server` (YAML lines, indented for the server's mapping) added
    /// to the server's entry.
    fn agentfile_with(&self, server: &str, steps: &[String]) -> PathBuf {
        self.agentfile_limited("", server, steps)
    }

    /// With `limits` (YAML lines, indented for the `sandbox` mapping) too.
    fn agentfile_limited(&self, limits: &str, server: &str, steps: &[String]) -> PathBuf {
        let script = steps.join("\n");
        self.case.agentfile(&format!(
            r#"sandbox:
  command: ["sh", "-c", {script}]
  workdir: ./work
  network:
    egress: none
{limits}mcp:
  servers:
    - id: accounting
      command: ["./server", "{SERVER_SUBCOMMAND}", "{marker}"]
      workdir: ./server-work
      env_secret_refs:
        BOOKS_TOKEN: {SECRET_VAR}
      tools: [list_invoices, get_invoice, pay_invoice, env_digest, list_dir, exit, connect, hog]
{server}
human_gates:
  enabled: true
  require_approval_for: [pay_invoice]
  approver_pubkey: {approver}
  notify:
    - channel: webhook
      url_secret_ref: {WEBHOOK_VAR}
  approval_timeout_seconds: 30
"#,
            script = serde_json::to_string(&script).unwrap(),
            marker = self.marker,
            approver = self.approver.did(),
        ))
    }

    fn webhook(&self) -> SimulatedApprover {
        let key = SigningIdentity::from_pkcs8_pem(&self.approver.to_pkcs8_pem()).unwrap();
        SimulatedApprover::start(key, [], Answer::Approve).unwrap()
    }

    /// `constle run` with the secret and the webhook in its environment,
    /// watching for the server's processes meanwhile: the output, and the
    /// pids seen running.
    fn run(&self, file: &Path, webhook: &SimulatedApprover) -> (Output, Vec<u32>) {
        self.run_with(&[], file, webhook)
    }

    /// `constle run` of `file` in the background, as [`Fixture::run`]
    /// starts it, its output piped.
    fn spawn(&self, file: &Path, webhook: &SimulatedApprover) -> std::process::Child {
        self.case
            .command(&["run", file.to_str().unwrap()])
            .env(SECRET_VAR, &self.secret)
            .env(WEBHOOK_VAR, webhook.url())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// [`Fixture::run`] with `args` before the Agentfile.
    fn run_with(
        &self,
        args: &[&str],
        file: &Path,
        webhook: &SimulatedApprover,
    ) -> (Output, Vec<u32>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let (seen, done, marker) = (Arc::clone(&seen), Arc::clone(&done), self.marker.clone());
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    for pid in processes_with(&marker) {
                        let mut seen = seen.lock().unwrap();
                        if !seen.contains(&pid) {
                            seen.push(pid);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let mut argv = vec!["run"];
        argv.extend_from_slice(args);
        argv.push(file.to_str().unwrap());
        let out = self
            .case
            .command(&argv)
            .env(SECRET_VAR, &self.secret)
            .env(WEBHOOK_VAR, webhook.url())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        watcher.join().unwrap();
        let pids = seen.lock().unwrap().clone();
        (out, pids)
    }
}

/// The host pids whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .collect()
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn behind_the_gate() {
    let fx = Fixture::new();
    let webhook = fx.webhook();
    let agent_work = fx.case.path("work").canonicalize().unwrap();
    let server_work = fx.case.path("server-work").canonicalize().unwrap();
    let steps = [
        step("list", "list $URL"),
        call("get", "get_invoice", INVOICE),
        call("undeclared", "delete_everything", "{}"),
        call("pay", "pay_invoice", INVOICE),
        call("secret", "env_digest", r#"{"name":"BOOKS_TOKEN"}"#),
        call(
            "sees_agent",
            "list_dir",
            &format!(r#"{{"path":"{}"}}"#, agent_work.display()),
        ),
        call("own_dir", "list_dir", r#"{"path":"."}"#),
        format!(
            "echo '== agent_sees'; ls {} 2>&1; echo \"== agent_sees exit $?\"",
            server_work.display()
        ),
        "echo '== agent_env'; env; echo '== agent_env exit 0'".to_owned(),
        call("exit", "exit", r#"{"code":"3"}"#),
        call("after", "get_invoice", INVOICE),
    ];
    let file = fx.agentfile(&steps);
    let (out, pids) = fx.run(&file, &webhook);
    let report = report(&out);
    assert!(out.status.success(), "{report}");
    let stdout = text(&out.stdout);
    let step = |name: &str| outcome(&stdout, name, &report);

    // Listed: the declared tools only (the server also has Pay_Invoice,
    // delete_everything and echo).
    let (listed, status) = step("list");
    assert_eq!(status, 0, "{report}");
    let mut listed: Vec<&str> = listed.lines().collect();
    listed.sort_unstable();
    assert_eq!(
        listed,
        [
            "connect",
            "env_digest",
            "exit",
            "get_invoice",
            "hog",
            "list_dir",
            "list_invoices",
            "pay_invoice"
        ]
    );
    assert_eq!(
        step("get"),
        ("result: invoice INV-0042: 120.00 EUR\n".into(), 0)
    );
    let (said, status) = step("undeclared");
    assert_eq!(status, 3, "{said}");
    assert!(said.contains("not declared"), "{said}");
    assert_eq!(step("pay"), ("result: paid INV-0042\n".into(), 0));
    // The secret reached the server, and only its digest came back.
    assert_eq!(
        step("secret"),
        (
            format!("result: set sha256:{}\n", sha256_hex(&fx.secret)),
            0
        )
    );
    // Neither sees the other's work directory.
    let (said, status) = step("sees_agent");
    assert_eq!(status, 4, "{said}");
    assert!(said.contains("No such file or directory"), "{said}");
    let (listed, status) = step("own_dir");
    assert_eq!((listed.trim(), status), ("result: server", 0));
    let (said, status) = step("agent_sees");
    assert_ne!(status, 0, "{said}");
    let (env, _) = step("agent_env");
    assert!(
        !env.contains(&fx.secret) && !env.contains(SECRET_VAR),
        "{env}"
    );
    assert!(
        env.contains("CONSTLE_MCP_ACCOUNTING_URL=http://127.0.0.1:4100/mcp"),
        "{env}"
    );

    // The server exits mid-call: a JSON-RPC error naming it; the run goes
    // on, and the next session gets a fresh server.
    let (said, status) = step("exit");
    assert_eq!(status, 3, "{said}");
    assert!(
        said.contains("MCP server \"accounting\" is not running (exited with status 3)"),
        "{said}"
    );
    assert_eq!(
        step("after"),
        ("result: invoice INV-0042: 120.00 EUR\n".into(), 0)
    );

    // The audit log: the approval, each process's start and end, the
    // crash among them; each client ended its session (DELETE), which
    // stopped its process.
    let gate: Vec<Value> = fx
        .case
        .log()
        .into_iter()
        .filter(|e| e["event"].as_str().unwrap().starts_with("gate_"))
        .collect();
    assert_eq!(gate.len(), 2, "{gate:?}");
    assert_eq!(gate[1]["event"], "gate_approved");
    assert_eq!(gate[1]["server"], "accounting");
    let started = fx.case.events("mcp_server_started");
    let exited = fx.case.events("mcp_server_exited");
    assert_eq!(started.len(), exited.len(), "{started:?}\n{exited:?}");
    assert!(
        started.len() >= 9,
        "one process per client session: {started:?}"
    );
    let crash: Vec<&Value> = exited.iter().filter(|e| e["reason"] == "exited").collect();
    assert_eq!(crash.len(), 1, "{exited:?}");
    assert_eq!(crash[0]["exit_code"], 3);
    assert_eq!(crash[0]["server"], "accounting");
    assert_eq!(
        exited
            .iter()
            .filter(|e| e["reason"] == "session_ended")
            .count(),
        exited.len() - 1,
        "{exited:?}"
    );

    // Its stderr went to a file of its own under CONSTLE_HOME, 0600.
    let stderr = PathBuf::from(started[0]["stderr"].as_str().unwrap());
    assert!(
        stderr.starts_with(fx.case.home().join("logs/mcp")),
        "{stderr:?}"
    );
    assert_eq!(
        fs::metadata(&stderr).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(said.contains("stdio server: ready"), "{said}");
    assert!(said.contains("stdio server: call get_invoice"), "{said}");
    assert!(
        !said.contains("delete_everything"),
        "the refused call got there: {said}"
    );
    assert!(!text(&out.stderr).contains("stdio server:"), "{report}");

    // The secret is nowhere: not in constle's output, not in any file
    // under CONSTLE_HOME (audit log, stderr file), not in the agent's
    // work directory.
    assert!(!stdout.contains(&fx.secret) && !text(&out.stderr).contains(&fx.secret));
    for file in files(&fx.case.home()).into_iter().chain(files(&agent_work)) {
        let bytes = fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&fx.secret),
            "the secret is in {file:?}"
        );
    }

    // Every server process seen during the run is gone after it.
    assert!(!pids.is_empty(), "no server process was seen running");
    let left = processes_with(&fx.marker);
    assert!(left.is_empty(), "left running after the run: {left:?}");
}

fn missing_secret() {
    let fx = Fixture::new();
    let webhook = fx.webhook();
    let file = fx.agentfile(&["echo the agent ran".to_owned()]);
    let out = fx
        .case
        .command(&["run", file.to_str().unwrap()])
        .env_remove(SECRET_VAR)
        .env(WEBHOOK_VAR, webhook.url())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report = report(&out);
    assert_eq!(out.status.code(), Some(125), "{report}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "names the host variable {SECRET_VAR}, which is not set"
        )),
        "{report}"
    );
    assert!(!text(&out.stdout).contains("the agent ran"), "{report}");
    assert!(processes_with(&fx.marker).is_empty());
    // Nothing started: no audit log at all.
    assert!(!fx.case.home().join("logs").exists(), "{report}");
}

fn stopped_with_the_run() {
    let fx = Fixture::new();
    let webhook = fx.webhook();
    let file = fx.agentfile(&["sleep 1".to_owned()]);
    let (out, pids) = fx.run(&file, &webhook);
    assert!(out.status.success(), "{}", report(&out));
    let started = fx.case.events("mcp_server_started");
    let exited = fx.case.events("mcp_server_exited");
    assert_eq!((started.len(), exited.len()), (1, 1), "{exited:?}");
    assert_eq!(exited[0]["reason"], "run_ended");
    // Before run_finished: the server was gone before the run ended.
    let names: Vec<String> = fx
        .case
        .log()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect();
    let at = |name: &str| names.iter().position(|n| n == name).unwrap();
    assert!(at("mcp_server_exited") < at("run_finished"), "{names:?}");
    let pid = started[0]["pid"].as_u64().unwrap() as u32;
    assert!(pids.contains(&pid), "{pid} not among {pids:?}");
    assert!(processes_with(&fx.marker).is_empty());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} is still there"
    );
}

/// With `network.allowed_hosts`, the server reaches its allowed host on 443
/// through a proxy of its own, or by its name resolved in its sandbox, and
/// nothing else; each decision is recorded with the server's id. Without,
/// it has no proxy at all.
fn allowed_hosts_only() {
    let host = TestHost::start().unwrap();
    let fx = Fixture::new();
    let webhook = fx.webhook();
    let hosts = fx.case.path("hosts");
    HostsFile::new()
        .with(host.ipv4(), "api.example.com")
        .write(&hosts)
        .unwrap();
    let steps = [
        call("allowed", "connect", r#"{"host":"api.example.com"}"#),
        call("other", "connect", r#"{"host":"evil.example.com"}"#),
        call("captured", "connect", r#"{"host":"dns:api.example.com"}"#),
        call(
            "unresolved",
            "connect",
            r#"{"host":"dns:evil.example.com"}"#,
        ),
    ];
    let network = "      network:\n        allowed_hosts: [api.example.com]\n";
    let file = fx.agentfile_with(network, &steps);
    let (out, _) = fx.run_with(&["--hosts-file", hosts.to_str().unwrap()], &file, &webhook);
    let report = report(&out);
    assert!(out.status.success(), "{report}");
    let stdout = text(&out.stdout);
    let (said, status) = outcome(&stdout, "allowed", &report);
    assert_eq!(status, 0, "{said}");
    assert!(said.contains("proxy: HTTP/1.1 200"), "{said}");
    let banner = host.banner_for(host.ipv4().into());
    assert!(said.contains(banner.trim()), "{said}");
    let (said, status) = outcome(&stdout, "other", &report);
    assert_eq!(status, 0, "{said}");
    assert!(said.contains("proxy: HTTP/1.1 403"), "{said}");
    // Without the proxy: the name resolves in the server's sandbox to a
    // placeholder, and the connection to it is the same tunnel.
    let (said, status) = outcome(&stdout, "captured", &report);
    assert_eq!(status, 0, "{said}");
    assert!(said.contains("resolved: 198.18."), "{said}");
    assert!(said.contains(banner.trim()), "{said}");
    let (said, _) = outcome(&stdout, "unresolved", &report);
    assert!(!said.contains("resolved:"), "{said}");
    assert_eq!(
        host.connections(),
        2,
        "only the allowed tunnels reach the host"
    );
    let allowed = fx.case.events("network_allowed");
    assert_eq!(allowed.len(), 2, "{allowed:?}");
    for allowed in &allowed {
        assert_eq!(
            (allowed["host"].as_str(), allowed["server"].as_str()),
            (Some("api.example.com"), Some("accounting"))
        );
    }
    let resolved = fx.case.events("dns_resolved");
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(
        (resolved[0]["name"].as_str(), resolved[0]["server"].as_str()),
        (Some("api.example.com"), Some("accounting"))
    );
    let refused = fx.case.events("dns_refused");
    assert!(
        !refused.is_empty()
            && refused
                .iter()
                .all(|e| e["name"] == "evil.example.com" && e["server"] == "accounting"),
        "{refused:?}"
    );
    let blocked = fx.case.events("network_blocked");
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0]["host"], "evil.example.com");
    assert_eq!(blocked[0]["server"], "accounting");

    // Without allowed_hosts: no proxy, no HTTPS_PROXY.
    let file = fx.agentfile(&[call("none", "connect", r#"{"host":"api.example.com"}"#)]);
    let (out, _) = fx.run(&file, &webhook);
    let (said, status) = outcome(&text(&out.stdout), "none", &self::report(&out));
    assert_eq!(status, 4, "{said}");
    assert!(said.contains("HTTPS_PROXY is not set"), "{said}");
}

/// constle killed outright: no teardown runs, and the server's sandbox
/// still ends (its lifeline closes, bwrap's parent-death signal fires).
fn dies_with_constle() {
    let fx = Fixture::new();
    let webhook = fx.webhook();
    let file = fx.agentfile(&["sleep 60".to_owned()]);
    let mut constle = fx
        .case
        .command(&["run", file.to_str().unwrap()])
        .env(SECRET_VAR, &fx.secret)
        .env(WEBHOOK_VAR, webhook.url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    until("the server never started", &|| {
        !processes_with(&fx.marker).is_empty()
    });
    constle.kill().unwrap();
    constle.wait().unwrap();
    until("the server outlived constle", &|| {
        processes_with(&fx.marker).is_empty()
    });
}

/// `sandbox.limits` holds for a stdio server too, in cgroups of its own: a
/// server that takes more memory than the limit is killed by the kernel,
/// the call gets an error naming it, the limit is recorded with the
/// server's id, and the run goes on (the agent's own limit was not
/// reached) with a fresh server for the next session.
fn memory_limit() {
    let fx = Fixture::new();
    let webhook = fx.webhook();
    let steps = [
        call("hog", "hog", r#"{"mib":"400"}"#),
        call("after", "get_invoice", INVOICE),
    ];
    let file = fx.agentfile_limited("  limits: {memory: 96m}\n", "", &steps);
    let (out, _) = fx.run(&file, &webhook);
    let report = report(&out);
    assert!(out.status.success(), "{report}");
    let stdout = text(&out.stdout);
    let (said, status) = outcome(&stdout, "hog", &report);
    assert_eq!(status, 3, "{said}");
    assert!(
        said.contains("MCP server \"accounting\" is not running"),
        "{said}"
    );
    assert_eq!(
        outcome(&stdout, "after", &report),
        ("result: invoice INV-0042: 120.00 EUR\n".into(), 0)
    );
    let reached = fx.case.events("limit_reached");
    assert_eq!(reached.len(), 1, "{reached:?}");
    assert_eq!(
        (&reached[0]["server"], &reached[0]["limit"]),
        (&Value::from("accounting"), &Value::from("memory"))
    );
    let exited = fx.case.events("mcp_server_exited");
    // Killed (the sandbox's init reports the signal as 128 + 9).
    let killed = |e: &&Value| e["signal"] == 9 || e["exit_code"] == 137;
    assert_eq!(exited.iter().filter(killed).count(), 1, "{exited:?}");
}

/// A stdio server's proxy killed mid-run ends the run as the agent's
/// would: `egress_failed` naming the server, exit 125, and the log still
/// closed with `run_finished`.
fn server_proxy_dies() {
    let fx = Fixture::new();
    let webhook = fx.webhook();
    let network = "      network:\n        allowed_hosts: [api.example.com]\n";
    let file = fx.agentfile_with(network, &["touch started; exec sleep 1000".to_owned()]);
    let constle = fx.spawn(&file, &webhook);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !fx.case.path("work/started").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The agent has no proxy (egress: none): this is the server's Squid.
    let squid = format!("constle{}x", constle.id());
    let killed = std::process::Command::new("pkill")
        .args(["-KILL", "-f", &squid])
        .status()
        .unwrap();
    assert!(killed.success(), "no Squid named {squid}");
    let out = constle.wait_with_output().unwrap();
    let report = report(&out);
    assert_eq!(out.status.code(), Some(125), "{report}");
    assert!(
        text(&out.stderr).contains("the proxy of MCP server accounting exited"),
        "{report}"
    );
    let failed = fx.case.events("egress_failed");
    assert_eq!(failed.len(), 1, "{report}");
    assert_eq!(failed[0]["server"], "accounting");
    assert_eq!(fx.case.log().last().unwrap()["event"], "run_finished");
}

/// Each session of a server with `network` runs in a sandbox of its own,
/// whose launcher hands `constle run` the proxy's door and the name
/// service's sockets. When the session's process ends, they are let go:
/// eight more sessions leave `constle run` holding no more sockets than
/// after the first (each held on would be seven).
fn sessions_leave_no_sockets_behind() {
    let fx = Fixture::new();
    let webhook = fx.webhook();
    let network = "      network:\n        allowed_hosts: [api.example.com]\n";
    let pause = |mark: &str| format!("touch {mark}; while [ ! -e go-{mark} ]; do sleep 0.05; done");
    let mut steps = vec![call("first", "list_invoices", "{}"), pause("one")];
    steps.extend((0..8).map(|i| call(&format!("more{i}"), "list_invoices", "{}")));
    steps.push(pause("two"));
    let file = fx.agentfile_with(network, &steps);
    let constle = fx.spawn(&file, &webhook);
    let sockets_at = |mark: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !fx.case.path(&format!("work/{mark}")).exists() {
            assert!(std::time::Instant::now() < deadline, "no {mark}");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The last session's process ends as the next begins: a moment
        // for its end to be noticed.
        std::thread::sleep(Duration::from_millis(500));
        let held = sockets_of(constle.id());
        fs::write(fx.case.path(&format!("work/go-{mark}")), "").unwrap();
        held
    };
    let (one, two) = (sockets_at("one"), sockets_at("two"));
    let out = constle.wait_with_output().unwrap();
    let report = report(&out);
    assert!(out.status.success(), "{report}");
    for i in 0..8 {
        let (said, status) = outcome(&text(&out.stdout), &format!("more{i}"), &report);
        assert_eq!(status, 0, "{said}");
    }
    assert!(
        two <= one + 2,
        "constle run held {one} sockets after one session, {two} after nine\n{report}"
    );
}

/// How many sockets process `pid` holds.
fn sockets_of(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|fd| {
            fs::read_link(fd.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        })
        .count()
}

/// A server whose command does not exist (by absolute or relative path) or
/// cannot be executed ends the run with 125 and why, before the agent
/// starts: the failed start reaches constle, which never takes it for a
/// server that started and then exited.
fn server_cannot_start() {
    for command in ["/no/such/server", "./missing-server", "./not-executable"] {
        let case = Case::new();
        fs::create_dir(case.path("server-work")).unwrap();
        fs::write(case.path("server-work/not-executable"), "#!/bin/sh\n").unwrap();
        let file = case.agentfile(&format!(
            r#"sandbox:
  command: ["sh", "-c", "touch started"]
  workdir: ./work
  network:
    egress: none
mcp:
  servers:
    - id: books
      command: ["{command}"]
      workdir: ./server-work
      tools: [list_invoices]
"#
        ));
        let out = case.run(&["run", file.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{command}: {stderr}");
        assert!(
            !case.path("work/started").exists(),
            "{command}: the agent started"
        );
        assert!(
            stderr.contains("MCP server books could not start")
                && stderr.contains("its command could not be started"),
            "{command}: {stderr}"
        );
    }
}
