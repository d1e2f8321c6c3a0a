//! JSON-RPC pieces: request ids, error codes and the gate's refusal reasons.

use std::fmt;

use serde_json::{Map, Value, json};

/// A JSON-RPC request id: a string or an integer (MCP forbids `null`, and
/// the gate refuses fractional numbers).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    /// An integer id.
    Int(i128),
    /// A string id.
    String(String),
}

impl RequestId {
    /// The id of a JSON value, if it is a valid request id.
    pub fn from_json(value: &Value) -> Option<RequestId> {
        match value {
            Value::String(s) => Some(RequestId::String(s.clone())),
            Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .map(RequestId::Int),
            _ => None,
        }
    }

    /// The id as a JSON value.
    pub fn to_json(&self) -> Value {
        match self {
            RequestId::String(s) => Value::String(s.clone()),
            RequestId::Int(n) => {
                if let Ok(v) = i64::try_from(*n) {
                    Value::from(v)
                } else if let Ok(v) = u64::try_from(*n) {
                    Value::from(v)
                } else {
                    // Only ever built from an i64 or a u64.
                    Value::Null
                }
            }
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Int(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// JSON-RPC 2.0: invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0: the JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0: the method does not exist or is not available.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC 2.0: invalid method parameters (MCP also uses it for unknown tools).
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC 2.0: internal error. The gate sends it when the server cannot
/// be reached, does not answer in time, or answers with something the gate
/// cannot relay.
pub const INTERNAL_ERROR: i64 = -32603;
/// The gate's own code (in JSON-RPC's implementation-defined range): a
/// gated `tools/call` was not approved, a priced one not charged, or the
/// gates are closed.
pub const GATE_REFUSED: i64 = -32001;

/// Why the gate refused a message. [`Reason::as_str`] is a stable code,
/// also sent to the agent as `error.data.reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// Body longer than [`crate::MAX_BODY_BYTES`]; HTTP 413.
    BodyTooLarge,
    /// `Content-Type` missing or not `application/json`; HTTP 415.
    ContentType,
    /// Not strict JSON: syntax, duplicate keys, lone surrogates, extensions,
    /// nesting deeper than [`crate::MAX_DEPTH`].
    NotJson,
    /// Not a well-formed JSON-RPC 2.0 message as MCP uses it.
    InvalidMessage,
    /// A batch (JSON array) with no element.
    EmptyBatch,
    /// A batch sent under a revision without batches (2025-06-18 or later,
    /// as the request's `MCP-Protocol-Version` says); HTTP 400.
    BatchNotAllowed,
    /// An `MCP-Protocol-Version` header naming no revision the gate serves,
    /// or sent more than once; HTTP 400.
    UnsupportedProtocolVersion,
    /// A batch element that was fine, not forwarded because another was refused.
    BatchRefused,
    /// A batch that contains a gated `tools/call`; gated calls travel alone.
    GatedCallInBatch,
    /// Two requests in one batch with the same id.
    DuplicateId,
    /// A method the policy does not allow.
    MethodNotAllowed,
    /// A `tools/call` without an id.
    CallAsNotification,
    /// `tools/call` params malformed.
    InvalidParams,
    /// A `tools/call` of a tool not declared for the server.
    ToolNotDeclared,
    /// A `tools/call` whose name equals a gated name except for case.
    ToolCaseVariant,
    /// A gated `tools/call` that the [`crate::Approver`] did not approve.
    GateRefused,
    /// A `tools/call` the [`crate::Meter`] refused: a spend cap, or a ledger
    /// that cannot be read or written.
    SpendRefused,
    /// Any request once the gates are closed ([`crate::Shutoff`]): the run
    /// is ending, and nothing more is forwarded; HTTP 503 without an id.
    GateClosed,
    /// The server could not be reached; HTTP 502.
    UpstreamUnreachable,
    /// The server answered with something the gate cannot check, so it is
    /// not relayed (fail closed); HTTP 502.
    UpstreamMalformed,
    /// The server did not answer within the gate's bound; HTTP 504.
    UpstreamTimeout,
    /// The server's answer holds the value of a header the gate adds for
    /// it (a credential it echoed), so it is not relayed; HTTP 502.
    UpstreamEchoedSecret,
    /// A request whose `Host` is missing, sent twice or malformed (HTTP
    /// 400), or not loopback (HTTP 403): see [`crate::Gate`]'s DNS
    /// rebinding rules.
    HostRefused,
    /// A request whose `Origin` is not a loopback origin; HTTP 403.
    OriginRefused,
    /// The server Constle runs for this run is not running.
    ServerExited,
    /// A request to a stdio server without the session's `Mcp-Session-Id`.
    SessionRequired,
    /// An `Mcp-Session-Id` that names no live session of a stdio server.
    SessionUnknown,
    /// A request to a stdio server the agent cancelled before it was answered.
    RequestCancelled,
    /// A tool list the gate could not record (`mcp_tools_offered`), or one
    /// past [`crate::MAX_OFFERED_LISTS`] distinct lists: not relayed;
    /// HTTP 503 for a JSON body, the stream cut for an SSE one.
    ToolsUnrecorded,
}

impl Reason {
    /// The JSON-RPC error code sent for this reason.
    pub fn code(self) -> i64 {
        match self {
            Reason::NotJson => PARSE_ERROR,
            Reason::BodyTooLarge
            | Reason::ContentType
            | Reason::InvalidMessage
            | Reason::EmptyBatch
            | Reason::BatchNotAllowed
            | Reason::UnsupportedProtocolVersion
            | Reason::BatchRefused
            | Reason::GatedCallInBatch
            | Reason::DuplicateId
            | Reason::CallAsNotification
            | Reason::HostRefused
            | Reason::OriginRefused => INVALID_REQUEST,
            Reason::MethodNotAllowed => METHOD_NOT_FOUND,
            Reason::InvalidParams | Reason::ToolNotDeclared | Reason::ToolCaseVariant => {
                INVALID_PARAMS
            }
            Reason::GateRefused | Reason::SpendRefused | Reason::GateClosed => GATE_REFUSED,
            Reason::SessionRequired | Reason::SessionUnknown => INVALID_REQUEST,
            Reason::UpstreamUnreachable
            | Reason::UpstreamMalformed
            | Reason::UpstreamTimeout
            | Reason::UpstreamEchoedSecret
            | Reason::ServerExited
            | Reason::RequestCancelled
            | Reason::ToolsUnrecorded => INTERNAL_ERROR,
        }
    }

    /// A stable snake_case code, for the audit log and `error.data.reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BodyTooLarge => "mcp_body_too_large",
            Reason::ContentType => "mcp_content_type",
            Reason::NotJson => "mcp_not_json",
            Reason::InvalidMessage => "mcp_invalid_message",
            Reason::EmptyBatch => "mcp_empty_batch",
            Reason::BatchNotAllowed => "mcp_batch_not_allowed",
            Reason::UnsupportedProtocolVersion => "mcp_unsupported_protocol_version",
            Reason::BatchRefused => "mcp_batch_refused",
            Reason::GatedCallInBatch => "mcp_gated_call_in_batch",
            Reason::DuplicateId => "mcp_duplicate_id",
            Reason::MethodNotAllowed => "mcp_method_not_allowed",
            Reason::CallAsNotification => "mcp_call_as_notification",
            Reason::InvalidParams => "mcp_invalid_params",
            Reason::ToolNotDeclared => "mcp_tool_not_declared",
            Reason::ToolCaseVariant => "mcp_tool_case_variant",
            Reason::GateRefused => "mcp_gate_refused",
            Reason::SpendRefused => "mcp_spend_refused",
            Reason::GateClosed => "mcp_gate_closed",
            Reason::UpstreamUnreachable => "mcp_upstream_unreachable",
            Reason::UpstreamMalformed => "mcp_upstream_malformed",
            Reason::UpstreamTimeout => "mcp_upstream_timeout",
            Reason::UpstreamEchoedSecret => "mcp_upstream_echoed_secret",
            Reason::HostRefused => "mcp_host_refused",
            Reason::OriginRefused => "mcp_origin_refused",
            Reason::ServerExited => "mcp_server_exited",
            Reason::SessionRequired => "mcp_session_required",
            Reason::SessionUnknown => "mcp_session_unknown",
            Reason::RequestCancelled => "mcp_request_cancelled",
            Reason::ToolsUnrecorded => "mcp_tools_unrecorded",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One refused message: why, the id to answer (if it had a valid one),
/// and its method and tool as far as they were read, for the audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) id: Option<RequestId>,
    pub(crate) reason: Reason,
    pub(crate) message: String,
    pub(crate) method: Option<String>,
    pub(crate) tool: Option<String>,
}

impl Refused {
    pub(crate) fn new(id: Option<&RequestId>, reason: Reason, message: impl Into<String>) -> Self {
        Refused {
            id: id.cloned(),
            reason,
            message: message.into(),
            method: None,
            tool: None,
        }
    }

    /// The refused message names `method`, unless a method is known already.
    pub(crate) fn in_method(mut self, method: &str) -> Self {
        self.method.get_or_insert_with(|| method.to_owned());
        self
    }

    /// The refused message calls `tool`.
    pub(crate) fn of_tool(mut self, tool: &str) -> Self {
        self.tool.get_or_insert_with(|| tool.to_owned());
        self.in_method("tools/call")
    }

    /// The JSON-RPC error response object for this refusal.
    pub(crate) fn to_json(&self) -> Value {
        error_response(
            self.id.as_ref(),
            self.reason.code(),
            &self.message,
            self.reason,
        )
    }
}

/// `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…,"data":{"reason":…}}}`.
pub(crate) fn error_response(
    id: Option<&RequestId>,
    code: i64,
    message: &str,
    reason: Reason,
) -> Value {
    let mut error = Map::new();
    error.insert("code".into(), code.into());
    error.insert("message".into(), message.into());
    error.insert("data".into(), json!({ "reason": reason.as_str() }));
    json!({
        "jsonrpc": "2.0",
        "id": id.map_or(Value::Null, RequestId::to_json),
        "error": error,
    })
}

/// Serialises a value the gate built itself; cannot fail.
/// A JSON-RPC error response for `reason`, as the gate writes its own (a
/// transport answering for a server uses it too).
pub fn error_body(id: Option<&RequestId>, reason: Reason, message: &str) -> Vec<u8> {
    to_bytes(&error_response(id, reason.code(), message, reason))
}

pub(crate) fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}
