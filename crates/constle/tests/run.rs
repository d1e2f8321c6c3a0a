//! `constle run` end to end: the real binary, bubblewrap and Squid, with a
//! simulated outside host in a network namespace the test creates. Nothing
//! here sends traffic anywhere but loopback and that namespace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use constle_testkit::{Agentfile, HostsFile, TestHost, require_e2e, require_root};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/invoice-processor/work/agent.py"
);

mod common;
use common::{Case, text};

fn sandbox_ready(test: &str) -> bool {
    require_root(test, &["bwrap"])
}

/// Ready for a test that also needs Squid and network namespaces.
fn e2e_ready(test: &str) -> bool {
    sandbox_ready(test) && require_e2e(test)
}

fn sh(script: &str) -> String {
    format!(
        "sandbox:\n  command: [\"sh\", \"-c\", {}]\n  workdir: ./work\n  network:\n    egress: none\n",
        serde_json::to_string(script).unwrap()
    )
}

/// `constle run` of an Agentfile with `body`, which must exit with `code`
/// and say `said` on stderr.
#[track_caller]
fn run_says(case: &Case, body: &str, code: Option<i32>, said: &str) -> Output {
    let file = case.agentfile(body);
    let out = case.run(&["run", file.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), code, "{stderr}");
    assert!(stderr.contains(said), "{said:?} not said:\n{stderr}");
    out
}

/// `constle run` of `file` in the background, its output to `output()`.
fn start(case: &Case, file: &Path, output: fn() -> Stdio) -> Child {
    case.command(&["run", file.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(output())
        .stderr(output())
        .spawn()
        .unwrap()
}

fn kill(signal: &str, child: &Child) {
    Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
}

#[test]
fn the_agents_exit_status_is_constles_and_the_run_is_logged() {
    if !sandbox_ready("exit status") {
        return;
    }
    let case = Case::new();
    let out = run_says(
        &case,
        &sh("echo out; echo err >&2; exit 7"),
        Some(7),
        "err\n",
    );
    assert_eq!(text(&out.stdout), "out\n");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("egress      none"), "{stderr}");
    let log = case.log();
    assert_eq!(log.first().unwrap()["event"], "run_started");
    assert_eq!(log.last().unwrap()["event"], "run_finished");
    assert_eq!(log.last().unwrap()["exit_status"], 7);
    assert_eq!(log.last().unwrap()["run_started_seq"], log[0]["seq"]);
}

#[test]
fn stdin_is_not_the_hosts() {
    if !sandbox_ready("stdin") {
        return;
    }
    let case = Case::new();
    let file = case.agentfile(&sh(
        "if read line; then echo read: $line; else echo eof; fi",
    ));
    let out = case
        .command(&["run", file.to_str().unwrap()])
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), "eof\n", "{}", text(&out.stderr));
}

#[test]
fn a_declared_identity_without_its_key_refuses_to_start() {
    let case = Case::new();
    let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
    let marker = case.path("work/started");
    let body = format!(
        "identity:\n  did: {did}\n{}",
        sh(&format!("touch {}", marker.display()))
    );
    let out = run_says(&case, &body, Some(125), did);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("constle keygen"), "{stderr}");
    assert!(!marker.exists(), "the agent ran");
}

#[test]
fn an_invalid_agentfile_starts_nothing() {
    let case = Case::new();
    let body = "sandbox:\n  command: [\"true\"]\n  netwrok: {}\n";
    run_says(&case, body, Some(1), "unknown_field");
    assert!(!case.home().join("logs").exists());
}

#[test]
fn the_sandbox_sees_no_host_secrets() {
    if !sandbox_ready("secrets") {
        return;
    }
    let case = Case::new();
    let did = case.keygen(&["keygen", "test-agent"]);
    let approver = case.keygen(&["webhook-keygen", "approver"]);
    let probe = format!(
        "env; test -e {home} && echo HOME_VISIBLE; ls /proc | grep -c '^[0-9]' ; id -u",
        home = case.home().display()
    );
    let file = case.write_agentfile(
        &Agentfile::new("test-agent")
            .did(&did)
            .sh(&probe)
            .workdir("./work")
            .env("DECLARED", "yes")
            .egress("none")
            .section(&format!("human_gates:\n  enabled: true\n  require_approval_for: [x]\n  approver_pubkey: {approver}\n  notify:\n    - channel: webhook\n      url_secret_ref: TEST_WEBHOOK_SECRET\n")),
    );
    let out = case
        .command(&["run", file.to_str().unwrap()])
        .env(
            "TEST_WEBHOOK_SECRET",
            "https://hooks.example.test/s3cr3t-token",
        )
        .env("HOST_ONLY_VARIABLE", "leaked")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let seen = text(&out.stdout);
    assert!(seen.contains("DECLARED=yes"), "{seen}");
    for secret in [
        "s3cr3t-token",
        "HOST_ONLY_VARIABLE",
        "CONSTLE_HOME",
        "HOME_VISIBLE",
        "TEST_WEBHOOK_SECRET",
    ] {
        assert!(
            !seen.contains(secret),
            "{secret} reached the sandbox:\n{seen}"
        );
    }
}

