//! [`RunError`]: why a run could not start or was stopped.

use constle_audit::AuditError;

/// Why a run could not start or was stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// `identity.did` is declared but no key on this machine matches it.
    #[error("identity.did is {did}, but no agent key here matches it: {source}")]
    KeyMissing {
        /// The declared DID.
        did: String,
        /// What the key store said.
        #[source]
        source: constle_identity::KeyStoreError,
    },
    /// The audit log could not be written; nothing runs without it.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The Agentfile's `audit` section cannot be used (a witness key that
    /// does not parse); found before anything starts.
    #[error("the Agentfile's audit section cannot be used, so nothing was started: {0}")]
    Witnessing(#[from] constle_checkpoints::ConfigError),
    /// The run's checkpoints cannot be made at all.
    #[error("checkpoints cannot be made, so nothing was started: {0}")]
    Checkpoints(#[from] constle_checkpoints::CheckpointError),
    /// A checkpoint missed the quorum of witnesses the Agentfile requires
    /// (`audit.witness_quorum_required`): the agent was stopped, or never
    /// started.
    #[error("{0}")]
    Unwitnessed(String),
    /// The egress proxy could not start.
    #[error("the egress proxy could not start: {0}")]
    Egress(#[from] constle_egress::EgressError),
    /// An MCP gate could not be built: its server's URL, its HTTP client,
    /// or a header declared for the server whose variable is unset, empty
    /// or unusable. Found before anything of the run starts.
    #[error("the MCP gate for server {server} cannot start: {source}; nothing was started")]
    McpGate {
        /// The server's id.
        server: String,
        /// Why (it names a header's variable, never its value).
        #[source]
        source: constle_mcp_gate::GateError,
    },
    /// The sandbox could not be set up or started.
    #[error("the sandbox could not start: {0}")]
    Sandbox(String),
    /// Layers the sandbox needs are missing on this machine, found before
    /// anything started ([`constle_preflight::before_run`]): what was
    /// found, and what fixes each in a container.
    #[error("this machine lacks {} the sandbox needs, so nothing was started: {}; `constle doctor` checks every layer (docs/containers.md)", if .0.len() == 1 { "a layer" } else { "layers" }, missing(.0))]
    Preflight(Vec<constle_preflight::Check>),
    /// The sandbox's launcher or bwrap failed before the agent started:
    /// what they said, and what to change. The run's exit status is then
    /// 125, never theirs.
    #[error("the sandbox could not be set up, so the agent never ran: {0}")]
    SandboxSetup(#[source] constle_sandbox::SetupFailure),
    /// A work directory cannot be used for the run, or could not be put
    /// right after it.
    #[error("{}{}{source}", server.as_ref().map(|id| format!("the work directory of MCP server {id}: ")).unwrap_or_default(), if *home { "the agent's home: " } else { "" })]
    Workdir {
        /// The stdio MCP server whose work directory it is; `None`: the
        /// agent's.
        server: Option<String>,
        /// Whether it is the agent's kept home (`sandbox.home`).
        home: bool,
        /// Why.
        #[source]
        source: constle_workdir::WorkdirError,
    },
    /// Run as root, the sandbox got no host id of its own.
    #[error("the sandbox could not start: {0}")]
    HostId(#[from] constle_hostids::HostIdError),
    /// The approver set (`human_gates.approver_set`) cannot be used: it
    /// does not verify, rolls back, expired, or its store is damaged.
    #[error("the approver set cannot be used, so nothing was started: {0}")]
    ApproverSet(String),
    /// The proxy exited while the agent ran; the agent was stopped.
    #[error(
        "the egress proxy exited during the run ({0}); the agent was stopped, it had no network from then on"
    )]
    EgressDied(String),
    /// A gated call got no decision in time under `on_timeout: abort`.
    #[error(
        "tool {tool:?} of MCP server {server:?} got no human decision in time; on_timeout is abort, so the call was refused and the run stopped"
    )]
    GateTimeout {
        /// The server's id.
        server: String,
        /// The gated tool.
        tool: String,
    },
    /// What an MCP gate decided (a refusal, a tool list shown) could not be
    /// recorded; the gates were closed and the run stopped.
    #[error(
        "the MCP gate of server {server:?} could not record {what} ({error}); every gate was closed and the run stopped"
    )]
    GateUnrecorded {
        /// The server's id.
        server: String,
        /// What was not recorded: `a refusal`, `a tool list it offered`.
        what: &'static str,
        /// What the audit log said.
        error: String,
    },
    /// What a model gate decided (a reservation, a call, a refusal) could
    /// not be recorded; every model gate was closed and the run stopped.
    #[error(
        "the model gate of provider {provider:?} could not record {what} ({error}); every model gate was closed and the run stopped"
    )]
    ModelGateUnrecorded {
        /// The provider's id.
        provider: String,
        /// What was not recorded: `a reservation`, `a call`, `a refusal`.
        what: &'static str,
        /// What the audit log said.
        error: String,
    },
    /// A model provider's key (the host variable `key_secret_ref` names)
    /// is unset, empty or not sendable in a header. Found before anything
    /// of the run starts.
    #[error(
        "the model gate for provider {provider} cannot start: its key cannot be used: {source}; \
         export it before `constle run` (nothing was started)"
    )]
    LlmKey {
        /// The provider's id.
        provider: String,
        /// Why (it names the variable, never its value).
        #[source]
        source: constle_manifest::SecretHeaderError,
    },
    /// A model provider's gate cannot be built (its URL, its key, its
    /// HTTP client). Found before anything of the run starts.
    #[error("the model gate for provider {provider} cannot start: {source}; nothing was started")]
    LlmGate {
        /// The provider's id.
        provider: String,
        /// Why (never the key).
        #[source]
        source: constle_llm_gate::GateError,
    },
    /// A declared limit cannot be enforced on this machine.
    #[error(transparent)]
    Limits(constle_limits::LimitsError),
    /// The agent's processes reached a declared limit; the run was stopped.
    #[error("{0}; the run was stopped")]
    LimitReached(String),
    /// Agent-to-agent messaging could not start.
    #[error("a2a: {0}")]
    A2a(String),
    /// A host variable a stdio MCP server's `env_secret_refs` names is not
    /// set; nothing was started. Only the names are said.
    #[error(
        "MCP server {server}'s env_secret_refs names the host variable {variable}, which is not set \
         (or not UTF-8); export it before `constle run` (nothing was started)"
    )]
    SecretUnset {
        /// The server's id.
        server: String,
        /// The host variable.
        variable: String,
    },
    /// A filesystem operation for the run's private files failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    let what = what.into();
    move |source| RunError::Io { what, source }
}

/// Each missing layer's finding, then `; to fix it, docker: …; podman: …;
/// kubernetes: …`, each engine's distinct fixes joined by ` and `.
fn missing(checks: &[constle_preflight::Check]) -> String {
    let findings: Vec<&str> = checks.iter().map(|c| c.finding.as_str()).collect();
    let mut fixes: Vec<(&str, Vec<&str>)> = Vec::new();
    for (engine, fix) in checks.iter().flat_map(|c| c.fixes.each()) {
        match fixes.iter_mut().find(|(e, _)| *e == engine) {
            Some((_, said)) if said.contains(&fix) => {}
            Some((_, said)) => said.push(fix),
            None => fixes.push((engine, vec![fix])),
        }
    }
    let fixes: Vec<String> = fixes
        .iter()
        .map(|(engine, said)| format!("{engine}: {}", said.join(" and ")))
        .collect();
    match fixes.is_empty() {
        true => findings.join("; "),
        false => format!("{}; to fix it, {}", findings.join("; "), fixes.join("; ")),
    }
}
