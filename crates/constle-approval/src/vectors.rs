//! The specification's test vectors (§13), read from the document itself
//! and recomputed, so the document and the code cannot drift apart.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::SigningIdentity;
use constle_testkit::SpecVectors;

use crate::request::{PendingRequest, RequestId};
use crate::{DenialReason, Verdict, canonical_subject, signed_message, verify_decision};

const SPEC: &str = include_str!("../../../docs/spec/human-gates-webhook.md");

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The value of `name: value` in the spec's vector block.
fn vector(name: &str) -> Result<&'static str, String> {
    SpecVectors::read("docs/spec/human-gates-webhook.md", SPEC)?.value(name)
}

fn request() -> Result<PendingRequest, Box<dyn std::error::Error>> {
    Ok(PendingRequest::with_id(
        RequestId(vector("request_id")?.to_owned()),
        vector("agent")?,
        vector("server")?,
        vector("tool")?,
        serde_json::from_str(vector("arguments")?)?,
        vector("expires_at")?.parse()?,
    )?)
}

fn approver() -> Result<SigningIdentity, Box<dyn std::error::Error>> {
    let secret: [u8; 32] = hex::decode(vector("approver_secret_key")?)?
        .try_into()
        .map_err(|_| "the secret key is not 32 bytes")?;
    Ok(SigningIdentity::from_bytes(&secret))
}

#[test]
fn approver_did_matches_the_secret_key() -> TestResult {
    assert_eq!(approver()?.did().as_str(), vector("approver_pubkey")?);
    Ok(())
}

#[test]
fn subject_and_post_body_match() -> TestResult {
    let request = request()?;
    let canonical = canonical_subject(request.server(), request.tool(), request.arguments())?;
    assert_eq!(canonical, vector("canonical_subject")?);
    assert_eq!(
        request.subject_digest().to_string(),
        vector("subject_digest")?
    );
    assert_eq!(
        std::str::from_utf8(request.post_body())?,
        vector("post_body")?
    );
    Ok(())
}

#[test]
fn messages_and_signatures_match() -> TestResult {
    let request = request()?;
    let approver = approver()?;
    for (word, message, signature) in [
        ("approved", "approved_message", "approved_signature"),
        ("denied", "denied_message", "denied_signature"),
    ] {
        let rebuilt = signed_message(
            request.request_id().as_str(),
            word,
            &request.subject_digest().to_string(),
        );
        assert_eq!(rebuilt, vector(message)?);
        let signed = approver.sign(rebuilt.as_bytes());
        assert_eq!(BASE64.encode(signed.to_bytes()), vector(signature)?);
    }
    Ok(())
}

#[test]
fn the_json_decision_in_the_spec_approves() -> TestResult {
    let vectors = SpecVectors::read("docs/spec/human-gates-webhook.md", SPEC)?;
    let [decision] = vectors.json_blocks() else {
        return Err("the spec's vectors section needs one decision example".into());
    };
    let decision = decision.trim_end_matches('\n');
    let approver = approver()?;
    match verify_decision(request()?, approver.did(), decision.as_bytes()) {
        Ok(Verdict::Approved(approval)) => {
            assert_eq!(approval.record().signature(), vector("approved_signature")?);
        }
        other => return Err(format!("expected an approval, got {other:?}").into()),
    }
    Ok(())
}

#[test]
fn the_denied_vector_denies_with_a_record() -> TestResult {
    let request = request()?;
    let body = serde_json::json!({
        "request_id": vector("request_id")?,
        "decision": "denied",
        "subject_digest": vector("subject_digest")?,
        "signature": vector("denied_signature")?,
    });
    let approver = approver()?;
    match verify_decision(request, approver.did(), body.to_string().as_bytes()) {
        Ok(Verdict::Denied(denial)) => {
            assert_eq!(denial.reason(), DenialReason::Denied);
            assert!(denial.record().is_some());
        }
        other => return Err(format!("expected a denial, got {other:?}").into()),
    }
    Ok(())
}
