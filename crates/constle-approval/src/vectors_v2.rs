//! The version 2 specification's test vectors (§18), read from the
//! document itself and recomputed with this crate's own code, so the
//! document and the code cannot drift apart.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::{DidKey, SigningIdentity};
use constle_testkit::SpecVectors;
use jiff::Timestamp;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::DenialReason;
use crate::quorum::{
    Approver, Ballot, BallotRequest, Binding, DOMAIN, Progress, SignedFields, Tally, VerifiedVote,
    salted_digest, verify_vote,
};
use crate::request::RequestId;

const SPEC: &str = include_str!("../../../docs/spec/human-gates-webhook-v2.md");

type TestResult = Result<(), Box<dyn std::error::Error>>;
type Fallible<T> = Result<T, Box<dyn std::error::Error>>;

/// The three approvers of the vectors, in order.
const KEYS: [u8; 3] = [1, 2, 3];

/// The value of `name: value` in the spec's vector block.
fn vector(name: &str) -> Result<&'static str, String> {
    SpecVectors::read("docs/spec/human-gates-webhook-v2.md", SPEC)?.value(name)
}

fn key(secret_name: &str) -> Fallible<SigningIdentity> {
    let secret: [u8; 32] = hex::decode(vector(secret_name)?)?
        .try_into()
        .map_err(|_| format!("{secret_name} is not 32 bytes"))?;
    Ok(SigningIdentity::from_bytes(&secret))
}

fn approver_key(n: u8) -> Fallible<SigningIdentity> {
    key(&format!("approver_{n}_secret_key"))
}

fn approvers() -> Fallible<Vec<Approver>> {
    KEYS.iter()
        .map(|n| {
            Ok(Approver {
                did: vector(&format!("approver_{n}_did"))?.to_owned(),
                label: vector(&format!("approver_{n}_label"))?.to_owned(),
            })
        })
        .collect()
}

fn keys() -> Fallible<Vec<DidKey>> {
    approvers()?
        .iter()
        .map(|a| Ok(DidKey::parse(&a.did)?))
        .collect()
}

fn salt() -> Fallible<[u8; 32]> {
    Ok(hex::decode(vector("salt")?)?
        .try_into()
        .map_err(|_| "the salt is not 32 bytes")?)
}

fn binding() -> Fallible<Binding> {
    Ok(Binding {
        agent: vector("agent")?.to_owned(),
        agent_did: Some(vector("agent_did")?.to_owned()),
        server: vector("server")?.to_owned(),
        tool: vector("tool")?.to_owned(),
        policy_digest: vector("policy_digest")?.to_owned(),
        expires_at: vector("expires_at")?.parse()?,
    })
}

fn request() -> Fallible<BallotRequest> {
    Ok(BallotRequest::with(
        RequestId(vector("request_id")?.to_owned()),
        salt()?,
        binding()?,
        serde_json::from_str(vector("arguments")?)?,
        &approvers()?,
        vector("threshold")?.parse()?,
    )?)
}

fn now() -> Fallible<Timestamp> {
    Ok(vector("now")?.parse()?)
}

/// The signed members of `word` for the vectors' request.
fn fields(word: &str) -> Fallible<SignedFields> {
    Ok(SignedFields {
        request_id: vector("request_id")?.to_owned(),
        decision: word.to_owned(),
        subject_digest: vector("subject_digest")?.to_owned(),
        agent: vector("agent")?.to_owned(),
        agent_did: Some(vector("agent_did")?.to_owned()),
        server: vector("server")?.to_owned(),
        tool: vector("tool")?.to_owned(),
        policy_digest: vector("policy_digest")?.to_owned(),
        expires_at: vector("expires_at")?.to_owned(),
    })
}

fn counted(ballot: Ballot) -> Fallible<VerifiedVote> {
    match ballot {
        Ballot::Counted(vote) => Ok(vote),
        Ballot::Rejected(r) => Err(format!("rejected: {}", r.reason.audit_reason()).into()),
    }
}

#[test]
fn the_dids_are_the_secret_keys() -> TestResult {
    for n in KEYS {
        let did = vector(&format!("approver_{n}_did"))?;
        assert_eq!(approver_key(n)?.did().as_str(), did, "approver {n}");
    }
    assert_eq!(
        key("agent_secret_key")?.did().as_str(),
        vector("agent_did")?
    );
    Ok(())
}

#[test]
fn the_policy_digest_is_the_agentfile_s() -> TestResult {
    let agentfile: String = serde_json::from_str(vector("agentfile")?)?;
    let digest = format!(
        "sha256:{}",
        hex::encode(Sha256::digest(agentfile.as_bytes()))
    );
    assert_eq!(digest, vector("policy_digest")?);
    Ok(())
}

