//! Why the MCP gates or the model gates end a run: the gates close first
//! (their shared shutoff), then the run hears of it here.

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

/// Why the model gates end a run: a refusal or a call that could not be
/// recorded (every model gate is closed by then).
#[derive(Debug)]
pub(crate) struct ModelStop {
    /// The provider whose gate it was.
    pub(crate) provider: String,
    /// What was not recorded, for the message.
    pub(crate) what: &'static str,
    /// What the audit log said.
    pub(crate) error: String,
}
