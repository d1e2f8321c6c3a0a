//! What the bridge reads in a message: enough to route it, nothing more.
//! The gate has checked every agent body already (strict JSON, one
//! JSON-RPC shape); what the server writes is checked by the gate's filter
//! after the bridge hands it on, so a line the bridge cannot route is
//! dropped, never guessed at.

use bytes::Bytes;
use constle_mcp_gate::RequestId;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// The parts of one JSON-RPC message the bridge routes by. Unknown members
/// are skipped unread; a duplicate one makes the message unroutable.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<&'a RawValue>,
    #[serde(default)]
    params: Option<CancelParams>,
}

/// `params` of `notifications/cancelled`, the only params the bridge reads.
#[derive(Deserialize)]
struct CancelParams {
    #[serde(default, rename = "requestId")]
    request_id: Option<Value>,
}

/// What one message is, to the bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A request (method and id): answered by a response with this id.
    Request { id: RequestId, method: String },
    /// A notification (method, no id); `cancels` is the request a
    /// `notifications/cancelled` names.
    Notification { cancels: Option<RequestId> },
    /// A response (id, no method).
    Response { id: RequestId },
}

/// Reads `message`'s kind; `None` for anything else (no id nor method, an
/// id that is neither a string nor an integer, a duplicate member).
pub(crate) fn kind(message: &[u8]) -> Option<Kind> {
    // Serde would read a struct from an array too.
    if first_byte(message)? != b'{' {
        return None;
    }
    let head: Head<'_> = serde_json::from_slice(message).ok()?;
    let id = match head.id {
        Some(raw) => Some(RequestId::from_json(
            &serde_json::from_str(raw.get()).ok()?,
        )?),
        None => None,
    };
    let method: Option<String> = match head.method {
        Some(raw) => Some(serde_json::from_str(raw.get()).ok()?),
        None => None,
    };
    match (id, method) {
        (Some(id), Some(method)) => Some(Kind::Request { id, method }),
        (None, Some(method)) => {
            let cancels = (method == "notifications/cancelled")
                .then(|| {
                    head.params?
                        .request_id
                        .as_ref()
                        .and_then(RequestId::from_json)
                })
                .flatten();
            Some(Kind::Notification { cancels })
        }
        (Some(id), None) => Some(Kind::Response { id }),
        (None, None) => None,
    }
}

/// A POST body from the gate: one message, or the elements of a batch
/// (revision 2025-03-26), each with its kind.
#[derive(Debug)]
pub(crate) struct Body {
    pub messages: Vec<Kind>,
    pub batch: bool,
}

impl Body {
    /// `None` when any message cannot be routed (the gate lets no such
    /// body through, so this is a bridge-side safety net).
    pub fn parse(bytes: &[u8]) -> Option<Body> {
        match first_byte(bytes)? {
            b'[' => {
                let elements: Vec<&RawValue> = serde_json::from_slice(bytes).ok()?;
                let messages = elements
                    .iter()
                    .map(|e| kind(e.get().as_bytes()))
                    .collect::<Option<Vec<_>>>()?;
                Some(Body {
                    messages,
                    batch: true,
                })
            }
            _ => Some(Body {
                messages: vec![kind(bytes)?],
                batch: false,
            }),
        }
    }

    /// The ids of the requests, which the server must answer.
    pub fn requests(&self) -> impl Iterator<Item = &RequestId> {
        self.messages.iter().filter_map(|m| match m {
            Kind::Request { id, .. } => Some(id),
            _ => None,
        })
    }

    /// Whether the body is a single `initialize` request.
    pub fn is_initialize(&self) -> bool {
        matches!(self.messages.as_slice(), [Kind::Request { method, .. }] if method == "initialize")
    }

    /// Whether a request in a batch is `initialize` (the gate refuses that).
    pub fn initializes(&self) -> bool {
        self.messages
            .iter()
            .any(|m| matches!(m, Kind::Request { method, .. } if method == "initialize"))
    }

