//! What one declared MCP server lets the agent do: built from the Agentfile.

use std::collections::BTreeSet;

use constle_manifest::{GateMatch, HumanGates, McpServer, ServerId, ToolName};

/// Requests the gate always lets an agent send (when sent as requests).
pub use constle_manifest::MCP_BASE_REQUESTS as BASE_REQUESTS;

/// Notifications the gate always lets an agent send (when sent without an id).
pub use constle_manifest::MCP_BASE_NOTIFICATIONS as BASE_NOTIFICATIONS;

/// Requests a server may always send to the agent.
pub use constle_manifest::MCP_BASE_SERVER_REQUESTS as BASE_SERVER_REQUESTS;

/// The gate's view of one `mcp.servers` entry: its id, its declared tools,
/// the gated tool names and any extra methods allowed.
///
/// Built only from a validated [`McpServer`] and [`HumanGates`], so a tool
/// name here is always a checked [`ToolName`].
#[derive(Clone, Debug)]
pub struct ServerPolicy {
    server: ServerId,
    tools: BTreeSet<ToolName>,
    gates: HumanGates,
    allowed_methods: BTreeSet<String>,
}

impl ServerPolicy {
    /// The policy for `server` under `gates`: its declared tools, and the
    /// base methods plus the server's `allow_methods`.
    pub fn new(server: &McpServer, gates: &HumanGates) -> ServerPolicy {
        ServerPolicy {
            server: server.id.clone(),
            tools: server.tools.iter().cloned().collect(),
            gates: gates.clone(),
            allowed_methods: server
                .allow_methods
                .iter()
                .map(|m| m.as_str().to_string())
                .collect(),
        }
    }

    /// Also allows `method`, as an `allow_methods` entry would (for example
    /// `resources/read`, or the server-to-client `sampling/createMessage`):
    /// for tests and callers that build a policy by hand. A name starting
    /// with `notifications/` is allowed as a notification only, any other as
    /// a request only. Allowing `tools/call` or `tools/list` changes nothing:
    /// their rules always apply.
    #[must_use]
    pub fn allow_method(mut self, method: impl Into<String>) -> ServerPolicy {
        self.allowed_methods.insert(method.into());
        self
    }

    /// The server's id.
    pub fn server(&self) -> &ServerId {
        &self.server
    }

    /// Whether `tool` is declared, byte for byte.
    pub fn declares(&self, tool: &str) -> bool {
        self.tools.contains(tool)
    }

    /// How `tool` relates to the human gates ([`HumanGates::check`]).
    pub fn gate(&self, tool: &str) -> GateMatch {
        self.gates.check(tool)
    }

    /// Whether the agent may send `method` (other than `tools/call`, which
    /// has its own rules).
    pub(crate) fn allows(&self, method: &str) -> bool {
        BASE_REQUESTS.contains(&method)
            || BASE_NOTIFICATIONS.contains(&method)
            || self.allowed_methods.contains(method)
    }

    /// Whether the server may send the request `method` to the agent.
    pub(crate) fn allows_server_request(&self, method: &str) -> bool {
        BASE_SERVER_REQUESTS.contains(&method) || self.allowed_methods.contains(method)
    }
}
