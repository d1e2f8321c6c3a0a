//! Serves a sandbox's network namespace from the host: its resolver, and
//! its captured connections (issue 26).
//!
//! Inside the sandbox there is no route and no resolver of the system's:
//! a client that ignores `HTTPS_PROXY` fails before it starts. The sandbox
//! launcher makes the sandbox's network namespace, routes the placeholder
//! ranges of [`constle_dns`] to its `lo`, and binds there, before the agent
//! starts, the [`Sockets`] this crate serves from the host side (`constle
//! run`, in Tokio). The agent can reach them only as a peer: it never holds
//! them, cannot rebind them, and sees nothing of the host behind them.
//!
//! - **DNS** (UDP and TCP, port 53 on `127.0.0.1`): each query is answered
//!   by the one [`constle_dns::Resolver`]: an allowed name gets its
//!   placeholders, anything else `NXDOMAIN` at once. The [`Event`] of a
//!   query ([`Event::Named`] the first time a name gets placeholders,
//!   [`Event::NameRefused`] for every refusal) goes to the [`Recorder`]
//!   first; the reply is sent only once it is recorded. DNS over TCP is
//!   bounded: [`Limits::dns_connections`] connections at once (more wait in
//!   the backlog), each closed after [`Limits::dns_idle`] without a query.
//! - **Capture** (TCP 443 on `0.0.0.0` and `[::]`): a connection to a
//!   placeholder becomes `CONNECT <name>:443` through the egress proxy,
//!   exactly what a client using `HTTPS_PROXY` sends, so the proxy applies
//!   the same rules and records the same `network_allowed` or
//!   `network_blocked`; no event of this crate's. On `200` the two are
//!   spliced, bytes the agent sent before (its TLS ClientHello) and bytes
//!   the proxy sent after its head included. An address that stands for no
//!   name, a proxy that answers anything else, no proxy: reset at once.
//! - **SYN watch** (raw TCP sockets): nothing listens on a placeholder's
//!   other ports, so the kernel resets a connection there at once; the
//!   watch sees the SYN and records [`Event::PortRefused`]. It reads as
//!   fast as the recorder takes events; SYNs that come faster wait in the
//!   raw socket's receive buffer, and past it the kernel drops them
//!   unseen (they are refused all the same, but not recorded): a paced
//!   recorder cannot slow the agent here, since the kernel answers.
//!
//! A recorder's `Err` stops the whole service ([`serve`] returns
//! [`CaptureError::Record`]): no more replies, no more connections.
//! Cancelling its [`CancellationToken`] closes it: DNS and the capture
//! stop at once, and the SYN watch records what its sockets still hold
//! before `serve` returns `Ok` (a run's last refused attempts are not lost
//! to its end). Dropping the future stops everything at once.

#![forbid(unsafe_code)]

mod accept;
mod capture;
mod connect;
mod context;
mod dns;
mod error;
mod event;
mod limits;
mod packet;
mod service;
mod syn;
mod tasks;

pub use error::CaptureError;
pub use event::{Event, Recorder};
pub use limits::Limits;
pub use service::{Sockets, serve};
/// What closes a [`serve`]: re-exported, so callers need no crate of
/// their own for it.
pub use tokio_util::sync::CancellationToken;