    /// The requests `notifications/cancelled` in this body name.
    pub fn cancelled(&self) -> impl Iterator<Item = &RequestId> {
        self.messages.iter().filter_map(|m| match m {
            Kind::Notification { cancels } => cancels.as_ref(),
            _ => None,
        })
    }
}

fn first_byte(bytes: &[u8]) -> Option<u8> {
    bytes.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// `body` as one line of the stdio transport: the newlines and carriage
/// returns JSON allows between tokens (never inside a string, where
/// they must be escaped) become spaces, so the server reads the very
/// message the gate inspected, on one line, then a newline.
pub(crate) fn to_line(body: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(body.len() + 1);
    line.extend(body.iter().map(|&b| match b {
        b'\n' | b'\r' => b' ',
        other => other,
    }));
    line.push(b'\n');
    line
}

/// The messages of one line the server wrote: itself, or the elements of
/// the batch it holds; `None` when it is no JSON.
pub(crate) fn split_line(line: Bytes) -> Option<Vec<Bytes>> {
    if first_byte(&line)? != b'[' {
        return Some(vec![line]);
    }
    let elements: Vec<&RawValue> = serde_json::from_slice(&line).ok()?;
    Some(
        elements
            .iter()
            .map(|e| line.slice_ref(e.get().as_bytes()))
            .collect(),
    )
}

/// Several responses as the answer to a batch.
pub(crate) fn batch(responses: &[Bytes]) -> Bytes {
    let mut out = Vec::with_capacity(responses.iter().map(|r| r.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (i, response) in responses.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(response);
    }
    out.push(b']');
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: i128) -> RequestId {
        RequestId::Int(n)
    }

    #[test]
    fn kinds() {
        assert_eq!(
            kind(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Some(Kind::Request {
                id: id(1),
                method: "tools/list".into()
            })
        );
        assert_eq!(
            kind(br#"{"jsonrpc":"2.0","id":"a","result":{"tools":[]}}"#),
            Some(Kind::Response {
                id: RequestId::String("a".into())
            })
        );
        assert_eq!(
            kind(
                br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#
            ),
            Some(Kind::Notification {
                cancels: Some(id(7))
            })
        );
        assert_eq!(
            kind(
                br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"requestId":7}}"#
            ),
            Some(Kind::Notification { cancels: None })
        );
        for unroutable in [
            &br#"{"jsonrpc":"2.0"}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"id":2,"result":{}}"#,
            br#"{"jsonrpc":"2.0","id":[1],"result":{}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":3}"#,
            b"not json",
            b"[1]",
        ] {
            assert_eq!(kind(unroutable), None, "{unroutable:?}");
        }
    }

    #[test]
    fn bodies() {
        let body =
            Body::parse(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#).unwrap();
        assert!(body.is_initialize() && !body.batch);
        let body = Body::parse(
            br#" [{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0}}]"#,
        )
        .unwrap();
        assert!(body.batch && !body.is_initialize() && !body.initializes());
        assert_eq!(body.requests().collect::<Vec<_>>(), [&id(1)]);
        assert_eq!(body.cancelled().collect::<Vec<_>>(), [&id(0)]);
        assert!(Body::parse(br#"[{"jsonrpc":"2.0"}]"#).is_none());
    }

    #[test]
    fn lines() {
        assert_eq!(
            to_line(b"{\r\n  \"a\": \"x\\ny\"\n}"),
            b"{    \"a\": \"x\\ny\" }\n"
        );
        let line = Bytes::from_static(br#"[{"id":1,"result":{}}, {"id":2,"result":{}}]"#);
        let parts = split_line(line).unwrap();
        assert_eq!(
            parts,
            [&br#"{"id":1,"result":{}}"#[..], br#"{"id":2,"result":{}}"#]
        );
        assert_eq!(
            &batch(&parts)[..],
            br#"[{"id":1,"result":{}},{"id":2,"result":{}}]"#
        );
        assert!(split_line(Bytes::from_static(b"[oops")).is_none());
    }
}
