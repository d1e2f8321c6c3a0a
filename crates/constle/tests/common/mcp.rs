//! What the tests with an MCP client inside the sandbox share (`gate.rs`,
//! `approver_browser.rs`): the client, which is the test binary itself
//! hard-linked into the agent's workdir, the shell steps that run it, and
//! the Agentfiles of an agent whose `pay_invoice` is gated (one approver)
//! or whose invoice tools all are (several, `quorum.rs` and
//! `quorum_serve.rs`).

use std::fs;
use std::path::PathBuf;

use constle_testkit::mcp::{TestMcpServer, client_main};

use super::Case;

pub const CLIENT_SUBCOMMAND: &str = "mcp-client";

/// The id of [`Setup::other_server`]: the agent finds it at
/// `$CONSTLE_MCP_CRM_URL`.
pub const OTHER_SERVER: &str = "crm";

/// Started as `<exe> mcp-client …`, the test binary is the MCP client: it
/// runs the client and exits. Otherwise it returns, to run the tests.
pub fn be_the_client_if_asked() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == CLIENT_SUBCOMMAND) {
        std::process::exit(client_main(&args[2..]));
    }
}

impl Case {
    /// Puts the MCP client at `work/mcp-client`, in the only host directory
    /// the sandbox sees.
    pub fn install_mcp_client(&self) {
        let exe = std::env::current_exe().unwrap();
        let client = self.path("work/mcp-client");
        // A copy: a hard link would be refused, since the agent could
        // change the test binary through it.
        fs::copy(&exe, &client).unwrap();
    }

    /// Writes the Agentfile of `who`'s agent, configured by `setup`, that
    /// runs `steps` (see [`step`]).
    pub fn gated_agentfile(
        &self,
        who: &Parties<'_>,
        setup: &Setup<'_>,
        steps: &[String],
    ) -> PathBuf {
        let script = steps.join("\n");
        let url = setup.server_url.clone().unwrap_or_else(|| who.server.url());
        let body = format!(
            r#"identity:
  did: {did}
sandbox:
  command: ["sh", "-c", {script}]
  workdir: ./work
  network:
    egress: none
mcp:
  servers:
    - id: accounting
      url: {url}
      tools: [{tools}]
      pricing: {pricing}
      headers: {headers}
{other}human_gates:
  enabled: true
  require_approval_for: [pay_invoice]
  approver_pubkey: {approver}
  notify:
    - channel: webhook
      url_secret_ref: {webhook_var}
  approval_timeout_seconds: {timeout}
  on_timeout: {on_timeout}
spending:
  {spending}
"#,
            did = who.agent_did,
            script = serde_json::to_string(&script).unwrap(),
            tools = setup.tools.join(", "),
            pricing = setup.pricing,
            headers = setup.headers,
            other = setup.other_server.as_deref().map_or(String::new(), |url| format!(
                "    - id: {OTHER_SERVER}\n      url: {url}\n      tools: [list_invoices, get_invoice]\n"
            )),
            approver = who.approver_did,
            webhook_var = who.webhook_var,
            timeout = setup.timeout_seconds,
            on_timeout = setup.on_timeout,
            spending = if setup.spending.is_empty() {
                "{}"
            } else {
                &setup.spending
            },
        );
        self.agentfile(&body)
    }
}

/// The host variable that holds webhook `n`'s URL in
/// [`Case::quorum_agentfile`].
pub fn quorum_webhook_var(n: usize) -> String {
    format!("TEST_QUORUM_WEBHOOK_{n}")
}

/// The `human_gates` lines naming `approvers` (label, `did:key`) and
/// `threshold`.
pub fn listed_approvers(approvers: &[(&str, &str)], threshold: usize) -> String {
    let listed: String = approvers
        .iter()
        .map(|(label, did)| format!("    - {{did: {did}, label: {label}}}\n"))
        .collect();
    format!("  approvers:\n{listed}  threshold: {threshold}\n")
}

