//! Agent to server: what the gate does with one HTTP POST body.

use std::collections::BTreeSet;

use constle_json::LimitedError;
use constle_manifest::GateMatch;
use serde_json::{Map, Value};

use crate::policy::ServerPolicy;
use crate::revision::Revision;
use crate::rpc::{Reason, Refused, RequestId, to_bytes};

/// Largest agent-to-server body the gate reads (4 MiB); longer bodies are
/// refused unread.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Most levels of nested arrays and objects in a message (the batch array
/// counts as one).
pub const MAX_DEPTH: usize = constle_json::MAX_DEPTH;

/// What the gate does with one agent-to-server body.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Inspection {
    /// Forward exactly these bytes (after a human decision, if one is gated).
    Forward(Forward),
    /// Answer the agent with this error; nothing reaches the server.
    Refuse(Refusal),
}

/// A body the gate will forward: the original bytes, unchanged, and the
/// decision for each message in it, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forward {
    bytes: Vec<u8>,
    batch: bool,
    decisions: Vec<Decision>,
}

impl Forward {
    /// The bytes to forward: exactly the body that was inspected.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes to forward, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Whether the body was a JSON-RPC batch (an array).
    pub fn is_batch(&self) -> bool {
        self.batch
    }

    /// One decision per message, in body order; never empty.
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// The gated call, if any. A body holding one is never a batch, so
    /// there is at most one, and it is the body's only message.
    pub fn gated(&self) -> Option<&ToolCall> {
        self.decisions.iter().find_map(|d| match d {
            Decision::Gated(call) => Some(call),
            _ => None,
        })
    }

    /// Whether the server must answer (the body holds at least one request).
    /// If not, Streamable HTTP answers the agent with 202 Accepted.
    pub fn expects_response(&self) -> bool {
        self.decisions.iter().any(|d| match d {
            Decision::Pass { id, .. } => id.is_some(),
            Decision::Call(_) | Decision::Gated(_) => true,
            Decision::Response { .. } => false,
        })
    }

    /// The ids of the `tools/list` requests: their responses must go
    /// through [`crate::filter_tools_list`] or [`crate::filter_server_message`].
    pub fn tools_list_ids(&self) -> BTreeSet<RequestId> {
        self.decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Pass {
                    method,
                    id: Some(id),
                } if method == "tools/list" => Some(id.clone()),
                _ => None,
            })
            .collect()
    }
}

/// The decision for one message that may be forwarded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// A lifecycle, ping, `tools/list` or notification message, or a method
    /// the policy allows: forward as is. `id` is `None` for a notification.
    Pass {
        /// The JSON-RPC method.
        method: String,
        /// The request id; `None` for a notification.
        id: Option<RequestId>,
    },
    /// The agent's answer to a server-to-client request (such as `ping`).
    Response {
        /// The id of the request answered.
        id: RequestId,
    },
    /// A `tools/call` of a declared, ungated tool: forward (after any spend
    /// check).
    Call(ToolCall),
    /// A `tools/call` of a declared, gated tool: forward only after a human
    /// approves it.
    Gated(ToolCall),
}

/// A `tools/call` as the gate parsed it from the body.
///
/// This is the subject of a gated call: server, tool and arguments, read
/// from the very bytes that [`Forward::bytes`] holds, so what a person
/// approves is what the server receives. How these are digested is defined
/// by the human-gate code, not here. Other members of `params` (such as
/// `_meta`) are forwarded unchanged and are not part of this struct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The server's id (`mcp.servers[].id`), from the policy, never the body.
    pub server: String,
    /// `params.name`: a declared tool, byte for byte.
    pub tool: String,
    /// `params.arguments`; `None` when the member is absent.
    pub arguments: Option<Map<String, Value>>,
    /// The JSON-RPC id of the call.
    pub request_id: RequestId,
}

/// A refused body: the HTTP status and JSON-RPC error body to answer the
/// agent with, and what the audit log records of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    status: u16,
    body: Vec<u8>,
    /// The refused message (for a batch, the first refused element).
    refused: Refused,
}

impl Refusal {
    /// The HTTP status: 200 when the body answers identified requests,
    /// 413 (too large), 415 (content type) or 400 otherwise.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The JSON-RPC error body (`Content-Type: application/json`).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Why: for a batch, the reason of the first refused element.
    pub fn reason(&self) -> Reason {
        self.refused.reason
    }

