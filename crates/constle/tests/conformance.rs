//! The official MCP conformance suite's server scenarios through the gate:
//! the real suite (`@modelcontextprotocol/conformance`), run on the host
//! straight at a server, and inside the sandbox of a real `constle run` at
//! `$CONSTLE_MCP_<ID>_URL`, with every tool the server offers or the
//! scenarios call declared and every method the scenarios use allowed.
//! Each check must end the same both ways, but for the differences the gate makes on purpose, each
//! named here with its reason ([`Difference`]):
//!
//! - our own server (`tests/mcp/conformance-server.mjs`, on the official
//!   SDK), which passes all 30 active scenarios directly over HTTP, through
//!   the gate as a URL server and as a stdio server;
//! - server-everything, directly over its Streamable HTTP mode, and through
//!   the gate as a stdio server.
//!
//! Every score is printed, so that CI's output shows them. Loopback only.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use constle_testkit::npm::{MCP_TOOLS_DIR, NodeHttpServer, mcp_package, require_mcp_tools};
use constle_testkit::{find_tool, require_nothing_missing, require_root};
use libtest_mimic::{Arguments, Trial};
use serde_json::Value;

mod common;
use common::{Case, report, text};

/// Our server, copied next to a link to the installed SDK to run.
const OUR_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/mcp/conformance-server.mjs"
);

/// The active server scenarios of the pinned suite
/// (`scripts/mcp-tools/package.json`).
const ACTIVE_SCENARIOS: usize = 30;

/// The tools our server offers: each one a scenario calls.
const OUR_TOOLS: &[&str] = &[
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_error_handling",
    "test_tool_with_logging",
    "test_tool_with_progress",
    "test_sampling",
    "test_elicitation",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
];

/// Every tool server-everything can offer (some only to a client with the
/// capability they need).
const EVERYTHING_TOOLS: &[&str] = &[
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-roots-list",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "simulate-research-query",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-elicitation-request",
    "trigger-elicitation-request-async",
    "trigger-long-running-operation",
    "trigger-sampling-request",
    "trigger-sampling-request-async",
    "trigger-url-elicitation",
];

/// The methods the scenarios use beyond the ones the gate always allows:
/// the agent's requests, and the server's requests to the agent.
const SCENARIO_METHODS: &[&str] = &[
    "completion/complete",
    "logging/setLevel",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "sampling/createMessage",
    "elicitation/create",
];

/// The gate's refusal of a `Host` that is not loopback.
const HOST_REFUSED: (&str, Option<&str>) = ("mcp_host_refused", None);

/// A check whose status through the gate is not its status directly, for
/// a reason of the gate's.
struct Difference {
    scenario: &'static str,
    check: &'static str,
    directly: &'static str,
    through_the_gate: &'static str,
}

/// The stdio bridge answers each request with a JSON body, never an SSE
/// stream (docs/mcp-gate.md, "Messages"), which the suite notes as INFO:
/// SSE is optional.
const JSON_ANSWERS: Difference = Difference {
    scenario: "server-sse-multiple-streams",
    check: "server-sse-streams-functional",
    directly: "SUCCESS",
    through_the_gate: "INFO",
};

/// An `initialize` whose `Host` and `Origin` name evil.example.com must be
/// refused. server-everything checks neither and answers it; the gate
/// refuses it (403) and never forwards it.
const REBINDING: Difference = Difference {
    scenario: "dns-rebinding-protection",
    check: "localhost-host-rebinding-rejected",
    directly: "FAILURE",
    through_the_gate: "SUCCESS",
};