#[test]
fn the_salted_subject_and_the_post_body_match() -> TestResult {
    let request = request()?;
    let arguments: Value = serde_json::from_str(vector("arguments")?)?;
    let (server, tool, salt) = (vector("server")?, vector("tool")?, vector("salt")?);
    let subject = json!({"arguments": arguments, "salt": salt, "server": server, "tool": tool});
    let canonical = serde_json_canonicalizer::to_string(&subject)?;
    assert_eq!(canonical, vector("canonical_subject")?);
    let digest = format!(
        "sha256:{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    assert_eq!(digest, vector("subject_digest")?);
    let again = salted_digest(server, tool, &arguments, salt)?;
    assert_eq!(again.to_string(), digest);
    assert_eq!(request.subject_digest().to_string(), digest);
    assert_eq!(
        std::str::from_utf8(request.post_body())?,
        vector("post_body")?
    );
    Ok(())
}

#[test]
fn the_messages_and_signatures_match() -> TestResult {
    for (word, members) in [
        ("approved", "approved_members"),
        ("denied", "denied_members"),
    ] {
        let fields = fields(word)?;
        let canonical = serde_json_canonicalizer::to_string(&fields)?;
        assert_eq!(canonical, vector(members)?, "{word}");
        assert_eq!(
            fields.message(),
            [DOMAIN.as_bytes(), canonical.as_bytes()].concat()
        );
    }
    let approved = fields("approved")?.message();
    for n in KEYS {
        let signature = BASE64.encode(approver_key(n)?.sign(&approved).to_bytes());
        assert_eq!(
            signature,
            vector(&format!("approved_signature_{n}"))?,
            "key {n}"
        );
    }
    let denied = fields("denied")?.message();
    let signature = BASE64.encode(approver_key(3)?.sign(&denied).to_bytes());
    assert_eq!(signature, vector("denied_signature_3")?);
    Ok(())
}

#[test]
fn the_decision_bodies_are_the_signed_fields_bodies() -> TestResult {
    for (n, word, name) in [
        (1, "approved", "approved_body_1"),
        (3, "denied", "denied_body_3"),
    ] {
        let signature = vector(&format!("{word}_signature_{n}"))?;
        let did = vector(&format!("approver_{n}_did"))?;
        let body = fields(word)?.decision_body(did, signature);
        assert_eq!(std::str::from_utf8(&body)?, vector(name)?, "{name}");
    }
    Ok(())
}

/// Approver 1's body, its own again, approver 2's: waiting, counted once,
/// approved, exactly as a gate asking three endpoints would tally them.
#[test]
fn two_of_three_approve_and_a_repeat_counts_once() -> TestResult {
    let request = request()?;
    let (keys, now) = (keys()?, now()?);
    let body = |n: u8| -> Fallible<Vec<u8>> {
        let did = vector(&format!("approver_{n}_did"))?;
        let signature = vector(&format!("approved_signature_{n}"))?;
        Ok(fields("approved")?.decision_body(did, signature))
    };
    let one = counted(verify_vote(
        &request,
        &keys,
        now,
        vector("approved_body_1")?.as_bytes(),
    )?)?;
    assert_eq!(one.approver().as_str(), vector("approver_1_did")?);
    let mut tally = Tally::new(vector("threshold")?.parse()?);
    assert!(matches!(tally.add(one.clone()), Progress::Waiting(1)));
    assert!(matches!(tally.add(one), Progress::AlreadyCounted));
    let two = counted(verify_vote(&request, &keys, now, &body(2)?)?)?;
    let Progress::Approved(quorum) = tally.add(two) else {
        return Err("two distinct approvers of three did not approve".into());
    };
    let signers: Vec<&str> = quorum
        .votes()
        .iter()
        .map(|v| v.approver().as_str())
        .collect();
    assert_eq!(
        signers,
        [vector("approver_1_did")?, vector("approver_2_did")?]
    );
    assert!(!quorum.terminal());
    // Approver 3's approval verifies too (it would make a quorum with either).
    counted(verify_vote(&request, &keys, now, &body(3)?)?)?;
    Ok(())
}

#[test]
fn the_denial_denies_and_nothing_counts_at_or_after_the_expiry() -> TestResult {
    let request = request()?;
    let (keys, now) = (keys()?, now()?);
    let denied = vector("denied_body_3")?.as_bytes();
    let vote = counted(verify_vote(&request, &keys, now, denied)?)?;
    assert!(matches!(Tally::new(2).add(vote), Progress::Denied(_)));
    let expiry: Timestamp = vector("expires_at")?.parse()?;
    let approved = vector("approved_body_1")?.as_bytes();
    match verify_vote(&request, &keys, expiry, approved)? {
        Ballot::Rejected(r) => assert_eq!(r.reason, DenialReason::Expired),
        Ballot::Counted(_) => return Err("an approval at the expiry counted".into()),
    }
    // Under a set without approver 3, its signature counts for nothing.
    match verify_vote(&request, &keys[..2], now, denied)? {
        Ballot::Rejected(r) => assert_eq!(r.reason, DenialReason::ApproverUnknown),
        Ballot::Counted(_) => return Err("a key outside the set counted".into()),
    }
    Ok(())
}
