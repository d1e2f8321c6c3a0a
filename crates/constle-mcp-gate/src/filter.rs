//! Server to agent: `tools/list` results filtered to the declared tools, and
//! server-to-client requests the policy does not allow kept from the agent.

use std::borrow::Cow;
use std::fmt;

use serde_json::{Map, Value};

use crate::inspect::MAX_BODY_BYTES;
use crate::offered::OfferedTools;
use crate::policy::ServerPolicy;
use crate::rpc::{METHOD_NOT_FOUND, Reason, RequestId, error_response, to_bytes};

/// Why a server's message could not be filtered. The gate must then not
/// relay it: it answers the agent with an error instead (fail closed).
#[derive(Debug)]
#[non_exhaustive]
pub enum FilterError {
    /// Not strict JSON, or larger than [`MAX_BODY_BYTES`].
    NotJson(constle_json::LimitedError),
    /// A `tools/list` response whose `result.tools` is not an array, or a
    /// message that is not a JSON-RPC object.
    Malformed(&'static str),
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterError::NotJson(err) => write!(f, "server sent invalid JSON: {err}"),
            FilterError::Malformed(what) => write!(f, "server sent a malformed message: {what}"),
        }
    }
}

impl std::error::Error for FilterError {}

/// Filters the JSON body of the response to one `tools/list` request: every
/// tool whose `name` is not a declared tool of the server is removed. Every
/// other member (`nextCursor` included, so each page is filtered in turn) is
/// kept. An error response is returned unchanged.
pub fn filter_tools_list(
    policy: &ServerPolicy,
    response_body: &[u8],
) -> Result<Vec<u8>, FilterError> {
    let value = parse(response_body)?;
    let Value::Object(mut response) = value else {
        return Err(FilterError::Malformed(
            "a tools/list response must be an object",
        ));
    };
    filter_tools_list_response(policy, &mut response)?;
    Ok(to_bytes(&Value::Object(response)))
}

fn filter_tools_list_response(
    policy: &ServerPolicy,
    response: &mut Map<String, Value>,
) -> Result<(), FilterError> {
    let Some(result) = response.get_mut("result") else {
        return if response.contains_key("error") {
            Ok(())
        } else {
            Err(FilterError::Malformed("a response needs result or error"))
        };
    };
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return Err(FilterError::Malformed("result.tools must be an array"));
    };
    tools.retain(|tool| {
        tool.get("name")
            .and_then(Value::as_str)
            .is_some_and(|name| policy.declares(name))
    });
    Ok(())
}

/// What to do with one message from the server (a JSON response body, or
/// the `data` of one SSE event).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct ServerMessage {
    /// Relay this to the agent; `None`: relay nothing. The server's own
    /// bytes when the gate changed nothing in them.
    pub to_agent: Option<Vec<u8>>,
    /// POST this to the server: errors answering the requests the agent
    /// never saw.
    pub to_server: Option<Vec<u8>>,
}

/// A [`ServerMessage`] that borrows the server's bytes when they are
/// relayed unchanged, as nearly every message is: the gate then neither
/// re-serialises nor copies them. With the tool lists `to_agent` holds, to
/// record before it is relayed.
#[derive(Debug)]
pub(crate) struct Filtered<'a> {
    pub(crate) to_agent: Option<Cow<'a, [u8]>>,
    pub(crate) to_server: Option<Vec<u8>>,
    pub(crate) offered: Vec<OfferedTools>,
}