/// The example agent, run against a simulated outside world: its allowed
/// host is a namespace holding a documentation address.
#[test]
fn the_example_agent_reaches_only_its_allowed_host() {
    if !e2e_ready("example agent") {
        return;
    }
    let host = TestHost::start().unwrap();
    let case = Case::new();
    fs::copy(EXAMPLE, case.path("work/agent.py")).unwrap();
    let hosts = case.path("hosts");
    HostsFile::new()
        .with(host.ipv4(), "api.groq.com")
        .with(std::net::Ipv4Addr::LOCALHOST, "localtest.me")
        .write(&hosts)
        .unwrap();
    let file = case.write_agentfile(
        &Agentfile::new("test-agent")
            .command(["python3", "agent.py"])
            .workdir("./work")
            .env("ALLOWED_ADDRESS", &host.ipv4().to_string())
            .allowed_hosts(["api.groq.com", "localtest.me"]),
    );
    let out = case.run(&[
        "run",
        "--hosts-file",
        hosts.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}\n{}", text(&out.stderr));
    let line = |start: &str| {
        said.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line {start:?} in\n{said}"))
            .to_owned()
    };
    assert!(
        line("agent: CONNECT api.groq.com:443")
            .contains(host.banner_for(host.ipv4().into()).trim()),
        "{said}"
    );
    for refused in [
        "agent: CONNECT evil.example.com:443",
        &format!("agent: CONNECT {}:443", host.ipv4()),
        "agent: CONNECT api.groq.com:22",
        "agent: CONNECT localtest.me:443",
    ] {
        assert!(line(refused).contains("refused by the proxy"), "{said}");
    }
    assert!(
        line(&format!("agent: direct connection to {}", host.ipv4()))
            .contains("Network is unreachable"),
        "{said}"
    );
    assert!(
        line("agent: direct connection to 2001:db8::10").contains("Network is unreachable"),
        "{said}"
    );
    assert_eq!(
        host.connections(),
        1,
        "only the allowed request may reach the host"
    );

    let allowed = case.events("network_allowed");
    assert_eq!(allowed.len(), 1, "{allowed:?}");
    assert_eq!(allowed[0]["host"], "api.groq.com");
    assert_eq!(allowed[0]["squid"], "TCP_TUNNEL/200");
    assert_eq!(allowed[0]["address"], host.ipv4().to_string());
    let blocked = case.events("network_blocked");
    let reasons: Vec<(String, String)> = blocked
        .iter()
        .map(|e| {
            (
                e["host"].as_str().unwrap().to_owned(),
                e["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(blocked.len(), 4, "{reasons:?}");
    assert!(
        reasons.contains(&("evil.example.com".into(), "not_allowed".into())),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&("localtest.me".into(), "internal_destination".into())),
        "{reasons:?}"
    );
    assert!(
        blocked.iter().all(|e| e["squid"] == "TCP_DENIED/403"),
        "{blocked:?}"
    );
}

/// A process whose command line holds `marker`, if any is still running.
fn survivors(marker: &str) -> String {
    let out = Command::new("pgrep")
        .args(["-af", marker])
        .output()
        .unwrap();
    text(&out.stdout)
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a run of a long-sleeping agent, waits until the agent and its
/// Squid are up, hands constle `signal`, and checks that nothing of the run
/// survives. Returns constle's exit status.
fn stop_a_run_with(signal: &str) -> (Case, std::process::ExitStatus) {
    let case = Case::new();
    let marker = format!("constle-test-marker-{}-{signal}", std::process::id());
    let file = case.write_agentfile(
        &Agentfile::new("test-agent")
            .command(["sh", "-c", "touch started; sleep 1000", &marker])
            .workdir("./work")
            .allowed_hosts(["api.groq.com"]),
    );
    let mut child = start(&case, &file, Stdio::null);
    wait_for("the agent to start", || case.path("work/started").exists());
    let squid = format!("constle{}x", child.id());
    let found = survivors(&squid);
    assert!(
        found.contains("squid"),
        "no squid of this run found: {found:?}"
    );
    assert!(!survivors(&marker).is_empty(), "the agent is not running");
    kill(signal, &child);
    let status = child.wait().unwrap();
    wait_for("every process of the run to end", || {
        survivors(&marker).is_empty() && survivors(&squid).is_empty()
    });
    (case, status)
}

#[test]
fn sigterm_and_sigint_stop_the_agent_and_the_proxy_and_still_log_the_end() {
    if !e2e_ready("sigterm") {
        return;
    }
    for (signal, code) in [("TERM", 143), ("INT", 130)] {
        let (case, status) = stop_a_run_with(signal);
        assert_eq!(status.code(), Some(code), "SIG{signal}");
        let log = case.log();
        assert_eq!(log.last().unwrap()["event"], "run_finished");
        assert!(
            log.iter()
                .any(|e| e["event"] == "run_interrupted" && e["signal"] == format!("SIG{signal}"))
        );
    }
}

#[test]
fn nothing_of_the_run_outlives_a_killed_constle() {
    if !e2e_ready("sigkill") {
        return;
    }
    let (case, status) = stop_a_run_with("KILL");
    assert_eq!(status.code(), None, "constle was killed");
    // The log ends at its last acknowledged entry and still verifies.
    let log = case.log();
    assert_eq!(log.first().unwrap()["event"], "run_started");
    let out = case.run(&["audit", "verify", case.log_file().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn when_the_proxy_dies_the_run_fails_closed() {
    if !e2e_ready("proxy death") {
        return;
    }
    let case = Case::new();
    let file = case.write_agentfile(
        &Agentfile::new("test-agent")
            // Squid starts beside the sandbox: a request through it, answered
            // whatever the answer, says it is up, so that it dies running.
            .sh("curl -s -o /dev/null -m 10 https://api.groq.com/; touch started; exec sleep 1000")
            .workdir("./work")
            .allowed_hosts(["api.groq.com"]),
    );
    let child = start(&case, &file, Stdio::piped);
    wait_for("the agent to start", || case.path("work/started").exists());
    let squid = format!("constle{}x", child.id());
    Command::new("pkill")
        .args(["-KILL", "-f", &squid])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("egress proxy exited"), "{stderr}");
    assert_eq!(case.events("egress_failed").len(), 1);
    assert_eq!(case.log().last().unwrap()["event"], "run_finished");
}

#[test]
fn open_egress_is_announced() {
    if !e2e_ready("open egress") {
        return;
    }
    let body = "sandbox:\n  command: [\"true\"]\n  workdir: ./work\n  network:\n    egress: open\n";
    run_says(&Case::new(), body, Some(0), "OPEN: any public host");
}

#[test]
fn a_workdir_showing_constle_home_or_the_agentfile_is_refused() {
    let body = |workdir: &str| {
        format!(
            "sandbox:\n  command: [\"true\"]\n  workdir: {workdir}\n  network:\n    egress: none\n"
        )
    };
    let case = Case::new();
    // The Agentfile's own directory: refused as the Agentfile is read.
    run_says(&case, &body("."), Some(1), "workdir_holds_agentfile");
    // CONSTLE_HOME itself, and through a link an earlier run planted.
    fs::create_dir_all(case.home().join("keys")).unwrap();
    std::os::unix::fs::symlink(case.home(), case.path("work/planted")).unwrap();
    for workdir in ["./home", "./home/keys", "./work/planted"] {
        run_says(&case, &body(workdir), Some(125), "CONSTLE_HOME");
    }
    assert!(!case.home().join("logs").read_dir().unwrap().any(|e| {
        fs::read_to_string(e.unwrap().path())
            .unwrap()
            .contains("\"exit_status\":0")
    }));
}

/// The run keeps its own files (the launcher's stage, the sockets of the
/// sandbox's doors and its proxy's log) under `TMPDIR`: a work directory
/// holding `TMPDIR` would show them to the agent, which could then reach
/// the proxy's log of decisions. Such a run is refused before anything
/// starts, saying what to change; with egress and a gate, so that every
/// such file exists.
#[test]
fn a_workdir_holding_the_runs_own_files_is_refused() {
    if !sandbox_ready("run files") {
        return;
    }
    let case = Case::new();
    let tmp = case.path("work/tmp");
    fs::create_dir_all(&tmp).unwrap();
    let file = case.agentfile(
        "sandbox:\n  command: [\"sh\", \"-c\", \"echo agent-ran\"]\n  workdir: ./work\n  \
         network:\n    egress: restricted\n    allowed_hosts: [api.example.com]\n\
         mcp:\n  servers:\n    - id: books\n      url: http://127.0.0.1:9/mcp\n      tools: [list]\n",
    );
    let out = case
        .command(&["run", file.to_str().unwrap()])
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("lies inside the sandbox's work directory")
            && stderr.contains("set TMPDIR to a directory outside it"),
        "{stderr}"
    );
    assert!(!text(&out.stdout).contains("agent-ran"), "{stderr}");
}

/// Every row of the spec's network tables and the issue's list, asked from
/// inside a real sandbox through the real proxy. Internal addresses a name
/// resolves to are trapped into the test's own namespace, so even a proxy
/// that wrongly allowed one could not reach past this machine.
#[test]
fn every_network_rule_holds_from_inside_the_sandbox() {
    if !e2e_ready("network rules") {
        return;
    }
    let host = TestHost::start().unwrap();
    let (v4, v6) = (host.ipv4(), host.ipv6());
    let internal: [(&str, std::net::IpAddr); 8] = [
        ("localtest.me", "127.0.0.1".parse().unwrap()),
        ("metadata.example.com", "169.254.169.254".parse().unwrap()),
        ("ten.example.com", "10.1.2.3".parse().unwrap()),
        ("private172.example.com", "172.16.5.4".parse().unwrap()),
        ("private192.example.com", "192.168.1.1".parse().unwrap()),
        ("cgnat.example.com", "100.64.0.1".parse().unwrap()),
        ("ula.example.com", "fd00::1".parse().unwrap()),
        ("linklocal.example.com", "fe80::1".parse().unwrap()),
    ];
    let case = Case::new();
    fs::copy(EXAMPLE, case.path("work/agent.py")).unwrap();
    let mut hosts = HostsFile::new()
        .with(v4, "api.groq.com")
        .with(v6, "v6.groq.com");
    for (name, addr) in internal {
        hosts.add(addr, name);
        if !addr.is_loopback() {
            host.trap(addr).unwrap();
        }
    }
    hosts.write(&case.path("hosts")).unwrap();
    let allowed: Vec<&str> = ["api.groq.com", "v6.groq.com"]
        .into_iter()
        .chain(internal.iter().map(|(n, _)| *n))
        .collect();
    let [a, b, c, d] = v4.octets();
    let expectations: Vec<(String, &str)> = [
        ("api.groq.com:443".to_owned(), "200"),
        ("API.GROQ.COM:443".to_owned(), "200"),
        ("api.groq.com.:443".to_owned(), "200"),
        ("v6.groq.com:443".to_owned(), "200"),
        (format!("{v4}:443"), "403"),
        (format!("{}:443", host.spare_ipv4()), "403"),
        ("evil.example.com:443".to_owned(), "403"),
        ("api.groq.com:22".to_owned(), "403"),
        ("api.groq.com:80".to_owned(), "403"),
        (format!("[{v6}]:443"), "403"),
        (format!("[::ffff:{v4}]:443"), "403"),
        (format!("{}:443", u32::from(v4)), "403"),
        (
            format!("{a:#o}.{b:#o}.{c:#o}.{d:#o}:443").replace("0o", "0"),
            "403",
        ),
        (format!("{a:#x}.{b:#x}.{c:#x}.{d:#x}:443"), "403"),
        ("0.0.0.0:443".to_owned(), "403"),
    ]
    .into_iter()
    .chain(
        internal
            .iter()
            .map(|(name, _)| (format!("{name}:443"), "403")),
    )
    .collect();
    // Given targets, the example agent asks the proxy for each.
    let targets = expectations.iter().map(|(t, _)| t.as_str());
    let file = case.write_agentfile(
        &Agentfile::new("test-agent")
            .command(["python3", "agent.py"].into_iter().chain(targets))
            .workdir("./work")
            .allowed_hosts(&allowed),
    );
    let out = case.run(&[
        "run",
        "--hosts-file",
        case.path("hosts").to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}\n{}", text(&out.stderr));
    for (target, expected) in &expectations {
        let line = said
            .lines()
            .find(|l| l.starts_with(&format!("{target} ")))
            .unwrap_or_else(|| panic!("no answer for {target}:\n{said}"));
        let status = line[target.len() + 1..].split(' ').next().unwrap();
        assert_eq!(status, *expected, "{target}: {line}");
    }
    assert_eq!(
        host.connections(),
        4,
        "only the four allowed requests may reach the host"
    );
    let events = case.events("network_allowed").len() + case.events("network_blocked").len();
    assert_eq!(events, expectations.len(), "one audit event per request");
}

/// `text` as a YAML double-quoted string, every character beyond printable
/// ASCII written as a `\U` escape (a raw NEL or line separator would be a
/// line break to YAML).
fn yaml_quoted(text: &str) -> String {
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            ' '..='~' if c != '"' && c != '\\' => quoted.push(c),
            _ => quoted.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    quoted.push('"');
    quoted
}

/// What a terminal must not be shown, sent by the agent as CONNECT targets
/// (issue 22): the proxy refuses each and the log records it, but the log
/// file holds none of those characters raw, so `cat` of it cannot show
/// reversed or hidden text; the text is kept (as JSON escapes) and the log
/// still verifies.
#[test]
fn a_connect_target_puts_no_raw_terminal_control_into_the_log_file() {
    if !e2e_ready("log escapes") {
        return;
    }
    let hostile = ['\u{202e}', '\u{1b}', '\u{85}', '\u{2028}', '\u{e0041}'];
    let case = Case::new();
    fs::copy(EXAMPLE, case.path("work/agent.py")).unwrap();
    let did = case.keygen(&["keygen", "test-agent"]);
    let targets: Vec<String> = hostile
        .iter()
        .map(|c| format!("evil{c}moc.example.com:443"))
        .chain([format!("all{}.example.com:443", String::from_iter(hostile))])
        .collect();
    let argv: Vec<String> = targets.iter().map(|t| yaml_quoted(t)).collect();
    let file = case.agentfile(&format!(
        "identity:\n  did: {did}\nsandbox:\n  command: [\"python3\", \"agent.py\", {}]\n  workdir: ./work\n  network:\n    allowed_hosts: [api.groq.com]\n",
        argv.join(", ")
    ));
    let out = case.run(&["run", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", common::report(&out));

    let bytes = fs::read(case.log_file()).unwrap();
    let raw = String::from_utf8(bytes).unwrap();
    for c in hostile {
        assert!(!raw.contains(c), "{c:?} is raw in the log file:\n{raw}");
    }
    // The text is kept: a JSON reader gets the characters back.
    let hosts: Vec<String> = case
        .events("network_blocked")
        .iter()
        .map(|e| e["host"].as_str().unwrap().to_owned())
        .collect();
    for c in ['\u{202e}', '\u{2028}', '\u{e0041}'] {
        assert!(
            hosts.iter().any(|h| h.contains(c)),
            "no host holds {c:?}: {hosts:?}"
        );
    }
    assert!(
        raw.contains(r"\u202e") && raw.contains(r"\udb40\udc41"),
        "{raw}"
    );
    let (status, said) = case.audit_verify(&file, &case.log_file());
    assert_eq!(status, Some(0), "{said}");
}

/// A signal at any moment of start-up, even while Squid is starting, ends
/// the run without leaving a process behind.
#[test]
fn a_signal_during_start_up_leaves_nothing_behind() {
    if !e2e_ready("early signal") {
        return;
    }
    let case = Case::new();
    let file = case.write_agentfile(
        &Agentfile::new("test-agent")
            .command(["sleep", "1000"])
            .workdir("./work")
            .allowed_hosts(["api.groq.com"]),
    );
    for delay_ms in [0, 5, 10, 15, 20, 25, 30, 40] {
        let mut child = start(&case, &file, Stdio::null);
        let squid = format!("constle{}x", child.id());
        std::thread::sleep(Duration::from_millis(delay_ms));
        kill("TERM", &child);
        child.wait().unwrap();
        wait_for("every process of the run to end", || {
            survivors(&squid).is_empty()
        });
    }
    let log = case.log();
    let started = log.iter().filter(|e| e["event"] == "run_started").count();
    let finished = log.iter().filter(|e| e["event"] == "run_finished").count();
    assert_eq!(
        started, finished,
        "every run that started also finished in the log"
    );
}

/// `sandbox.limits` with this body's `limits:` mapping and command.
fn limited(limits: &str, script: &str) -> String {
    format!(
        "sandbox:\n  command: [\"sh\", \"-c\", {}]\n  workdir: ./work\n  limits:\n{limits}  network:\n    egress: none\n",
        serde_json::to_string(script).unwrap()
    )
}

#[test]
fn a_memory_hog_stops_at_its_limit_and_ends_the_run() {
    if !sandbox_ready("memory limit") {
        return;
    }
    let case = Case::new();
    let hog = "python3 -c 'x = bytearray(256 << 20); print(\"survived\")'";
    let out = run_says(
        &case,
        &limited("    memory: 64m\n", hog),
        Some(125),
        "the memory limit (64 MiB) was reached",
    );
    assert!(!text(&out.stdout).contains("survived"));
    let hit = case.events("limit_reached");
    assert_eq!(hit.len(), 1, "{hit:?}");
    assert_eq!(hit[0]["limit"], "memory");
    assert_eq!(hit[0]["detail"], "64 MiB");
    assert_eq!(case.log().last().unwrap()["exit_status"], 125);
}

#[test]
fn a_fork_bomb_stops_at_its_limit_and_nothing_survives() {
    if !sandbox_ready("pids limit") {
        return;
    }
    let case = Case::new();
    let marker = format!("constle-fork-bomb-{}", std::process::id());
    // Bounded even if the limit failed: 300 sleepers of 20 s at most.
    let bomb = format!(
        "i=0; while [ $i -lt 300 ]; do sh -c 'sleep 20' {marker} 2>/dev/null & i=$((i+1)); done; wait"
    );
    let body = limited("    pids: 32\n", &bomb);
    let started = Instant::now();
    run_says(
        &case,
        &body,
        Some(125),
        "the process limit (32 processes and threads) was reached",
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    let hit = case.events("limit_reached");
    assert_eq!(hit[0]["limit"], "pids", "{hit:?}");
    wait_for("the bomb's processes to be gone", || {
        survivors(&marker).is_empty()
    });
}

/// An agent that would run forever (here: ignoring SIGTERM and SIGINT)
/// ends at `sandbox.limits.wall_clock_seconds`, like at any other limit,
/// and no cgroup is needed for it.
#[test]
fn the_wall_clock_limit_ends_a_run_that_would_not_end() {
    if !sandbox_ready("wall-clock limit") {
        return;
    }
    let case = Case::new();
    let marker = format!("constle-wall-clock-{}", std::process::id());
    let forever = format!("trap '' TERM INT; sh -c 'trap \"\" TERM INT; sleep 600' {marker}");
    let started = Instant::now();
    run_says(
        &case,
        &limited("    wall_clock_seconds: 1\n", &forever),
        Some(125),
        "the wall-clock limit (1 s) was reached; the run was stopped",
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let hit = case.events("limit_reached");
    assert_eq!(hit.len(), 1, "{hit:?}");
    assert_eq!(hit[0]["limit"], "wall_clock");
    assert_eq!(hit[0]["detail"], "1 s");
    assert_eq!(case.log().last().unwrap()["exit_status"], 125);
    wait_for("the agent's process to be gone", || {
        survivors(&marker).is_empty()
    });
}

/// A newcomer's first Agentfile names no workdir: the default `./work` is
/// made (0700, the invoking user's) and the summary says so; a second run
/// uses it as it is; a declared workdir that is missing is still refused.
#[test]
fn the_default_workdir_is_made_when_missing() {
    use std::os::unix::fs::MetadataExt as _;
    if !sandbox_ready("default workdir") {
        return;
    }
    let case = Case::new();
    fs::remove_dir(case.path("work")).unwrap();
    let minimal = "sandbox:\n  command: [\"sh\", \"-c\", \"echo hi > made-here\"]\n  network:\n    egress: none\n";
    run_says(&case, minimal, Some(0), "workdir     made now, mode 0700");
    let meta = fs::metadata(case.path("work")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o700);
    assert_eq!(meta.uid(), nix_euid());
    assert_eq!(
        fs::read_to_string(case.path("work/made-here")).unwrap(),
        "hi\n"
    );
    let again = run_says(&case, minimal, Some(0), "");
    assert!(!text(&again.stderr).contains("made now"));
    let declared =
        "sandbox:\n  command: [\"true\"]\n  workdir: ./elsewhere\n  network:\n    egress: none\n";
    run_says(&case, declared, Some(125), "create it first");
    assert!(!case.path("elsewhere").exists());
}

fn nix_euid() -> u32 {
    text(&Command::new("id").arg("-u").output().unwrap().stdout)
        .trim()
        .parse()
        .unwrap()
}