    /// The human-readable message of that reason.
    pub fn message(&self) -> &str {
        &self.refused.message
    }

    /// The refused message's JSON-RPC method, if it was read that far (for
    /// a batch, the first refused element's), as the agent sent it.
    pub fn method(&self) -> Option<&str> {
        self.refused.method.as_deref()
    }

    /// The tool a refused `tools/call` names, if it was read that far, as
    /// the agent sent it.
    pub fn tool(&self) -> Option<&str> {
        self.refused.tool.as_deref()
    }

    /// The refused message's id, if it has a valid one.
    pub fn request_id(&self) -> Option<&RequestId> {
        self.refused.id.as_ref()
    }

    fn single(status: u16, refused: Refused) -> Refusal {
        let status = if refused.id.is_some() { 200 } else { status };
        Refusal {
            status,
            body: to_bytes(&refused.to_json()),
            refused,
        }
    }
}

/// Decides what happens to one agent-to-server POST body.
///
/// Pure: it never panics on any input, and a refusal is just a value, so
/// the gate goes on serving. Only `content_type`, `revision` and `body` are
/// read. `revision` is what the request's `MCP-Protocol-Version` header
/// names (`None` without one); it can only add a refusal (batches from
/// 2025-06-18 on), never lift one: every decision to forward comes from the
/// parsed body.
pub fn inspect(
    policy: &ServerPolicy,
    body: &[u8],
    content_type: Option<&str>,
    revision: Option<Revision>,
) -> Inspection {
    if !is_json_content_type(content_type) {
        let shown = content_type.map_or_else(|| "none".to_string(), |c| format!("{c:?}"));
        return Inspection::Refuse(Refusal::single(
            415,
            Refused::new(
                None,
                Reason::ContentType,
                format!("Content-Type must be application/json, not {shown}"),
            ),
        ));
    }
    let value = match constle_json::parse_limited(body, MAX_BODY_BYTES) {
        Ok(value) => value,
        Err(LimitedError::TooLarge { len, max }) => {
            return Inspection::Refuse(Refusal::single(
                413,
                Refused::new(
                    None,
                    Reason::BodyTooLarge,
                    format!("body of {len} bytes is larger than the gate's limit of {max}"),
                ),
            ));
        }
        Err(err) => {
            return Inspection::Refuse(Refusal::single(
                400,
                Refused::new(None, Reason::NotJson, format!("parse error: {err}")),
            ));
        }
    };
    match value {
        Value::Array(_) if revision.is_some_and(|r| !r.allows_batches()) => {
            let revision = revision.map(Revision::as_str).unwrap_or_default();
            Inspection::Refuse(Refusal::single(
                400,
                Refused::new(
                    None,
                    Reason::BatchNotAllowed,
                    format!(
                        "JSON-RPC batches were removed in MCP 2025-06-18 and this request \
                         says MCP-Protocol-Version {revision}; send one message per request"
                    ),
                ),
            ))
        }
        Value::Array(items) => inspect_batch(policy, body, &items),
        single => match check_message(policy, &single, false) {
            Ok(decision) => Inspection::Forward(Forward {
                bytes: body.to_vec(),
                batch: false,
                decisions: vec![decision],
            }),
            Err(refused) => Inspection::Refuse(Refusal::single(400, refused)),
        },
    }
}