/// Filters one message from the server (or a batch of them):
///
/// - every message whose `result` has a `tools` member is filtered as by
///   [`filter_tools_list`], whatever its id: the gate may have forgotten
///   the request, or never seen it, and a tool list must not reach the
///   agent unfiltered either way (fail closed);
/// - a response whose id `is_tools_list` must be a `tools/list` result or
///   an error, and is filtered likewise;
/// - other responses and all notifications pass;
/// - requests other than `ping` and the methods the policy allows
///   (`sampling/createMessage`, `elicitation/create`, `roots/list`, …) are
///   not relayed, and the gate answers them to the server with
///   `-32601`.
///
/// `is_tools_list` is asked once about the id of each response, in order,
/// so a caller can forget the ids it answers for.
pub fn filter_server_message(
    policy: &ServerPolicy,
    message: &[u8],
    is_tools_list: impl FnMut(&RequestId) -> bool,
) -> Result<ServerMessage, FilterError> {
    let filtered = filter(policy, message, is_tools_list)?;
    Ok(ServerMessage {
        to_agent: filtered.to_agent.map(Cow::into_owned),
        to_server: filtered.to_server,
    })
}

/// [`filter_server_message`], relaying a message the gate leaves as it is
/// (no tool list in it, no server request taken out) in its own bytes.
/// They parsed strictly, so the agent reads in them what the gate read.
pub(crate) fn filter<'a>(
    policy: &ServerPolicy,
    message: &'a [u8],
    mut is_tools_list: impl FnMut(&RequestId) -> bool,
) -> Result<Filtered<'a>, FilterError> {
    let value = parse(message)?;
    let (items, batch) = match value {
        Value::Array(items) => (items, true),
        single => (vec![single], false),
    };
    let mut to_agent = Vec::new();
    let mut to_server = Vec::new();
    let mut offered = Vec::new();
    let mut changed = false;
    for item in items {
        let Value::Object(mut object) = item else {
            return Err(FilterError::Malformed(
                "a JSON-RPC message must be an object",
            ));
        };
        let id = object.get("id").and_then(RequestId::from_json);
        let answers_list = match object.get("method").map(Value::as_str) {
            Some(Some(method)) => {
                if let Some(id) = id
                    .as_ref()
                    .filter(|_| !policy.allows_server_request(method))
                {
                    let message = format!(
                        "the Constle gate does not let server {:?} send {method:?} to the agent",
                        policy.server().as_str()
                    );
                    to_server.push(error_response(
                        Some(id),
                        METHOD_NOT_FOUND,
                        &message,
                        Reason::MethodNotAllowed,
                    ));
                    continue;
                }
                if id.is_none() && object.contains_key("id") {
                    return Err(FilterError::Malformed("id must be a string or an integer"));
                }
                false
            }
            Some(None) => return Err(FilterError::Malformed("method must be a string")),
            None => id.as_ref().is_some_and(&mut is_tools_list),
        };
        if answers_list || carries_tool_list(&object) {
            filter_tools_list_response(policy, &mut object)?;
            if let Some(tools) = tools_of(&object) {
                offered.push(OfferedTools::new(policy.server().as_str(), tools));
            }
            changed = true;
        }
        to_agent.push(Value::Object(object));
    }
    let pack = |mut values: Vec<Value>| match values.len() {
        0 => None,
        1 if !batch => values.pop().map(|v| to_bytes(&v)),
        _ => Some(to_bytes(&Value::Array(values))),
    };
    let to_agent = if changed || !to_server.is_empty() {
        pack(to_agent).map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(message))
    };
    Ok(Filtered {
        to_agent,
        to_server: pack(to_server),
        offered,
    })
}

/// The tool list a filtered response holds: none for an error response.
fn tools_of(message: &Map<String, Value>) -> Option<&[Value]> {
    message
        .get("result")?
        .get("tools")?
        .as_array()
        .map(Vec::as_slice)
}

/// Whether `message` looks like a `tools/list` result: its `result` has a
/// `tools` member (no other MCP result has one).
fn carries_tool_list(message: &Map<String, Value>) -> bool {
    message
        .get("result")
        .and_then(Value::as_object)
        .is_some_and(|result| result.contains_key("tools"))
}

fn parse(bytes: &[u8]) -> Result<Value, FilterError> {
    constle_json::parse_limited(bytes, MAX_BODY_BYTES).map_err(FilterError::NotJson)
}
