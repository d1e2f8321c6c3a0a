//! What the audit log keeps of each request the gate refuses itself
//! (`llm_refused`, through the [`crate::Recorder`]): enough to see what
//! was tried, nothing the agent could make the log carry. No body, no
//! header values, no message text; every string the agent chose cut to
//! [`MAX_RECORDED_BYTES`].

use crate::reason::Reason;
use crate::route::Kind;

/// Longest string the agent chose (a model name, a path) that a record
/// holds whole; a longer one is cut at a character boundary at most this
/// many bytes in, and `…` appended.
pub const MAX_RECORDED_BYTES: usize = 128;

/// How a call reached the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// An HTTP request (its response JSON or SSE).
    Http,
    /// A `response.create` message on the Responses WebSocket.
    WebSocket,
}

impl Transport {
    /// `http` or `websocket`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::WebSocket => "websocket",
        }
    }
}

/// A request the gate refused itself, as the audit log records it. A
/// meter's refusal is not one: the meter records its own.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refused {
    /// The provider's id.
    pub provider: String,
    /// Why: the code the agent's error carries.
    pub reason: Reason,
    /// The HTTP method (for a WebSocket message, the `GET` that opened it).
    pub method: String,
    /// The path asked for, without its query.
    pub path: String,
    /// The endpoint, when the path was one the gate serves.
    pub kind: Option<Kind>,
    /// The model the body named, if the gate read that far.
    pub model: Option<String>,
    /// HTTP or WebSocket.
    pub transport: Transport,
}

impl Refused {
    pub(crate) fn new(provider: &str, reason: Reason, method: &str, path: &str) -> Refused {
        Refused {
            provider: provider.to_owned(),
            reason,
            method: bounded(method),
            path: bounded(path),
            kind: None,
            model: None,
            transport: Transport::Http,
        }
    }
}

/// `text`, cut to [`MAX_RECORDED_BYTES`] at a character boundary.
pub(crate) fn bounded(text: &str) -> String {
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
        assert_eq!(bounded("gpt-5"), "gpt-5");
        let long = "é".repeat(100);
        let cut = bounded(&long);
        assert!(cut.ends_with('…'));
        assert!(cut.len() <= MAX_RECORDED_BYTES + '…'.len_utf8());
    }
}
