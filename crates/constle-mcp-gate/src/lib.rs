//! The MCP gate: what an agent may send to a declared MCP server, and what
//! it may see back. The policy core ([`inspect`], [`filter_tools_list`],
//! [`filter_server_message`]) is pure functions, no I/O; [`Gate`] is the
//! HTTP side built on it (Streamable HTTP, sessions, SSE relay), with gated
//! calls put to a pluggable [`Approver`] where the human gates plug in,
//! every refusal and every distinct tool list shown to the agent
//! ([`OfferedTools`]) put to a [`Recorder`] where the audit log plugs in,
//! and a [`Shutoff`] that closes every gate of a run at once.
//!
//! The agent is assumed compromised. The gate is the only path from the
//! sandbox to a declared server, so every rule below is checked on the
//! parsed body of every message, and nothing the agent sends in headers
//! lifts a refusal. The one header the rules read, `MCP-Protocol-Version`,
//! can only add one (a batch under a revision without batches).
//!
//! # Agent to server: [`inspect`]
//!
//! [`inspect`] takes one POST body (with its `Content-Type` and the
//! [`Revision`] its `MCP-Protocol-Version` names) and returns
//! [`Inspection::Forward`] (the
//! very bytes inspected, with a [`Decision`] per message) or
//! [`Inspection::Refuse`] (an HTTP status and a JSON-RPC error body for the
//! agent; nothing reaches the server). In order:
//!
//! | Rule | Code | [`Reason`] | HTTP |
//! |---|---|---|---|
//! | `Content-Type` is `application/json` (any case; a `charset` must be `utf-8`) | -32600 | `mcp_content_type` | 415 |
//! | at most [`MAX_BODY_BYTES`], checked before parsing | -32600 | `mcp_body_too_large` | 413 |
//! | strict JSON ([`constle_json`]): no duplicate keys at any depth, no lone surrogates, no `NaN`, comments, trailing commas or BOM, at most [`MAX_DEPTH`] levels | -32700 | `mcp_not_json` | 400 |
//! | no batch when the revision is 2025-06-18 or later | -32600 | `mcp_batch_not_allowed` | 400 |
//! | an object with only `jsonrpc`, `id`, `method`, `params`, `result`, `error`; `jsonrpc` is `"2.0"`; `id` a string or integer; `method` a string; `params` an object | -32600 (-32602 for `params`) | `mcp_invalid_message` | |
//! | methods: `initialize`, `ping`, `tools/list`, `tools/call` as requests; `notifications/initialized`, `cancelled`, `progress`, `roots/list_changed` as notifications; others only if the server's `allow_methods` lists them ([`ServerPolicy::new`]) | -32601 | `mcp_method_not_allowed` | |
//! | a `notifications/…` method has no id; any other method has one | -32600 | `mcp_invalid_message` | |
//! | `tools/call` has an id | -32600 | `mcp_call_as_notification` | |
//! | `params.name` a string, `params.arguments` absent or an object | -32602 | `mcp_invalid_params` | |
//! | `params.name` declared for this server, byte for byte | -32602 | `mcp_tool_not_declared` | |
//! | not a case variant of a gated name ([`constle_manifest::HumanGates::check`]) | -32602 | `mcp_tool_case_variant` | |
//! | a gated name: [`Decision::Gated`], forwarded only after a human approves | | | |
//! | a message without `method` is the agent's response to a server request: an id and exactly one of `result` (object) and `error` | -32600 | `mcp_invalid_message` | |
//!
//! The HTTP status is 200 when the error body answers a request by its id,
//! else the one in the table, or 400. Every error carries
//! `error.data.reason`, the stable [`Reason`] code. -32602 for undeclared
//! tools is what MCP specifies for unknown tools, so clients treat it as one.
//!
//! ## Batches
//!
//! MCP 2025-03-26 lets clients send JSON-RPC batches and requires servers to
//! accept them; 2025-06-18 removed batching. The gate serves 2025-03-26
//! through 2026-07-28 ([`SUPPORTED_REVISIONS`]), so it cannot refuse batches
//! outright without breaking 2025-03-26 clients. It decides from what it can
//! trust: a request whose `MCP-Protocol-Version` header (which every client
//! from 2025-06-18 on sends) names 2025-06-18 or later may not be a batch
//! (`mcp_batch_not_allowed`). The header is the agent's word, so it is only
//! ever used to refuse: an agent that leaves it out, as 2025-03-26 clients
//! do, gets batches. (Remembering the revision each session negotiated
//! would add state for no gain: a batch grants nothing its elements do not
//! each have to pass.) The gate polices every element of a batch with the
//! same rules as a single message and refuses the whole batch if any
//! element is refused: every identified element is answered (the refused
//! ones with their reason, the others with `mcp_batch_refused`), and
//! nothing is forwarded. An empty batch is refused (`mcp_empty_batch`). On
//! top of that:
//!
//! - a gated `tools/call` is refused inside a batch (`mcp_gated_call_in_batch`):
//!   a human decision then always covers a body holding exactly one call, so
//!   "what is forwarded is what was approved" needs no splitting of bodies;
//! - two requests with one id are refused (`mcp_duplicate_id`), so responses
//!   cannot be answered in each other's place;
//! - `initialize` inside a batch is refused, as 2025-03-26 requires.
//!
//! ## What is forwarded
//!
//! [`Forward::bytes`] is the inspected body, unchanged: the gate never
//! re-serialises a request, so the server parses the bytes the gate parsed,
//! and strict parsing leaves only one way to read them. The subject of a
//! gated call is the [`ToolCall`] (server id from the policy, tool name,
//! arguments, request id) parsed from those bytes; its digest is defined by
//! the human-gate code.
//!
//! # Server to agent: [`filter_tools_list`], [`filter_server_message`]
//!
//! Every `tools/list` result, page by page, is cut down to the declared
//! tools; `nextCursor` is kept so the agent can ask for the next page, which
//! is filtered in turn. A message is treated as a `tools/list` result when
//! its `result` has a `tools` member, whatever its id, so no tool list gets
//! through unfiltered because the gate forgot, or never saw, its request;
//! a response to a remembered `tools/list` id must moreover be a tool list
//! or an error. The gate remembers at most [`MAX_PENDING_TOOLS_LISTS`]
//! unanswered ids, forgetting each once answered, and the oldest past the
//! bound. Each filtered list is recorded before it is relayed (see
//! [`Gate`]). Server-to-client requests other than `ping`
//! (`sampling/createMessage`, `elicitation/create`, `roots/list`, …) are not
//! relayed unless the server's `allow_methods` lists them; the gate answers
//! them to the server with -32601. A server message that cannot be parsed or filtered is
//! an error: the gate must not relay it.