fn main() {
    let tests = vec![
        e2e(
            "our_server_scores_through_the_gate_what_it_scores_directly",
            our_server,
        ),
        e2e(
            "server_everything_over_stdio_through_the_gate_scores_what_it_scores_over_http_but_for_the_gates_rules",
            server_everything,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

fn e2e(name: &str, test: fn()) -> Trial {
    let ready = |n: &str| {
        require_root(n, &["bwrap", "node"]) && require_mcp_tools(n) && require_packages(n)
    };
    common::e2e_when(name, ready, test)
}

/// Whether the npm packages these tests run are installed, each of them
/// (`scripts/setup.sh` installs them); otherwise what
/// [`require_nothing_missing`] does.
fn require_packages(test: &str) -> bool {
    let missing: Vec<String> = ["conformance", "sdk", "server-everything"]
        .into_iter()
        .filter(|name| !mcp_package(name).join("package.json").is_file())
        .map(|name| format!("@modelcontextprotocol/{name} (scripts/setup.sh)"))
        .collect();
    require_nothing_missing(test, &missing)
}

/// Our server directly over HTTP, and through the gate both as a URL
/// server and as a stdio server: each gated run with a case, and so an
/// audit log and a results directory, of its own.
fn our_server() {
    let case = Case::new();
    let script = install_our_server(&case);
    let server = NodeHttpServer::start(&[script.to_str().unwrap()], true).unwrap();
    let direct = Score::direct(&case, &server.url());
    assert_eq!(
        (direct.passed(), direct.len()),
        (ACTIVE_SCENARIOS, ACTIVE_SCENARIOS),
        "{direct:#?}"
    );
    let url = format!("url: {}", server.url());
    let over_http = Score::through_the_gate(&case, "conformance", &[&url], OUR_TOOLS);
    let stdio_case = Case::new();
    install_our_server(&stdio_case);
    let stdio = [
        "command: [node, conformance-server.mjs, --stdio]",
        "workdir: ./our-server",
    ];
    let over_stdio = Score::through_the_gate(&stdio_case, "conformance", &stdio, OUR_TOOLS);
    print_figures(
        "our server",
        &[
            (&direct, "directly"),
            (&over_http, "through the gate over HTTP"),
            (&over_stdio, "over stdio"),
        ],
    );
    over_http.assert_same(&direct);
    over_stdio.assert_same(&direct.with(&[JSON_ANSWERS]));
    // The evil `initialize` only: every tool and method the scenarios use
    // passed.
    assert_eq!(refusals(&case), owned([HOST_REFUSED]));
    assert_stdio_refusals(&stdio_case);
}

/// Over stdio, the evil `initialize` and nothing else but what a stdio
/// server's one session brings: each scenario is a new client, whose
/// `initialize` replaces the previous client's session, and a `GET` stream
/// the previous client reopens then finds its session gone (404,
/// `mcp_session_unknown`; docs/mcp-gate.md, "Sessions").
fn assert_stdio_refusals(case: &Case) {
    let refused = refusals(case);
    let replaced = ("mcp_session_unknown".to_owned(), None);
    let host = (HOST_REFUSED.0.to_owned(), None);
    assert!(refused.contains(&host), "{refused:?}");
    assert!(
        refused.iter().all(|r| *r == host || *r == replaced),
        "{refused:?}"
    );
}

fn server_everything() {
    let case = Case::new();
    let everything = mcp_package("server-everything").join("dist/index.js");
    let everything = everything.to_str().unwrap();
    let server = NodeHttpServer::start(&[everything, "streamableHttp"], false).unwrap();
    let direct = Score::direct(&case, &server.url());
    drop(server);
    let stdio = format!("command: [node, {everything}, stdio]");
    // Everything declared: its own tools and the ones the scenarios call,
    // which it does not have (it answers those with an `isError` result
    // that two lax checks take for a pass, through the gate as directly).
    let tools: Vec<&str> = EVERYTHING_TOOLS.iter().chain(OUR_TOOLS).copied().collect();
    let gated = Score::through_the_gate(&case, "everything", &[&stdio], &tools);
    print_figures(
        "server-everything",
        &[
            (&direct, "over HTTP directly"),
            (&gated, "over stdio through the gate"),
        ],
    );
    gated.assert_same(&direct.with(&[JSON_ANSWERS, REBINDING]));
    assert_stdio_refusals(&case);
}

/// What the gate refused in `case`'s run: each reason, with the tool when
/// it was a call's.
fn refusals(case: &Case) -> BTreeSet<(String, Option<String>)> {
    case.events("mcp_refused")
        .iter()
        .map(|e| {
            let tool = e["tool"].as_str().map(str::to_owned);
            (e["reason"].as_str().unwrap().to_owned(), tool)
        })
        .collect()
}

/// [`refusals`]' type, of `&str`s.
fn owned<'a>(
    refusals: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> BTreeSet<(String, Option<String>)> {
    refusals
        .into_iter()
        .map(|(reason, tool)| (reason.to_owned(), tool.map(str::to_owned)))
        .collect()
}

/// Copies our server into `case`, beside a `node_modules` linked to the
/// installed SDK (Node resolves imports from the script's own directory):
/// the script's path.
fn install_our_server(case: &Case) -> PathBuf {
    let dir = case.path("our-server");
    fs::create_dir(&dir).unwrap();
    symlink(
        Path::new(MCP_TOOLS_DIR).join("node_modules"),
        dir.join("node_modules"),
    )
    .unwrap();
    let script = dir.join("conformance-server.mjs");
    fs::copy(OUR_SERVER, &script).unwrap();
    script
}

/// What CI shows: each score of one server, and how it was run.
#[allow(
    clippy::print_stderr,
    reason = "the figures are this test's report, for CI's output"
)]
fn print_figures(server: &str, scores: &[(&Score, &str)]) {
    let figures: Vec<String> = scores
        .iter()
        .map(|(score, how)| format!("{} {how}", score.figure()))
        .collect();
    eprintln!("conformance: {server} {}", figures.join(", "));
}

/// The suite's entry point.
fn suite() -> String {
    let suite = mcp_package("conformance").join("dist/index.js");
    suite.to_str().unwrap().to_owned()
}

/// What one run of the suite found: for each scenario it ran, the status
/// of each of its checks (`SUCCESS`, `FAILURE`, `WARNING`, `INFO`), by the
/// check's id; no checks for a scenario that could not run at all.
#[derive(Clone, Debug)]
struct Score(BTreeMap<String, BTreeMap<String, String>>);

impl Score {
    /// The suite run on the host at `url`, its results in a fresh
    /// directory of `case`.
    fn direct(case: &Case, url: &str) -> Score {
        let results = case.path("direct");
        let out = Command::new(find_tool("node").unwrap())
            .args([&suite(), "server", "--url", url, "-o"])
            .arg(&results)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        Score::read(&results, &report(&out))
    }

    /// The suite run inside the sandbox at the gate's URL for server `id`,
    /// declared by `source` (its `url:`, or its `command:` and `workdir:`)
    /// with `tools` and [`SCENARIO_METHODS`]; its results in the agent's
    /// work directory.
    fn through_the_gate(case: &Case, id: &str, source: &[&str], tools: &[&str]) -> Score {
        let variable = format!("CONSTLE_MCP_{}_URL", id.to_uppercase());
        let script = format!(
            "node {} server --url \"${variable}\" -o results; echo \"== suite exit $?\"",
            suite()
        );
        let file = case.agentfile(&format!(
            r#"sandbox:
  command: ["sh", "-c", {script}]
  workdir: ./work
  network:
    egress: none
mcp:
  servers:
    - id: {id}
      {source}
      tools: [{tools}]
      allow_methods: [{methods}]
"#,
            script = serde_json::to_string(&script).unwrap(),
            source = source.join("\n      "),
            tools = tools.join(", "),
            methods = SCENARIO_METHODS.join(", "),
        ));
        let out = case.run(&["run", file.to_str().unwrap()]);
        let report = report(&out);
        assert!(out.status.success(), "{report}");
        assert!(text(&out.stdout).contains("== suite exit "), "{report}");
        Score::read(&case.path("work/results"), &report)
    }

    /// Reads the suite's results from `dir`: a directory per scenario,
    /// `server-<scenario>-<timestamp>`, made before the scenario runs and
    /// holding `checks.json` once it has. `report` is shown if there are
    /// none.
    fn read(dir: &Path, report: &str) -> Score {
        let mut scenarios = BTreeMap::new();
        for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir:?}: {e}\n{report}")) {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap();
            let checks = fs::read_to_string(path.join("checks.json"))
                .map(|json| statuses(&serde_json::from_str(&json).unwrap()))
                .unwrap_or_default();
            scenarios.insert(scenario_name(name).to_owned(), checks);
        }
        assert!(!scenarios.is_empty(), "no results in {dir:?}\n{report}");
        Score(scenarios)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    /// How many scenarios passed, as the suite counts them: one that ran
    /// and failed no check.
    fn passed(&self) -> usize {
        self.0
            .values()
            .filter(|checks| !checks.is_empty() && !checks.values().any(|s| s == "FAILURE"))
            .count()
    }

    fn figure(&self) -> String {
        format!("{}/{}", self.passed(), self.len())
    }

    /// Fails unless this score is `expected`, naming each scenario whose
    /// checks differ.
    fn assert_same(&self, expected: &Score) {
        let scenarios: BTreeSet<&String> = self.0.keys().chain(expected.0.keys()).collect();
        let differ: Vec<String> = scenarios
            .into_iter()
            .filter(|s| self.0.get(*s) != expected.0.get(*s))
            .map(|s| format!("{s}: {:?}, expected {:?}", self.0.get(s), expected.0.get(s)))
            .collect();
        assert!(differ.is_empty(), "checks differ:\n{}", differ.join("\n"));
    }

    /// This score with `differences` made, each check's status here
    /// having to be the one it has directly.
    fn with(&self, differences: &[Difference]) -> Score {
        let mut score = self.clone();
        for d in differences {
            let status = score.0.get_mut(d.scenario).and_then(|s| s.get_mut(d.check));
            let status = status.unwrap_or_else(|| panic!("no check {}: {self:#?}", d.check));
            assert_eq!(status, d.directly, "{}: {self:#?}", d.check);
            d.through_the_gate.clone_into(status);
        }
        score
    }
}

/// The status of each check in a scenario's `checks.json`, by id.
fn statuses(checks: &Value) -> BTreeMap<String, String> {
    checks
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let field = |name: &str| c[name].as_str().unwrap().to_owned();
            (field("id"), field("status"))
        })
        .collect()
}

/// The scenario a results directory is for: its name without `server-`
/// and the `-2026-12-02T01-58-00-000Z` the suite adds.
fn scenario_name(dir: &str) -> &str {
    const STAMP: usize = "-2026-12-02T01-58-00-000Z".len();
    let name = dir
        .strip_prefix("server-")
        .filter(|rest| rest.len() > STAMP && rest.ends_with('Z'))
        .unwrap_or_else(|| panic!("not a result directory of the suite: {dir}"));
    &name[..name.len() - STAMP]
}
