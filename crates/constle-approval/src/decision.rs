//! Checking a decision that arrived from the endpoint.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::DidKey;
use constle_identity::ed25519_dalek::Signature;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::request::{PendingRequest, RequestId};
use crate::subject::SubjectDigest;

/// The largest decision body that is read; anything longer is malformed.
pub const MAX_DECISION_BYTES: usize = 4096;

/// The message the approver signs: `request_id + "." + decision + "." +
/// subject_digest`, as UTF-8.
pub fn signed_message(request_id: &str, decision: &str, subject_digest: &str) -> String {
    format!("{request_id}.{decision}.{subject_digest}")
}

/// A decision body, parsed strictly: exactly these four members, each a
/// string, each once.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    request_id: String,
    decision: String,
    subject_digest: String,
    signature: String,
}

/// Why a response body is not a decision at all. Such a body counts as no
/// decision: the gate keeps waiting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MalformedDecision {
    /// Longer than [`MAX_DECISION_BYTES`].
    #[error("the decision body is larger than {MAX_DECISION_BYTES} bytes")]
    TooLarge,
    /// Not a JSON object with exactly `request_id`, `decision`,
    /// `subject_digest` and `signature`, each a string given once.
    #[error("the decision body is not a valid decision object: {0}")]
    NotADecision(String),
}

/// The audit reason of a decision that denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DenialReason {
    /// The signature is not a valid Ed25519 signature by the approver key
    /// over the rebuilt message (including one that is not base64 of 64
    /// bytes).
    SignatureInvalid,
    /// Signed, but for another request.
    RequestIdMismatch,
    /// Signed for this request id, but for another subject.
    DigestMismatch,
    /// Signed and matching, with a decision other than the exact word
    /// `approved`.
    Denied,
    /// (v2) Signed by a key that is not one of the approvers in force.
    ApproverUnknown,
    /// (v2) Signed for another agent.
    AgentMismatch,
    /// (v2) Signed for another MCP server.
    ServerMismatch,
    /// (v2) Signed for another tool.
    ToolMismatch,
    /// (v2) Signed under another policy (Agentfile).
    PolicyMismatch,
    /// (v2) Signed with another expiry than the request's.
    ExpiryMismatch,
    /// (v2) Arrived after the request expired.
    Expired,
}

impl DenialReason {
    /// The reason as written in the audit log.
    pub fn audit_reason(self) -> &'static str {
        match self {
            DenialReason::SignatureInvalid => "gate_signature_invalid",
            DenialReason::RequestIdMismatch => "gate_request_id_mismatch",
            DenialReason::DigestMismatch => "gate_digest_mismatch",
            DenialReason::Denied => "denied",
            DenialReason::ApproverUnknown => "gate_approver_unknown",
            DenialReason::AgentMismatch => "gate_agent_mismatch",
            DenialReason::ServerMismatch => "gate_server_mismatch",
            DenialReason::ToolMismatch => "gate_tool_mismatch",
            DenialReason::PolicyMismatch => "gate_policy_mismatch",
            DenialReason::ExpiryMismatch => "gate_expiry_mismatch",
            DenialReason::Expired => "gate_request_expired",
        }
    }
}

/// The signed fields of a decision, as the audit log records them with
/// `decided_by: "webhook"` (re-verifiable by `constle audit verify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    approver: DidKey,
    request_id: String,
    decision: String,
    subject_digest: String,
    signature: String,
}

impl DecisionRecord {
    /// `approved` or `denied`.
    pub fn decision(&self) -> &str {
        &self.decision
    }

    /// The request id the approver signed (equal to the minted one).
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The subject digest the approver signed (equal to the one sent).
    pub fn subject_digest(&self) -> &str {
        &self.subject_digest
    }

    /// The signature as received: standard base64 of 64 bytes.
    pub fn signature(&self) -> &str {
        &self.signature
    }

    /// The key that signed.
    pub fn approver(&self) -> &DidKey {
        &self.approver
    }

    /// The audit fields: `decided_by`, `approver`, `request_id`, `decision`,
    /// `subject_digest`, `signature`.
    pub fn audit_fields(&self) -> Map<String, Value> {
        let mut fields = Map::new();
        let mut put = |k: &str, v: &str| fields.insert(k.to_owned(), Value::from(v));
        put("decided_by", "webhook");
        put("approver", self.approver.as_str());
        put("request_id", &self.request_id);
        put("decision", &self.decision);
        put("subject_digest", &self.subject_digest);
        put("signature", &self.signature);
        fields
    }
}

