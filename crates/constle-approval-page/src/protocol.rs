//! What the key signs, and the decision the gate fetches, for each version
//! of the protocol: version 1 (`docs/spec/human-gates-webhook.md` §7) for a
//! request without `version`, version 2 (`human-gates-webhook-v2.md` §8)
//! for one with `"version": 2`. Both sign the gate's strings verbatim.

use constle_approval::quorum::SignedFields;
use constle_approval::signed_message;

use crate::request::{GateRequest, Version2};
use crate::store::StoredRequest;

/// The bytes the key signs to say `word` (`approved` or `denied`) about
/// `request`.
pub fn message(request: &GateRequest, word: &str) -> Vec<u8> {
    match &request.v2 {
        None => signed_message(&request.request_id, word, &request.subject_digest).into_bytes(),
        Some(v2) => signed_fields(request, v2, word).message(),
    }
}

/// The body of `GET /gate/<id>/decision` for a decided request; `None`
/// while it is undecided (or, for version 2, if no signing key was
/// recorded, which the database does not allow: nothing is served then).
pub fn decision_body(stored: &StoredRequest) -> Option<Vec<u8>> {
    let word = stored.decision.as_deref()?;
    let signature = stored.signature.as_deref()?;
    let request = &stored.request;
    match &request.v2 {
        None => Some(
            serde_json::json!({
                "request_id": request.request_id,
                "decision": word,
                "subject_digest": request.subject_digest,
                "signature": signature,
            })
            .to_string()
            .into_bytes(),
        ),
        Some(v2) => {
            let key = stored.signed_by.as_deref()?;
            Some(signed_fields(request, v2, word).decision_body(key, signature))
        }
    }
}

/// The nine members a version 2 decision signs, from the stored request.
fn signed_fields(request: &GateRequest, v2: &Version2, word: &str) -> SignedFields {
    SignedFields {
        request_id: request.request_id.clone(),
        decision: word.to_owned(),
        subject_digest: request.subject_digest.clone(),
        agent: request.agent.clone(),
        agent_did: v2.agent_did.clone(),
        server: request.server.clone(),
        tool: request.tool.clone(),
        policy_digest: v2.policy_digest.clone(),
        expires_at: request.expires_at.clone(),
    }
}
