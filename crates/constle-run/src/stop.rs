//! Why the MCP gates end a run: the gates close first (their shared
//! [`constle_mcp_gate::Shutoff`]), then the run hears of it here.

use tokio::sync::mpsc;

/// Something at the MCP gates that ends the run.
#[derive(Debug)]
pub(crate) enum GateStop {
    /// A gated call got no decision in time under `on_timeout: abort`.
    Timeout {
        /// The server's id.
        server: String,
        /// The gated tool.
        tool: String,
    },
    /// A refusal or a tool list offered could not be recorded: the run
    /// does not go on without its log.
    Unrecorded {
        /// The server whose gate it was.
        server: String,
        /// What was not recorded, for the message.
        what: &'static str,
        /// What the audit log said.
        error: String,
    },
}

/// Where the gates say so.
pub(crate) type GateStops = mpsc::UnboundedSender<GateStop>;

/// Where the run hears it.
pub(crate) type GateStopped = mpsc::UnboundedReceiver<GateStop>;
