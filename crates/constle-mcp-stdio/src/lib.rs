//! The stdio bridge: an MCP server that speaks over its stdin and stdout
//! (a local program, `npx …`, `uvx …`), put behind the MCP gate as if it
//! were a Streamable HTTP server.
//!
//! [`StdioBridge`] is a [`Transport`](constle_mcp_gate::Transport): the gate
//! hands it the very requests it would send to a URL, after every rule of
//! the gate (declared tools, gates, spend, method policy), and relays what
//! it answers through the same filters. The bridge itself decides nothing;
//! it only carries messages, as newline-delimited JSON-RPC (the MCP stdio
//! transport), and keeps the one session such a server has. Starting the
//! server (in a sandbox of its own) is its caller's [`Launch`].
//!
//! ```text
//!  agent ─HTTP─► gate (inspect, gate, meter) ─► StdioBridge ─line─► server stdin
//!  agent ◄─HTTP─ gate (filter)               ◄─ StdioBridge ◄─line─ server stdout
//! ```
//!
//! # Sessions
//!
//! A stdio server is initialized once in its life, so it has exactly one
//! session, and the bridge gives it its id:
//!
//! - `initialize` starts a session: on the process started with the
//!   bridge if no session used it yet, otherwise on a fresh process (the
//!   previous one is stopped: [`ExitCause::SessionReplaced`]). The
//!   response carries a new `Mcp-Session-Id` (128 random bits). A client
//!   that reconnects, or a second client, thus gets a fresh server, as it
//!   would from an HTTP server's new session; the previous session's
//!   requests get `mcp_server_exited`, its later ones 404.
//! - Every other request must carry the current session's id: without one
//!   it is refused with 400 (`mcp_session_required`), with another one 404
//!   (`mcp_session_unknown`), upon which MCP clients initialize again.
//! - `DELETE` ends the session: the process is stopped
//!   ([`ExitCause::SessionEnded`]) and the next `initialize` starts a new
//!   one.
//! - `GET` opens the stream of the server's own requests and
//!   notifications; a second `GET` replaces the first. Events carry no
//!   ids, so `Last-Event-ID` resumes nothing.
//!
//! # Messages
//!
//! - A POST body is written as one line: the newlines JSON allows between
//!   tokens become spaces (inside strings they are always escaped), so the
//!   server reads the message the gate inspected. Notifications and
//!   responses alone are answered 202; requests with the server's
//!   responses (a JSON body; an array for a batch).
//! - Requests from several connections share the session, and JSON-RPC ids
//!   are the client's: a request whose id is already waiting for its
//!   response is refused (`mcp_duplicate_id`, nothing sent), so every
//!   response has one caller. `notifications/cancelled` answers the
//!   cancelled request's caller at once (`mcp_request_cancelled`).
//! - From the server: a response goes to its request's caller; a request or
//!   notification to the `GET` stream if one is open (the gate then
//!   filters it like any SSE event, and answers what the policy refuses);
//!   otherwise a notification is dropped and a request answered `-32601`.
//!
//! # The process's end
//!
//! A server that exits, closes its stdout, or leaves a request unanswered
//! for the response timeout (it is then stopped) answers every waiting
//! request, and every later one of its session, with
//! [`TransportError::Exited`](constle_mcp_gate::TransportError::Exited),
//! which the gate turns into `mcp_server_exited` naming the server. Each
//! start and end is a [`ServerEvent`]. Stopping closes the server's stdin,
//! allows it a second to exit, then kills it; [`StdioBridge::stop`] does
//! so at the run's end and waits until it is gone.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod bridge;
mod link;
mod message;
mod process;

pub use bridge::StdioBridge;
pub use process::{ExitCause, Launch, LaunchFuture, Process, ServerEvent};
