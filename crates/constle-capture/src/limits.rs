//! [`Limits`]: what one agent may hold of the host's resources through the
//! service, and how long the service waits for others.

use std::time::Duration;

/// Bounds on what the agent can make the host hold. The defaults suit a
/// run; tests make them small.
#[derive(Clone, Debug)]
pub struct Limits {
    /// DNS over TCP connections served at once, across all DNS listeners;
    /// more wait in the listener's backlog, holding no host descriptor.
    pub dns_connections: usize,
    /// How long a DNS over TCP connection may take to send its next query,
    /// or to take a reply, before it is closed.
    pub dns_idle: Duration,
    /// Captured connections served at once, across all capture
    /// listeners (each holds two host descriptors: the agent's and the
    /// proxy's).
    pub captured_connections: usize,
    /// How long the proxy may take to answer a `CONNECT` (it resolves the
    /// name and connects first) before the captured connection is closed.
    pub proxy_answer: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            dns_connections: 64,
            dns_idle: Duration::from_secs(10),
            captured_connections: 1024,
            proxy_answer: Duration::from_secs(60),
        }
    }
}
