//! Test support for Constle's end-to-end tests. Not part of the product.
//!
//! Constle's tests never send traffic anywhere but loopback and network
//! namespaces they create themselves. This crate gives them the pieces:
//!
//! - [`TestHost`]: a simulated outside host. A fresh network namespace joined
//!   to the host by a veth pair, holding documentation addresses
//!   (`203.0.113.0/24`, `2001:db8::/32`) and a TCP listener that sends a
//!   banner and echoes. [`TestHost::trap`] routes any further address (a
//!   private, CGNAT or metadata one a test maps a name to) into the same
//!   namespace, so that even a proxy that wrongly let a request through would
//!   reach the test's own host, never the network. Everything is torn down on
//!   drop, also when the test panics.
//! - [`HttpsSite`]: a simulated web site on a [`TestHost`], serving a
//!   directory's files over HTTPS under a certificate from a CA made for it
//!   alone, recording each request: for real clients (curl, pip, npm, Git)
//!   reaching it through the proxy.
//! - [`HostsFile`]: builds the hosts file a test gives Squid, so names resolve
//!   without any DNS query leaving the machine.
//! - [`DnsServer`]: a DNS server on 127.0.0.1:53 for names with several
//!   answers (a hosts file gives Squid one address per name), recording
//!   every query so a test can show a name was never looked up.
//! - [`require_e2e`], [`require_root`], [`require_tools`] and
//!   [`require_nothing_missing`]: decide whether a test that needs
//!   root and system tools can run here. Outside CI they skip with a printed
//!   reason; with `CONSTLE_E2E=require` (CI) a missing requirement panics, so
//!   a skip can never pass for a success.
//! - [`mcp`]: a real MCP server ([`mcp::TestMcpServer`], with invoice tools,
//!   recording every call that reaches it) and a real MCP client
//!   ([`mcp::client_main`], for a test binary to run as a subcommand inside
//!   the sandbox), both the official Rust SDK over Streamable HTTP.
//! - [`SimulatedApprover`]: a decision endpoint on loopback speaking the
//!   human-gates webhook protocol, signing with a real approver key, that
//!   answers each tool by a fixed [`Answer`] (including forged ones).
//! - [`npm`]: the real MCP servers, SDK and conformance suite from the npm
//!   registry that `scripts/setup.sh` installs, and [`npm::NodeHttpServer`],
//!   one of them serving Streamable HTTP on loopback.
//! - [`RedisServer`]: a private `redis-server` on a Unix socket in a temporary
//!   directory (no TCP port), for the spend ledger's Redis store; it can be
//!   frozen or killed to show that the ledger fails closed.
//! - [`llm`]: a simulated model provider ([`llm::ModelProvider`]) speaking
//!   the Anthropic Messages and OpenAI Responses and Chat Completions APIs,
//!   streamed or not, that answers with a call to the client's shell tool
//!   and then a final message quoting its output, reports usage and records
//!   every request (the key it received too).
//! - [`Agentfile`]: an Agentfile for a test, built in code.
//! - [`bench`]: the one percentile (nearest-rank) and the one CPU clock
//!   (the scheduler's run time) of every benchmark.
//! - [`SpecVectors`]: a specification's test vectors, read from the one
//!   `text` block of its `Test vectors` section, for the unit tests that
//!   recompute them.
//!
//! ```no_run
//! use constle_testkit::{HostsFile, TestHost, require_e2e};
//!
//! if !require_e2e("a request through the proxy reaches a namespace host") {
//!     return;
//! }
//! let host = TestHost::start().expect("test host");
//! let hosts = HostsFile::new().with(host.ipv4(), "api.example.test");
//! // … start the proxy with `hosts`, connect through it to api.example.test:443,
//! // read `host.banner_for(host.ipv4())` back, check `host.connections()`.
//! ```
//!
//! Requirements: root (namespaces, veth pairs, routes), `ip` from iproute2;
//! for [`HttpsSite`], also `openssl` and `python3`.
//! Namespaces are named `cnst-<slot>`; a slot is held with a lock file under
//! `/run/constle-testkit/`, so concurrent test processes never share one, and
//! leftovers of a test process that was killed are removed by the next one
//! that takes the slot.

#![forbid(unsafe_code)]

mod agentfile;
mod approver;
pub mod bench;
mod child;
mod dns;
mod hosts;
mod https;
pub mod llm;
pub mod mcp;
mod netns;
pub mod npm;
mod redis;
mod require;
mod spec;

pub use agentfile::Agentfile;
pub use approver::{Answer, SimulatedApprover};
pub use dns::DnsServer;
pub use hosts::HostsFile;
pub use https::{HttpsSite, ServedRequest};
pub use mcp::{McpServerOptions, RecordedCall, TestMcpServer};
pub use netns::{TestHost, TestHostBuilder};
pub use redis::RedisServer;
pub use require::{
    E2E_ENV, find_tool, require_e2e, require_nothing_missing, require_root, require_tools,
};
pub use spec::SpecVectors;
