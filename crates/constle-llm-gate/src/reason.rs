//! Why the gate refused a request: stable codes, as the audit log and the
//! agent's error see them.

/// Why a request was refused. [`Reason::as_str`] is the stable code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// A method or path the provider's API does not list (HTTP 404).
    PathNotAllowed,
    /// The body is larger than [`crate::MAX_BODY_BYTES`], could not be
    /// read, or is not a strict JSON object (HTTP 400, or 413 when too large).
    BodyUnreadable,
    /// `model` missing, not a string, or not declared byte for byte.
    ModelNotDeclared,
    /// The request makes the provider read input the body does not hold,
    /// so its cost has no bound (a URL or file id, a stored conversation
    /// or prompt, a background response, an unknown previous response).
    InputUnbounded,
    /// A tool the provider runs itself (web search, code execution, a
    /// remote MCP server, …).
    HostedTool,
    /// Something the gate does not price (audio; `n` above its bound).
    Unsupported,
    /// The meter refused: a spend cap would be passed.
    SpendRefused,
    /// The meter could not read or write its ledger (fail closed).
    LedgerUnavailable,
    /// The gates are closed ([`crate::Gate::with_shutoff`]).
    GateClosed,
    /// The request is not addressed to loopback (DNS rebinding).
    HostRefused,
    /// The provider's answer held the key (an error quoting it, a debug
    /// field): withheld from the agent (HTTP 502, or the stream cut).
    UpstreamEchoedKey,
}

impl Reason {
    /// The stable code (`llm_model_not_declared`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::PathNotAllowed => "llm_path_not_allowed",
            Reason::BodyUnreadable => "llm_body_unreadable",
            Reason::ModelNotDeclared => "llm_model_not_declared",
            Reason::InputUnbounded => "llm_input_unbounded",
            Reason::HostedTool => "llm_hosted_tool",
            Reason::Unsupported => "llm_unsupported",
            Reason::SpendRefused => "llm_spend_refused",
            Reason::LedgerUnavailable => "llm_ledger_unavailable",
            Reason::GateClosed => "llm_gate_closed",
            Reason::HostRefused => "llm_host_refused",
            Reason::UpstreamEchoedKey => "llm_upstream_echoed_key",
        }
    }
}