/// Every element is policed; if any is refused, the whole batch is.
fn inspect_batch(policy: &ServerPolicy, body: &[u8], items: &[Value]) -> Inspection {
    if items.is_empty() {
        return Inspection::Refuse(Refusal::single(
            400,
            Refused::new(None, Reason::EmptyBatch, "empty batch"),
        ));
    }
    let mut results: Vec<Result<Decision, Refused>> = items
        .iter()
        .map(|item| check_message(policy, item, true))
        .collect();
    // Two requests sharing an id could be answered in each other's place.
    let mut seen = BTreeSet::new();
    for result in &mut results {
        let id = match result {
            Ok(Decision::Pass { id: Some(id), .. }) => id.clone(),
            Ok(Decision::Call(call)) => call.request_id.clone(),
            _ => continue,
        };
        if !seen.insert(id.clone()) {
            let refused = Refused::new(
                Some(&id),
                Reason::DuplicateId,
                format!("request id {id} is used twice in this batch"),
            );
            *result = Err(match &*result {
                Ok(Decision::Call(call)) => refused.of_tool(&call.tool),
                Ok(Decision::Pass { method, .. }) => refused.in_method(method),
                _ => refused,
            });
        }
    }
    let first = results.iter().enumerate().find_map(|(i, r)| match r {
        Err(refused) => Some((i, refused.clone())),
        Ok(_) => None,
    });
    let Some((index, first)) = first else {
        let decisions = results.into_iter().flatten().collect();
        return Inspection::Forward(Forward {
            bytes: body.to_vec(),
            batch: true,
            decisions,
        });
    };
    // Answer every identified element: the refused ones with their own
    // reason, the others with why they were not forwarded either.
    let answers: Vec<Value> = results
        .iter()
        .zip(items)
        .filter_map(|(result, item)| match result {
            Err(refused) => refused.id.as_ref().map(|_| refused.to_json()),
            Ok(_) => element_id(item).map(|id| {
                Refused::new(
                    Some(&id),
                    Reason::BatchRefused,
                    format!(
                        "not forwarded: batch element {index} was refused: {}",
                        first.message
                    ),
                )
                .to_json()
            }),
        })
        .collect();
    let refused = Refused {
        message: format!("batch element {index} refused: {}", first.message),
        ..first
    };
    if answers.is_empty() {
        return Inspection::Refuse(Refusal::single(400, refused));
    }
    Inspection::Refuse(Refusal {
        status: 200,
        body: to_bytes(&Value::Array(answers)),
        refused,
    })
}

fn element_id(item: &Value) -> Option<RequestId> {
    item.as_object()?.get("id").and_then(RequestId::from_json)
}

const MEMBERS: [&str; 6] = ["jsonrpc", "id", "method", "params", "result", "error"];

/// Checks one JSON-RPC message from the agent.
fn check_message(
    policy: &ServerPolicy,
    value: &Value,
    in_batch: bool,
) -> Result<Decision, Refused> {
    let Some(object) = value.as_object() else {
        return invalid(None, "a JSON-RPC message must be an object".into());
    };
    let id = match object.get("id") {
        None => None,
        Some(raw) => match RequestId::from_json(raw) {
            Some(id) => Some(id),
            None => {
                return invalid(None, "id must be a string or an integer".into());
            }
        },
    };
    let id = id.as_ref();
    if let Some(key) = object.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
        return invalid(id, format!("unknown member {key:?} in a JSON-RPC message"));
    }
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id, "jsonrpc must be \"2.0\"".into());
    }
    let Some(method) = object.get("method") else {
        return check_response(object, id);
    };
    let Some(method) = method.as_str() else {
        return invalid(id, "method must be a string".into());
    };
    check_request(policy, object, id, method, in_batch).map_err(|r| r.in_method(method))
}

fn invalid(id: Option<&RequestId>, message: String) -> Result<Decision, Refused> {
    Err(Refused::new(id, Reason::InvalidMessage, message))
}

/// Checks a message with a method: a request or a notification.
fn check_request(
    policy: &ServerPolicy,
    object: &Map<String, Value>,
    id: Option<&RequestId>,
    method: &str,
    in_batch: bool,
) -> Result<Decision, Refused> {
    if object.contains_key("result") || object.contains_key("error") {
        return invalid(id, "a request cannot carry result or error".into());
    }
    let params = match object.get("params") {
        None => None,
        Some(Value::Object(params)) => Some(params),
        Some(_) => {
            return Err(Refused::new(
                id,
                Reason::InvalidParams,
                "params must be an object",
            ));
        }
    };
    match method {
        "tools/call" => {
            let Some(id) = id else {
                return Err(Refused::new(
                    None,
                    Reason::CallAsNotification,
                    "tools/call must be a request with an id, not a notification",
                ));
            };
            check_tool_call(policy, id, params, in_batch)
        }
        _ if !policy.allows(method) => Err(Refused::new(
            id,
            Reason::MethodNotAllowed,
            format!(
                "method {method:?} is not allowed by the gate for server {:?}",
                policy.server().as_str()
            ),
        )),
        "initialize" if in_batch => invalid(id, "initialize must not be part of a batch".into()),
        _ => {
            let notification = method.starts_with("notifications/");
            match (notification, id) {
                (true, Some(id)) => invalid(
                    Some(id),
                    format!("{method} is a notification; it takes no id"),
                ),
                (false, None) => invalid(None, format!("{method} must be a request with an id")),
                (_, id) => Ok(Decision::Pass {
                    method: method.to_string(),
                    id: id.cloned(),
                }),
            }
        }
    }
}