/// Proof that a signed approval for exactly this request and subject was
/// checked. Only [`verify_decision`] makes one.
#[derive(Debug)]
pub struct VerifiedApproval {
    record: Box<DecisionRecord>,
}

impl VerifiedApproval {
    /// The signed fields to record before forwarding the call.
    pub fn record(&self) -> &DecisionRecord {
        &self.record
    }
}

/// A decision that denies, with its audit reason.
#[derive(Debug)]
pub struct Denial {
    reason: DenialReason,
    record: Option<Box<DecisionRecord>>,
}

impl Denial {
    /// Why the call is denied.
    pub fn reason(&self) -> DenialReason {
        self.reason
    }

    /// The signed fields, only for a verified, matching decision whose word
    /// is exactly `denied`. `None` for every failed check and for other
    /// words: recording those as a signed webhook denial would not
    /// re-verify.
    pub fn record(&self) -> Option<&DecisionRecord> {
        self.record.as_deref()
    }
}

/// What a decision that arrived decides. Not `non_exhaustive` on purpose:
/// every match must name `Approved`.
#[derive(Debug)]
pub enum Verdict {
    /// Forward the call.
    Approved(VerifiedApproval),
    /// Refuse the call.
    Denied(Denial),
}

/// A body that was no decision: the pending request comes back so the gate
/// can keep waiting.
#[derive(Debug)]
pub struct Undecided {
    /// The request, still waiting.
    pub pending: PendingRequest,
    /// What was wrong with the body.
    pub problem: MalformedDecision,
}

/// Check a decision body against the request it answers, in the
/// specification's order: rebuild the signed message, verify the signature
/// strictly with `approver`, then the request id, then the subject digest;
/// only the exact word `approved` approves.
///
/// The request is consumed by any verdict, so a decision is used once.
///
/// # Errors
///
/// [`Undecided`] (holding the request) if `body` is not a decision at all:
/// too large, not JSON, a duplicate, missing or extra member, or a member
/// that is not a string.
pub fn verify_decision(
    expected: PendingRequest,
    approver: &DidKey,
    body: &[u8],
) -> Result<Verdict, Box<Undecided>> {
    let parsed = match parse(body) {
        Ok(parsed) => parsed,
        Err(problem) => {
            return Err(Box::new(Undecided {
                pending: expected,
                problem,
            }));
        }
    };
    Ok(check(
        expected.request_id(),
        expected.subject_digest(),
        approver,
        parsed,
    ))
}

fn parse(body: &[u8]) -> Result<DecisionBody, MalformedDecision> {
    if body.len() > MAX_DECISION_BYTES {
        return Err(MalformedDecision::TooLarge);
    }
    serde_json::from_slice(body).map_err(|e| MalformedDecision::NotADecision(describe(&e)))
}

fn check(
    request_id: &RequestId,
    digest: &SubjectDigest,
    approver: &DidKey,
    body: DecisionBody,
) -> Verdict {
    let deny = |reason| {
        Verdict::Denied(Denial {
            reason,
            record: None,
        })
    };
    let message = signed_message(&body.request_id, &body.decision, &body.subject_digest);
    let signature = BASE64
        .decode(&body.signature)
        .ok()
        .and_then(|bytes| <[u8; 64]>::try_from(bytes).ok())
        .map(|bytes| Signature::from_bytes(&bytes));
    let verified = signature.is_some_and(|s| approver.verify(message.as_bytes(), &s).is_ok());
    if !verified {
        return deny(DenialReason::SignatureInvalid);
    }
    if body.request_id != request_id.as_str() {
        return deny(DenialReason::RequestIdMismatch);
    }
    if body.subject_digest != digest.to_string() {
        return deny(DenialReason::DigestMismatch);
    }
    let record = Box::new(DecisionRecord {
        approver: approver.clone(),
        request_id: body.request_id,
        decision: body.decision,
        subject_digest: body.subject_digest,
        signature: body.signature,
    });
    match record.decision.as_str() {
        "approved" => Verdict::Approved(VerifiedApproval { record }),
        "denied" => Verdict::Denied(Denial {
            reason: DenialReason::Denied,
            record: Some(record),
        }),
        _ => deny(DenialReason::Denied),
    }
}

/// A serde_json error as short, printable text: the endpoint's bytes may
/// appear in it, so control characters are escaped and the length bounded.
pub(crate) fn describe(e: &serde_json::Error) -> String {
    let text: String = e
        .to_string()
        .chars()
        .flat_map(char::escape_default)
        .collect();
    match text.char_indices().nth(160) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