impl Case {
    /// The Agentfile of agent `agent_did`, whose server `accounting` (at
    /// `server_url`) has the three invoice tools, all gated: `approvers`
    /// are the `human_gates` lines naming who decides (see
    /// [`listed_approvers`]), `endpoints` webhooks are asked, their URLs in
    /// [`quorum_webhook_var`]`(0..endpoints)`, each call waits at most
    /// `timeout_seconds` (then `on_timeout: abort`), and the agent runs
    /// `steps`.
    pub fn quorum_agentfile(
        &self,
        agent_did: &str,
        server_url: &str,
        approvers: &str,
        endpoints: usize,
        timeout_seconds: u32,
        steps: &[String],
    ) -> PathBuf {
        let script = serde_json::to_string(&steps.join("\n")).unwrap();
        let notify: String = (0..endpoints)
            .map(|n| {
                let var = quorum_webhook_var(n);
                format!("    - {{channel: webhook, url_secret_ref: {var}}}\n")
            })
            .collect();
        self.agentfile(&format!(
            r#"identity:
  did: {agent_did}
sandbox:
  command: ["sh", "-c", {script}]
  workdir: ./work
  network:
    egress: none
mcp:
  servers:
    - id: accounting
      url: {server_url}
      tools: [list_invoices, get_invoice, pay_invoice]
human_gates:
  enabled: true
  require_approval_for: [list_invoices, get_invoice, pay_invoice]
{approvers}  notify:
{notify}  approval_timeout_seconds: {timeout_seconds}
"#
        ))
    }
}

/// Whom a gated Agentfile names: the agent, its approver, its MCP server,
/// and the variable that holds the decision endpoint's URL.
pub struct Parties<'a> {
    pub agent_did: &'a str,
    pub approver_did: &'a str,
    pub server: &'a TestMcpServer,
    pub webhook_var: &'a str,
}

/// What a gated Agentfile says beyond its defaults.
pub struct Setup<'a> {
    pub tools: &'a [&'a str],
    /// Another URL for the server than the test server's.
    pub server_url: Option<String>,
    /// A second server, [`OTHER_SERVER`], at this URL, with
    /// `list_invoices` and `get_invoice`.
    pub other_server: Option<String>,
    pub timeout_seconds: u32,
    pub on_timeout: &'a str,
    /// `mcp.servers[0].pricing`, as a YAML flow mapping.
    pub pricing: &'a str,
    /// `mcp.servers[0].headers`, as a YAML flow sequence.
    pub headers: &'a str,
    /// The `spending:` block's lines, indented.
    pub spending: String,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Setup {
            tools: &["list_invoices", "get_invoice", "pay_invoice"],
            server_url: None,
            other_server: None,
            timeout_seconds: 30,
            on_timeout: "abort",
            pricing: "{}",
            headers: "[]",
            spending: String::new(),
        }
    }
}

/// A shell step for the agent: runs the MCP client with `args` (after
/// `$URL`, the gate's URL, and `$OTHER_URL`, the other server's, are put in) and prints `== NAME`, the client's
/// output, and `== NAME exit N`.
pub fn step(name: &str, args: &str) -> String {
    step_on("ACCOUNTING", name, args)
}

/// [`step`] with `$URL` the gate's URL for server `ID` (its id in capitals).
pub fn step_on(id: &str, name: &str, args: &str) -> String {
    let args = args
        .replace("$URL", &format!("\"$CONSTLE_MCP_{id}_URL\""))
        .replace("$OTHER_URL", "\"$CONSTLE_MCP_CRM_URL\"");
    format!(
        "echo '== {name}'; ./mcp-client {CLIENT_SUBCOMMAND} {args} 2>&1; echo \"== {name} exit $?\""
    )
}

pub fn call(name: &str, tool: &str, arguments: &str) -> String {
    step(name, &format!("call $URL {tool} '{arguments}'"))
}

/// The output of step `name` in the agent's `stdout`, and its exit status;
/// a step not there fails the test, showing `report`.
pub fn outcome(stdout: &str, name: &str, report: &str) -> (String, i32) {
    let begin = format!("== {name}\n");
    let end = format!("== {name} exit ");
    let start = stdout
        .find(&begin)
        .unwrap_or_else(|| panic!("no step {name}\n{report}"))
        + begin.len();
    let stop = stdout[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("step {name} did not finish\n{report}"))
        + start;
    let status = stdout[stop + end.len()..]
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    (stdout[start..stop].to_owned(), status)
}