fn check_tool_call(
    policy: &ServerPolicy,
    id: &RequestId,
    params: Option<&Map<String, Value>>,
    in_batch: bool,
) -> Result<Decision, Refused> {
    let bad = |message: &str| Err(Refused::new(Some(id), Reason::InvalidParams, message));
    let Some(params) = params else {
        return bad("tools/call needs params");
    };
    let Some(tool) = params.get("name").and_then(Value::as_str) else {
        return bad("tools/call params.name must be a string");
    };
    check_call(policy, id, tool, params, in_batch).map_err(|r| r.of_tool(tool))
}

/// Checks a `tools/call` of `tool`.
fn check_call(
    policy: &ServerPolicy,
    id: &RequestId,
    tool: &str,
    params: &Map<String, Value>,
    in_batch: bool,
) -> Result<Decision, Refused> {
    let bad = |message: &str| Err(Refused::new(Some(id), Reason::InvalidParams, message));
    let arguments = match params.get("arguments") {
        None => None,
        Some(Value::Object(arguments)) => Some(arguments.clone()),
        Some(_) => return bad("tools/call params.arguments must be an object"),
    };
    let server = policy.server().as_str();
    if !policy.declares(tool) {
        return Err(Refused::new(
            Some(id),
            Reason::ToolNotDeclared,
            format!("tool {tool:?} is not declared for server {server:?}"),
        ));
    }
    let call = ToolCall {
        server: server.to_string(),
        tool: tool.to_string(),
        arguments,
        request_id: id.clone(),
    };
    match policy.gate(tool) {
        GateMatch::NotGated => Ok(Decision::Call(call)),
        GateMatch::CaseVariant => Err(Refused::new(
            Some(id),
            Reason::ToolCaseVariant,
            format!(
                "tool {tool:?} differs from a gated tool only in letter case; \
                 names are matched exactly, so the call is refused"
            ),
        )),
        GateMatch::Gated if in_batch => Err(Refused::new(
            Some(id),
            Reason::GatedCallInBatch,
            format!("tool {tool:?} needs a human decision; send the call alone, not in a batch"),
        )),
        GateMatch::Gated => Ok(Decision::Gated(call)),
    }
}

/// The agent answering a server-to-client request.
fn check_response(
    object: &Map<String, Value>,
    id: Option<&RequestId>,
) -> Result<Decision, Refused> {
    let invalid = |message: &str| Err(Refused::new(None, Reason::InvalidMessage, message));
    let Some(id) = id else {
        return invalid("a message needs a method, or an id with result or error");
    };
    if object.contains_key("params") {
        return invalid("a response cannot carry params");
    }
    match (object.get("result"), object.get("error")) {
        (Some(Value::Object(_)), None) => {}
        (None, Some(Value::Object(error)))
            if error.get("code").is_some_and(Value::is_i64)
                && error.get("message").is_some_and(Value::is_string) => {}
        (None, Some(_)) => return invalid("error must be an object with a code and a message"),
        (Some(_), None) => return invalid("result must be an object"),
        _ => return invalid("a response carries exactly one of result and error"),
    }
    Ok(Decision::Response { id: id.clone() })
}

/// `application/json`, any case, optionally with `charset=utf-8`; other
/// parameters are ignored, another charset is refused.
fn is_json_content_type(content_type: Option<&str>) -> bool {
    let Some(content_type) = content_type else {
        return false;
    };
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return false;
    }
    parts.all(|param| {
        let Some((name, value)) = param.split_once('=') else {
            return param.trim().is_empty();
        };
        if !name.trim().eq_ignore_ascii_case("charset") {
            return true;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        value.eq_ignore_ascii_case("utf-8")
    })
}