#![forbid(unsafe_code)]

mod credentials;
mod error;
mod filter;
mod http;
mod inspect;
mod offered;
mod pace;
mod pending;
mod policy;
mod rebinding;
mod record;
mod refused;
mod revision;
mod rpc;
mod shutoff;
mod sse;
mod transport;
mod upstream;

pub use error::GateError;
pub use filter::{FilterError, ServerMessage, filter_server_message, filter_tools_list};
pub use http::{
    Approval, ApprovalFuture, Approver, DEFAULT_RESPONSE_TIMEOUT, FORWARDED_REQUEST_HEADERS, Gate,
    Meter, MeterFuture, Metered, RELAYED_RESPONSE_HEADERS, RefuseGated, Unmetered,
};
pub use inspect::{
    Decision, Forward, Inspection, MAX_BODY_BYTES, MAX_DEPTH, Refusal, ToolCall, inspect,
};
pub use offered::{MAX_OFFERED_LISTS, OfferedTools, tools_digest};
pub use pace::{Pace, REFUSALS_BURST, REFUSALS_PER_SECOND};
pub use pending::MAX_PENDING_TOOLS_LISTS;
pub use policy::{BASE_NOTIFICATIONS, BASE_REQUESTS, BASE_SERVER_REQUESTS, ServerPolicy};
pub use record::{NotRecorded, OfferFuture, RecordFuture, Recorder, Unrecorded};
pub use refused::{MAX_RECORDED_BYTES, RefusedRequest};
pub use revision::{Revision, SUPPORTED_REVISIONS, UnsupportedRevision};
pub use rpc::{
    GATE_REFUSED, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
    Reason, RequestId, error_body,
};
pub use shutoff::Shutoff;
pub use transport::{HttpTransport, Transport, TransportBody, TransportError, TransportFuture};

#[cfg(test)]
mod tests;
