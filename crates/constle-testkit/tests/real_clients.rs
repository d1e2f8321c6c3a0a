//! Each real client `scripts/setup.sh` installs completes the tool loop
//! against the simulated provider directly (no Constle): Claude Code
//! headless, `codex exec` (over the Responses WebSocket), and a tiny agent
//! on each official Python SDK.
//! Each runs with a fresh HOME, only the variables it needs, the
//! placeholder key Constle gives agents, and a proxy variable pointing at a
//! closed loopback port, so nothing it tries beyond the provider can leave
//! the machine. Skipped (with the reason printed) when a client is not
//! installed, except under `CONSTLE_E2E=require`.

#![allow(clippy::expect_used, reason = "test helpers panic on setup failure")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use constle_testkit::llm::{ModelProvider, Script};
use constle_testkit::{require_nothing_missing, require_tools};

/// The key every client is given; the provider must see exactly this.
const PLACEHOLDER: &str = "constle-gate-holds-the-key";
/// What the model asks to run, and what it prints.
const COMMAND: &str = "echo tool-ran-$((6*7))";
const PRINTED: &str = "tool-ran-42";
/// Where `setup.sh` installs the Python SDKs.
const PYTHON_SDK_DIR: &str = "/usr/local/lib/constle-tools/python-sdk";

/// A command for `program` with nothing of this process's environment but
/// a system PATH, a fresh HOME (kept until the command is done), a work
/// directory inside it, and a proxy that refuses everything.
fn client(program: &str, home: &Path) -> Command {
    let work = home.join("work");
    std::fs::create_dir_all(&work).expect("work directory");
    let mut command = Command::new(program);
    command
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("NO_PROXY", "127.0.0.1")
        .current_dir(work)
        .stdin(Stdio::null());
    command
}

fn run(command: &mut Command) -> Output {
    let output = command.output().expect("the client starts");
    assert!(
        output.status.success(),
        "{:?} failed: {}\nstdout: {}\nstderr: {}",
        command.get_program(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The provider saw at least the tool call and the answer to it, every
/// request with the placeholder key, as `method` on `route` (`WS`: as
/// messages on the Responses WebSocket).
fn assert_tool_loop(provider: &ModelProvider, output: &Output, method: &str, route: &str) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("the command printed: ") && stdout.contains(PRINTED),
        "the final message quotes the tool output: {stdout}"
    );
    let model_calls: Vec<_> = provider
        .requests()
        .into_iter()
        .filter(|r| r.method == method && r.route() == route)
        .collect();
    assert!(
        model_calls.len() >= 2,
        "a tool call and a final answer: {model_calls:?}"
    );
    for request in &model_calls {
        assert_eq!(request.api_key(), Some(PLACEHOLDER), "{request:?}");
    }
}

fn provider() -> ModelProvider {
    ModelProvider::start(Script::run(COMMAND)).expect("provider")
}

#[test]
fn claude_code_headless_runs_its_bash_tool() {
    if !require_tools("Claude Code against the simulated provider", &["claude"]) {
        return;
    }
    let provider = provider();
    let home = tempfile::tempdir().expect("home");
    let output = run(client("claude", home.path())
        .env("ANTHROPIC_BASE_URL", provider.url())
        .env("ANTHROPIC_API_KEY", PLACEHOLDER)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        // --allowedTools, not --dangerously-skip-permissions: that one
        // refuses to run as root, and this test may.
        .args([
            "-p",
            "Run the command you are told to.",
            "--allowedTools",
            "Bash",
        ]));
    assert_tool_loop(&provider, &output, "POST", "/v1/messages");
    let first = &provider.requests()[0];
    assert_eq!(first.path, "/v1/messages?beta=true");
    assert!(first.streamed());
    assert!(
        first.max_tokens().is_some(),
        "Claude Code always asks for max_tokens"
    );
}

#[test]
fn codex_exec_runs_its_exec_command_tool() {
    if !require_tools("Codex CLI against the simulated provider", &["codex"]) {
        return;
    }
    let provider = provider();
    let home = tempfile::tempdir().expect("home");
    let base = format!("openai_base_url={}/v1", provider.url());
    let output = run(client("codex", home.path())
        .env("CODEX_API_KEY", PLACEHOLDER)
        .args([
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
        ])
        .args(["-m", "sim-model", "-c", &base])
        .args([
            "-c",
            "analytics.enabled=false",
            "-c",
            "features.plugins=false",
        ])
        .arg("Run the command you are told to."));
    // Codex speaks the Responses WebSocket, and never falls back to HTTP.
    assert_tool_loop(&provider, &output, "WS", "/v1/responses");
    let requests = provider.requests();
    let posts = requests.iter().filter(|r| r.method == "POST").count();
    assert_eq!(posts, 0, "{requests:?}");
    // It opens with a warmup, then continues each response in the next.
    let messages: Vec<_> = requests.iter().filter(|r| r.method == "WS").collect();
    assert_eq!(messages[0].body["generate"], false, "{:?}", messages[0]);
    let continued: Vec<&str> = messages[1..]
        .iter()
        .filter_map(|m| m.body["previous_response_id"].as_str())
        .collect();
    assert_eq!(continued.len(), messages.len() - 1, "{messages:?}");
    assert!(continued.windows(2).all(|w| w[0] != w[1]), "{continued:?}");
}

/// A Python SDK agent from `tests/agents/`, with the SDKs on PYTHONPATH.
fn python_agent(script: &str, home: &Path) -> Command {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests/agents", script]
        .iter()
        .collect();
    let mut command = client("python3", home);
    command
        .env("PYTHONPATH", PYTHON_SDK_DIR)
        .arg(path)
        .arg("sim-model");
    command
}

fn require_python_sdks(test: &str) -> bool {
    let missing = if Path::new(PYTHON_SDK_DIR).join("openai").is_dir() {
        vec![]
    } else {
        vec![format!(
            "the Python SDKs scripts/setup.sh installs in {PYTHON_SDK_DIR}"
        )]
    };
    require_tools(test, &["python3"]) && require_nothing_missing(test, &missing)
}

#[test]
fn the_openai_sdk_runs_the_responses_and_chat_tool_loops() {
    if !require_python_sdks("the OpenAI Python SDK against the simulated provider") {
        return;
    }
    let provider = provider();
    let home = tempfile::tempdir().expect("home");
    let output = run(python_agent("openai_agent.py", home.path())
        .env("OPENAI_BASE_URL", format!("{}/v1", provider.url()))
        .env("OPENAI_API_KEY", PLACEHOLDER));
    assert_tool_loop(&provider, &output, "POST", "/v1/responses");
    assert_tool_loop(&provider, &output, "POST", "/v1/chat/completions");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("responses: the command printed: tool-ran-42\n usage: 50"),
        "{stdout}"
    );
    assert!(
        stdout.contains("chat: the command printed: tool-ran-42\n usage: 50"),
        "{stdout}"
    );
}

#[test]
fn the_anthropic_sdk_runs_the_messages_tool_loop() {
    if !require_python_sdks("the Anthropic Python SDK against the simulated provider") {
        return;
    }
    let provider = provider();
    let home = tempfile::tempdir().expect("home");
    let output = run(python_agent("anthropic_agent.py", home.path())
        .env("ANTHROPIC_BASE_URL", provider.url())
        .env("ANTHROPIC_API_KEY", PLACEHOLDER));
    assert_tool_loop(&provider, &output, "POST", "/v1/messages");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("messages: the command printed: tool-ran-42\n usage: 50"),
        "{stdout}"
    );
    assert_eq!(provider.requests()[0].max_tokens(), Some(1024));
}
