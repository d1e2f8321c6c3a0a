//! What the audit log keeps of each request the gate refuses itself (it
//! goes through the [`crate::Recorder`]).
//!
//! Enough to see what was tried, and nothing the agent could use to make
//! the log carry its data: no argument values, no header values, no
//! message text, and every string the agent chose cut to
//! [`MAX_RECORDED_BYTES`]. So one refusal adds a bounded entry to the log,
//! whatever the agent sent. A refusal whose cause is on the host side (an
//! approver that could not ask) also carries that cause in full
//! ([`RefusedRequest::detail`]): the operator's to read, while the agent is
//! told only what failed.

use hyper::Method;

use crate::rpc::{Reason, RequestId};

/// Longest string the agent chose (an HTTP method, a JSON-RPC method, a
/// tool name, a string id) that a [`RefusedRequest`] holds whole: the
/// longest tool name an Agentfile may declare. A longer one is cut at a
/// character boundary at most this many bytes in, and `…` is appended.
pub const MAX_RECORDED_BYTES: usize = constle_manifest::MAX_TOOL_NAME_LEN;

/// A request the gate refused itself, as the audit log records it
/// (`mcp_refused`). Refusals another hook records get none: a human
/// decision ([`crate::Approval::Refused`]) and a spend refusal
/// ([`crate::Metered::Refused`]) are on record already.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefusedRequest {
    /// The server's id, from the policy.
    pub server: String,
    /// The HTTP method of the request (`POST`, `GET`, `DELETE`, or the
    /// one refused).
    pub http_method: String,
    /// The JSON-RPC method, if the gate read that far; for a batch, that
    /// of its first refused element.
    pub method: Option<String>,
    /// The tool of a refused `tools/call`, if the gate read that far.
    pub tool: Option<String>,
    /// Why: the code the agent got as `error.data.reason`.
    pub reason: Reason,
    /// The JSON-RPC id, if the refused message had a valid one.
    pub request_id: Option<RequestId>,
    /// What went wrong on the host side, in full, when that caused the
    /// refusal ([`crate::Approval::Failed`]): it may name host paths, so it
    /// is for the audit log and never sent to the agent. Host text, never
    /// the agent's.
    pub detail: Option<String>,
}

/// What the agent asked, as far as the gate read it before refusing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked<'a> {
    pub(crate) http_method: &'a Method,
    pub(crate) method: Option<&'a str>,
    pub(crate) tool: Option<&'a str>,
    pub(crate) id: Option<&'a RequestId>,
}

impl<'a> Asked<'a> {
    /// A request refused before any message in it was read.
    pub(crate) fn http(http_method: &'a Method) -> Asked<'a> {
        Asked {
            http_method,
            method: None,
            tool: None,
            id: None,
        }
    }
}

impl RefusedRequest {
    /// The record of `asked` refused for `reason`, every string the agent
    /// chose cut to [`MAX_RECORDED_BYTES`].
    pub(crate) fn new(server: &str, asked: Asked<'_>, reason: Reason) -> RefusedRequest {
        RefusedRequest {
            server: server.to_owned(),
            http_method: bounded(asked.http_method.as_str()),
            method: asked.method.map(bounded),
            tool: asked.tool.map(bounded),
            reason,
            request_id: asked.id.map(|id| match id {
                RequestId::String(s) => RequestId::String(bounded(s)),
                number => number.clone(),
            }),
            detail: None,
        }
    }

    /// The record with `detail`, the host-side cause.
    pub(crate) fn with_detail(mut self, detail: String) -> RefusedRequest {
        self.detail = Some(detail);
        self
    }
}

fn bounded(text: &str) -> String {
    if text.len() <= MAX_RECORDED_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_RECORDED_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_strings_are_cut_at_a_character_boundary() {
        let exact = "a".repeat(MAX_RECORDED_BYTES);
        assert_eq!(bounded(&exact), exact);
        // 'é' is two bytes: the cut falls inside one at every other length.
        for extra in [1, 2] {
            let long = format!("{}{}", "a".repeat(extra), "é".repeat(MAX_RECORDED_BYTES));
            let cut = bounded(&long);
            assert!(cut.len() <= MAX_RECORDED_BYTES + '…'.len_utf8(), "{extra}");
            assert!(cut.ends_with("é…"), "{extra}: {cut}");
        }
        let long = "x".repeat(5000);
        let http_method = Method::from_bytes(long.as_bytes()).unwrap();
        let id = RequestId::String(long.clone());
        let asked = Asked {
            http_method: &http_method,
            method: Some(&long),
            tool: Some(&long),
            id: Some(&id),
        };
        let request = RefusedRequest::new("accounting", asked, Reason::ToolNotDeclared);
        let RequestId::String(id) = request.request_id.unwrap() else {
            panic!("a string id stays a string");
        };
        for text in [
            request.http_method,
            request.method.unwrap(),
            request.tool.unwrap(),
            id,
        ] {
            assert_eq!(text.len(), MAX_RECORDED_BYTES + '…'.len_utf8());
        }
    }
}
