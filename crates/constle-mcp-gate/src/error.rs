//! [`GateError`]: why a [`Gate`](crate::Gate) could not be built.

use std::fmt;

/// Why a [`Gate`](crate::Gate) could not be built. No variant carries a
/// header's value: a message names the header and its variable only.
#[derive(Debug)]
#[non_exhaustive]
pub enum GateError {
    /// The server's URL is not one the HTTP client accepts, or it has none
    /// (a stdio server, whose gate is built with
    /// [`Gate::with_transport`](crate::Gate::with_transport)).
    Url(String),
    /// The HTTP client could not be set up (its TLS configuration).
    Client(std::io::Error),
    /// A header declared for the server (`mcp.servers[].headers`) has no
    /// value the gate can send.
    Header {
        /// The header's name, as declared.
        name: String,
        /// What is wrong: the variable unset, empty or unusable.
        why: String,
    },
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateError::Url(why) => write!(f, "the MCP server URL cannot be used: {why}"),
            GateError::Client(err) => write!(f, "cannot set up the gate's HTTP client: {err}"),
            GateError::Header { name, why } => write!(f, "header {name} cannot be sent: {why}"),
        }
    }
}

impl std::error::Error for GateError {}
