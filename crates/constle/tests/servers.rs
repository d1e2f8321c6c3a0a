//! The MCP servers people run, behind the gate, end to end: the reference
//! `server-everything` over stdio and over Streamable HTTP, and the
//! reference filesystem server over stdio, confined to its own work
//! directory. Both are the real packages from the npm registry that
//! `scripts/setup.sh` pins. The agent is the testkit's rmcp client (this
//! test binary, as `<exe> mcp-client …`) inside the sandbox; a gated call is
//! approved by a simulated decision endpoint signing with a real key.
//! Loopback only.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use constle_identity::SigningIdentity;
use constle_testkit::npm::{NodeHttpServer, mcp_package, require_mcp_tools};
use constle_testkit::{Answer, SimulatedApprover, require_root};
use libtest_mimic::{Arguments, Trial};

mod common;
use common::mcp::step_on;
use common::{Case, report, text};

const WEBHOOK_VAR: &str = "TEST_SERVERS_WEBHOOK_URL";
const SECRET_VAR: &str = "TEST_SERVERS_TOKEN";

fn main() {
    common::mcp::be_the_client_if_asked();
    let tests = vec![
        e2e("server_everything_over_stdio_behind_the_gate", || {
            everything(Transport::Stdio);
        }),
        e2e("server_everything_over_http_behind_the_gate", || {
            everything(Transport::Http);
        }),
        e2e(
            "the_filesystem_server_reads_its_own_directory_only",
            filesystem,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

fn e2e(name: &str, test: fn()) -> Trial {
    common::e2e_when(
        name,
        |n| require_root(n, &["bwrap"]) && require_mcp_tools(n),
        test,
    )
}

/// An agent whose gated calls one approver decides, approving each.
struct Fixture {
    case: Case,
    webhook: SimulatedApprover,
    approver_did: String,
}

impl Fixture {
    fn new() -> Fixture {
        let case = Case::new();
        case.install_mcp_client();
        let approver = SigningIdentity::generate();
        let approver_did = approver.did().to_string();
        let webhook = SimulatedApprover::start(approver, [], Answer::Approve).unwrap();
        Fixture {
            case,
            webhook,
            approver_did,
        }
    }

    /// The Agentfile of an agent running `steps`, with `servers` (YAML
    /// list entries under `mcp.servers`) and `gated` held for approval.
    fn agentfile(&self, servers: &str, gated: &str, steps: &[String]) -> PathBuf {
        let script = serde_json::to_string(&steps.join("\n")).unwrap();
        self.case.agentfile(&format!(
            r#"sandbox:
  command: ["sh", "-c", {script}]
  workdir: ./work
  network:
    egress: none
mcp:
  servers:
{servers}
human_gates:
  enabled: true
  require_approval_for: [{gated}]
  approver_pubkey: {approver}
  notify:
    - channel: webhook
      url_secret_ref: {WEBHOOK_VAR}
  approval_timeout_seconds: 30
"#,
            approver = self.approver_did,
        ))
    }

    /// `constle run` with the webhook and `secret` in its environment.
    fn run(&self, file: &Path, secret: &str) -> Output {
        self.case
            .command(&["run", file.to_str().unwrap()])
            .env(WEBHOOK_VAR, self.webhook.url())
            .env(SECRET_VAR, secret)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

/// A secret made at run time, so that it is in no binary (the test binary
/// is the agent's client too).
fn fresh_secret() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("tok-{nanos:x}-{}", std::process::id())
}

enum Transport {
    Stdio,
    Http,
}

/// The output of step `name`, and its exit status.
fn outcome(out: &Output, name: &str) -> (String, i32) {
    common::mcp::outcome(&text(&out.stdout), name, &report(out))
}

/// Step `undeclared` was refused by the gate: the tool is not declared.
fn refused_undeclared(out: &Output) {
    let (said, status) = outcome(out, "undeclared");
    assert_eq!(status, 3, "{said}");
    assert!(said.contains("not declared"), "{said}");
}

/// `server-everything`: its tools listed as declared, a declared call
/// answered, an undeclared one refused before the server, a gated one
/// approved by the webhook and then answered; over stdio, the secret its
/// environment holds never reaches the agent, even when the server shows
/// its whole environment.
fn everything(transport: Transport) {
    let fx = Fixture::new();
    let secret = fresh_secret();
    let script = mcp_package("server-everything").join("dist/index.js");
    let script = script.to_str().unwrap();
    let http;
    let server = match transport {
        Transport::Stdio => format!(
            "    - id: everything\n      command: [node, {script}, stdio]\n      env_secret_refs:\n        EVERYTHING_TOKEN: {SECRET_VAR}\n"
        ),
        Transport::Http => {
            http = NodeHttpServer::start(&[script, "streamableHttp"], false).unwrap();
            format!("    - id: everything\n      url: {}\n", http.url())
        }
    };
    let server = format!("{server}      tools: [echo, get-sum, get-env]\n");
    let step = |name: &str, args: &str| step_on("EVERYTHING", name, args);
    let steps = [
        step("list", "list $URL"),
        step("echo", r#"call $URL echo '{"message":"hello"}'"#),
        step("undeclared", "call $URL get-tiny-image '{}'"),
        step("sum", r#"call $URL get-sum '{"a":2,"b":3}'"#),
        step("env", "call $URL get-env '{}'"),
    ];
    let file = fx.agentfile(&server, "get-sum", &steps);
    let out = fx.run(&file, &secret);
    let report = report(&out);
    assert!(out.status.success(), "{report}");

    let (listed, status) = outcome(&out, "list");
    let mut listed: Vec<&str> = listed.lines().collect();
    listed.sort_unstable();
    assert_eq!((listed, status), (vec!["echo", "get-env", "get-sum"], 0));
    assert_eq!(outcome(&out, "echo"), ("result: Echo: hello\n".into(), 0));
    refused_undeclared(&out);
    assert_eq!(
        outcome(&out, "sum"),
        ("result: The sum of 2 and 3 is 5.\n".into(), 0)
    );
    let asked: Vec<String> = fx
        .webhook
        .requests()
        .iter()
        .map(|r| r["tool"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(asked, ["get-sum"], "{report}");
    let (env, _) = outcome(&out, "env");
    assert!(!env.contains(&secret), "{env}");
    if matches!(transport, Transport::Stdio) {
        assert!(env.contains("sent back a secret it holds"), "{env}");
    }

    let refused = fx.case.events("mcp_refused");
    assert!(
        refused
            .iter()
            .any(|e| e["tool"] == "get-tiny-image" && e["server"] == "everything"),
        "{refused:?}"
    );
    assert_eq!(fx.case.events("gate_approved").len(), 1, "{report}");
    let log = fs::read_to_string(fx.case.log_file()).unwrap();
    assert!(!log.contains(&secret));
}

/// The filesystem server, confined to its work directory: the agent lists
/// and reads files there through it, and a gated write is approved; a path
/// outside (absolute, `..`, a link planted in the directory) is refused by
/// the server. A second instance allowed all of `/` still finds neither the
/// agent's work directory nor `$CONSTLE_HOME`: its sandbox does not show
/// them.
fn filesystem() {
    let fx = Fixture::new();
    let files = fx.case.path("files");
    fs::create_dir(&files).unwrap();
    fs::write(files.join("notes.txt"), "meeting at noon\n").unwrap();
    let files = files.canonicalize().unwrap();
    let agent_work = fx.case.path("work").canonicalize().unwrap();
    fs::write(agent_work.join("private.txt"), "the agent's own\n").unwrap();
    std::os::unix::fs::symlink(agent_work.join("private.txt"), files.join("link.txt")).unwrap();
    fs::create_dir_all(fx.case.home()).unwrap();
    let home = fx.case.home().canonicalize().unwrap();
    let script = mcp_package("server-filesystem").join("dist/index.js");
    let script = script.to_str().unwrap();
    let servers = format!(
        "    - id: files\n      command: [node, {script}, {files}]\n      workdir: {files}\n      tools: [list_directory, read_text_file, write_file]\n\
         \x20   - id: root\n      command: [node, {script}, /]\n      tools: [list_directory, read_text_file]\n",
        files = files.display(),
    );
    let read = |on: &str, name: &str, path: &Path| {
        step_on(
            on,
            name,
            &format!(
                r#"call $URL read_text_file '{{"path":"{}"}}'"#,
                path.display()
            ),
        )
    };
    let list = |on: &str, name: &str, path: &Path| {
        step_on(
            on,
            name,
            &format!(
                r#"call $URL list_directory '{{"path":"{}"}}'"#,
                path.display()
            ),
        )
    };
    let steps = [
        list("FILES", "list", &files),
        read("FILES", "read", &files.join("notes.txt")),
        read("FILES", "absolute", Path::new("/usr/lib/os-release")),
        read("FILES", "dotdot", &files.join("../work/private.txt")),
        read("FILES", "link", &files.join("link.txt")),
        step_on(
            "FILES",
            "write",
            &format!(
                r#"call $URL write_file '{{"path":"{}","content":"approved\n"}}'"#,
                files.join("written.txt").display()
            ),
        ),
        step_on("FILES", "undeclared", "call $URL move_file '{}'"),
        read("ROOT", "root_system", Path::new("/usr/lib/os-release")),
        read("ROOT", "root_agent", &agent_work.join("private.txt")),
        list("ROOT", "root_home", &home),
    ];
    let file = fx.agentfile(&servers, "write_file", &steps);
    let out = fx.run(&file, "unused");
    let report = report(&out);
    assert!(out.status.success(), "{report}");

    let (listed, status) = outcome(&out, "list");
    assert_eq!(status, 0, "{report}");
    assert!(listed.contains("[FILE] notes.txt"), "{listed}");
    assert_eq!(
        outcome(&out, "read"),
        ("result: meeting at noon\n\n".into(), 0)
    );
    // The server's own rule; the link's target is not even in its sandbox.
    for outside in ["absolute", "dotdot"] {
        let (said, status) = outcome(&out, outside);
        assert_eq!(status, 4, "{outside}: {said}");
        assert!(
            said.contains("outside allowed directories"),
            "{outside}: {said}"
        );
    }
    let (said, status) = outcome(&out, "link");
    assert_eq!(status, 4, "{said}");
    assert!(!said.contains("the agent's own"), "{said}");
    assert_eq!(outcome(&out, "write").1, 0, "{report}");
    assert_eq!(
        fs::read_to_string(files.join("written.txt")).unwrap(),
        "approved\n"
    );
    refused_undeclared(&out);

    let (system, status) = outcome(&out, "root_system");
    assert_eq!(status, 0, "{system}");
    assert!(system.contains("ID="), "{system}");
    for hidden in ["root_agent", "root_home"] {
        let (said, status) = outcome(&out, hidden);
        assert_eq!(status, 4, "{hidden}: {said}");
        assert!(!said.contains("the agent's own"), "{hidden}: {said}");
        assert!(said.contains("ENOENT"), "{hidden}: {said}");
    }
}
