//! The gate's `POST <url>` body, checked strictly before anything is stored.

use serde_json::Value;

/// The largest POST body accepted from the gate. Arguments can be long
/// (the terminal prompt refuses to show more than a few KiB, but the
/// webhook has to carry them all); anything larger is refused unread.
pub const MAX_POST_BYTES: usize = 256 * 1024;

/// The longest agent name, server id or tool name accepted.
pub const MAX_NAME_BYTES: usize = 256;

/// The members of the body, exactly (specification §6.1).
const MEMBERS: [&str; 7] = [
    "agent",
    "arguments",
    "expires_at",
    "request_id",
    "server",
    "subject_digest",
    "tool",
];

/// A request from the gate, as it will be stored and shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateRequest {
    /// `hgr_` and 32 lowercase hex digits, verbatim.
    pub request_id: String,
    /// The agent's name.
    pub agent: String,
    /// The MCP server id.
    pub server: String,
    /// The tool name.
    pub tool: String,
    /// The arguments, as compact JSON text.
    pub arguments: String,
    /// `sha256:` and 64 lowercase hex digits, verbatim.
    pub subject_digest: String,
    /// `YYYY-MM-DDTHH:MM:SSZ`, verbatim.
    pub expires_at: String,
    /// The same instant, in seconds since the epoch.
    pub expires_at_unix: i64,
}

/// Why a POST body was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// Longer than [`MAX_POST_BYTES`] (HTTP 413).
    #[error("the request is larger than {MAX_POST_BYTES} bytes")]
    TooLarge,
    /// Not strict JSON (HTTP 400).
    #[error("the request is not strict JSON: {0}")]
    Json(String),
    /// JSON, but not a request (HTTP 400).
    #[error("the request is malformed: {0}")]
    Shape(String),
}

/// Parses and checks a POST body.
///
/// Besides the shapes, the digest must be the digest of the server, tool
/// and arguments in the same body: otherwise the page would show a person
/// one call while the signature approved another. The digest that is
/// stored, and later signed, is still the gate's string, verbatim.
///
/// # Errors
///
/// [`RequestError`] saying what is wrong.
pub fn parse_gate_request(body: &[u8]) -> Result<GateRequest, RequestError> {
    let value = constle_json::parse_limited(body, MAX_POST_BYTES).map_err(|err| match err {
        constle_json::LimitedError::TooLarge { .. } => RequestError::TooLarge,
        other => RequestError::Json(other.to_string()),
    })?;
    let Value::Object(object) = value else {
        return Err(shape("not a JSON object"));
    };
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    if keys != MEMBERS {
        return Err(shape(&format!(
            "the members must be exactly {}",
            MEMBERS.join(", ")
        )));
    }
    let text = |name: &str| -> Result<String, RequestError> {
        match object.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(shape(&format!("`{name}` must be a string"))),
        }
    };
    let request_id = text("request_id")?;
    if !is_request_id(&request_id) {
        return Err(shape(
            "`request_id` must be hgr_ and 32 lowercase hex digits",
        ));
    }
    let subject_digest = text("subject_digest")?;
    if !is_digest(&subject_digest) {
        return Err(shape(
            "`subject_digest` must be sha256: and 64 lowercase hex digits",
        ));
    }
    let [agent, server, tool] = [text("agent")?, text("server")?, text("tool")?];
    for (name, value) in [("agent", &agent), ("server", &server), ("tool", &tool)] {
        if value.is_empty() || value.len() > MAX_NAME_BYTES {
            return Err(shape(&format!(
                "`{name}` must be 1 to {MAX_NAME_BYTES} bytes"
            )));
        }
    }
    let expires_at = text("expires_at")?;
    let expires_at_unix = parse_expiry(&expires_at).ok_or_else(|| {
        shape("`expires_at` must be RFC 3339 UTC in whole seconds, like 2026-08-08T12:05:00Z")
    })?;
    let arguments = object.get("arguments").cloned().unwrap_or(Value::Null);
    let digest = constle_human_gate::subject_digest(&server, &tool, &arguments)
        .map_err(|err| shape(&format!("the subject has no exact digest: {err}")))?;
    if digest.to_string() != subject_digest {
        return Err(shape(
            "`subject_digest` is not the digest of this server, tool and arguments",
        ));
    }
    let arguments =
        serde_json::to_string(&arguments).map_err(|err| RequestError::Json(err.to_string()))?;
    Ok(GateRequest {
        request_id,
        agent,
        server,
        tool,
        arguments,
        subject_digest,
        expires_at,
        expires_at_unix,
    })
}

fn shape(what: &str) -> RequestError {
    RequestError::Shape(what.to_owned())
}

fn lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `hgr_` and 32 lowercase hex digits.
pub fn is_request_id(s: &str) -> bool {
    s.strip_prefix("hgr_").is_some_and(|hex| lower_hex(hex, 32))
}

fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|hex| lower_hex(hex, 64))
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ`, and only that form:
/// the string is shown and stored verbatim, so it must mean one instant.
fn parse_expiry(s: &str) -> Option<i64> {
    let t: jiff::Timestamp = s.parse().ok()?;
    (t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string() == s).then(|| t.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let expires = jiff::Timestamp::from_second(1_786_190_700)?;
        let request = constle_human_gate::PendingRequest::new(
            "agent",
            "accounting",
            "pay_invoice",
            serde_json::json!({"invoice_id": "INV-0042"}),
            expires,
        )?;
        Ok(request.post_body().to_vec())
    }

    #[test]
    fn the_gates_own_body_is_accepted_verbatim() -> Result<(), Box<dyn std::error::Error>> {
        let body = valid()?;
        let parsed = parse_gate_request(&body)?;
        let value: Value = serde_json::from_slice(&body)?;
        assert_eq!(parsed.request_id, value["request_id"]);
        assert_eq!(parsed.subject_digest, value["subject_digest"]);
        assert_eq!(parsed.expires_at, "2026-08-08T12:05:00Z");
        assert_eq!(parsed.expires_at_unix, 1_786_190_700);
        Ok(())
    }

    #[test]
    fn shapes_are_checked() -> Result<(), Box<dyn std::error::Error>> {
        let body: Value = serde_json::from_slice(&valid()?)?;
        let with = |key: &str, v: Value| {
            let mut b = body.clone();
            b[key] = v;
            serde_json::to_vec(&b).unwrap_or_default()
        };
        let bad = [
            with("request_id", "hgr_ABC".into()),
            with("request_id", format!("hgr_{}", "A".repeat(32)).into()),
            with(
                "subject_digest",
                format!("sha256:{}", "0".repeat(63)).into(),
            ),
            with(
                "subject_digest",
                format!("sha256:{}", "0".repeat(64)).into(),
            ),
            with("expires_at", "2026-08-08T12:05:00.5Z".into()),
            with("expires_at", "2026-08-08T12:05:00+00:00".into()),
            with("agent", 7.into()),
            with("tool", "x".repeat(MAX_NAME_BYTES + 1).into()),
            with("extra", "x".into()),
            b"[]".to_vec(),
            b"{} {}".to_vec(),
        ];
        for body in bad {
            assert!(
                parse_gate_request(&body).is_err(),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(())
    }
}
