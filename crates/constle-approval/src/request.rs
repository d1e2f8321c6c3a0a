//! Request ids and the request a gate sends to the decision endpoint.

use std::fmt;

use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use crate::subject::{SubjectDigest, SubjectError, subject_digest};

/// The prefix of every request id.
pub const REQUEST_ID_PREFIX: &str = "hgr_";

/// The id of one gated call: [`REQUEST_ID_PREFIX`] and 32 lowercase hex
/// digits, 128 bits from the operating system's random source.
///
/// Only the gate mints ids ([`PendingRequest::new`]); there is no parser,
/// because an id that arrives from outside is only ever compared with the
/// one minted.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(pub(crate) String);

impl RequestId {
    pub(crate) fn mint() -> Result<RequestId, RequestError> {
        let mut bits = [0u8; 16];
        getrandom::fill(&mut bits).map_err(|_| RequestError::Random)?;
        Ok(RequestId(format!(
            "{REQUEST_ID_PREFIX}{}",
            hex::encode(bits)
        )))
    }

    /// The id as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestId({})", self.0)
    }
}

/// Why a gated call could not become a [`PendingRequest`]. The gate must
/// refuse the call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The call has no exact subject digest.
    #[error(transparent)]
    Subject(#[from] SubjectError),
    /// The operating system's random source failed.
    #[error("the operating system's random source failed; no request id could be minted")]
    Random,
    /// The request could not be written as JSON.
    #[error("the gate request could not be written as JSON")]
    Json,
}

/// One gated call waiting for its decision.
///
/// Deliberately neither `Clone` nor `Copy`: [`crate::verify_decision`] takes
/// it by value, so the first decision consumes it and no second decision can
/// be checked against it.
pub struct PendingRequest {
    request_id: RequestId,
    agent: String,
    server: String,
    tool: String,
    arguments: Value,
    subject_digest: SubjectDigest,
    expires_at: Timestamp,
    body: Vec<u8>,
}

/// The POST body, field for field as the specification lists it.
#[derive(Serialize)]
struct PostBody<'a> {
    request_id: &'a str,
    agent: &'a str,
    server: &'a str,
    tool: &'a str,
    arguments: &'a Value,
    subject_digest: String,
    expires_at: String,
}

impl PendingRequest {
    /// Mint a fresh request id for a gated `tools/call` and digest it.
    ///
    /// `expires_at` is when the gate stops waiting; it is sent truncated to
    /// whole seconds, in UTC.
    ///
    /// # Errors
    ///
    /// [`RequestError`] if the arguments have no exact digest or no random
    /// id can be minted; the gate must then refuse the call.
    pub fn new(
        agent: &str,
        server: &str,
        tool: &str,
        arguments: Value,
        expires_at: Timestamp,
    ) -> Result<PendingRequest, RequestError> {
        PendingRequest::with_id(
            RequestId::mint()?,
            agent,
            server,
            tool,
            arguments,
            expires_at,
        )
    }

    /// Build a request with a given id: for the specification's test vectors
    /// only, never for a real gate.
    pub(crate) fn with_id(
        request_id: RequestId,
        agent: &str,
        server: &str,
        tool: &str,
        arguments: Value,
        expires_at: Timestamp,
    ) -> Result<PendingRequest, RequestError> {
        let subject_digest = subject_digest(server, tool, &arguments)?;
        let expires_at = Timestamp::from_second(expires_at.as_second()).unwrap_or(expires_at);
        let body = serde_json::to_vec(&PostBody {
            request_id: request_id.as_str(),
            agent,
            server,
            tool,
            arguments: &arguments,
            subject_digest: subject_digest.to_string(),
            expires_at: rfc3339(expires_at),
        })
        .map_err(|_| RequestError::Json)?;
        Ok(PendingRequest {
            request_id,
            agent: agent.to_owned(),
            server: server.to_owned(),
            tool: tool.to_owned(),
            arguments,
            subject_digest,
            expires_at,
            body,
        })
    }

    /// The id minted for this call.
    pub fn request_id(&self) -> &RequestId {
        &self.request_id
    }

    /// The agent's name.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The declared MCP server id.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The exact tool name.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The arguments that were digested: exactly what the gate may forward.
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// The digest sent to the endpoint, which a decision must repeat.
    pub fn subject_digest(&self) -> &SubjectDigest {
        &self.subject_digest
    }

    /// When the gate stops waiting, in whole seconds.
    pub fn expires_at(&self) -> Timestamp {
        self.expires_at
    }

    /// The POST body sent to the decision endpoint (UTF-8 JSON).
    pub fn post_body(&self) -> &[u8] {
        &self.body
    }
}

impl fmt::Debug for PendingRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingRequest")
            .field("request_id", &self.request_id)
            .field("agent", &self.agent)
            .field("server", &self.server)
            .field("tool", &self.tool)
            .field("subject_digest", &self.subject_digest)
            .field("expires_at", &rfc3339(self.expires_at))
            .finish_non_exhaustive()
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_hex_and_distinct() -> Result<(), RequestError> {
        let a = RequestId::mint()?;
        let b = RequestId::mint()?;
        assert_ne!(a, b);
        let hex = a
            .as_str()
            .strip_prefix(REQUEST_ID_PREFIX)
            .unwrap_or_default();
        assert_eq!(hex.len(), 32);
        assert!(
            hex.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        Ok(())
    }

    #[test]
    fn post_body_has_exactly_the_specified_fields() -> Result<(), Box<dyn std::error::Error>> {
        let expires = Timestamp::from_second(1_786_190_700)?
            .checked_add(jiff::SignedDuration::from_millis(750))?;
        let request = PendingRequest::new("a", "s", "t", serde_json::json!({"x": 1}), expires)?;
        let body: serde_json::Map<String, Value> = serde_json::from_slice(request.post_body())?;
        let mut keys: Vec<&str> = body.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "agent",
                "arguments",
                "expires_at",
                "request_id",
                "server",
                "subject_digest",
                "tool"
            ]
        );
        assert_eq!(body["expires_at"], "2026-08-08T12:05:00Z");
        assert_eq!(body["subject_digest"], request.subject_digest().to_string());
        assert_eq!(body["request_id"], request.request_id().as_str());
        Ok(())
    }
}
