//! The specification's test vectors (§9), read from the document itself and
//! recomputed, so the document and the code cannot drift apart.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::SigningIdentity;
use constle_testkit::SpecVectors;
use jiff::Timestamp;

use crate::envelope::sign_with_id;
use crate::{DOMAIN, Envelope, MAX_ENVELOPE_BYTES, MsgId, Refusal};

const SPEC: &str = include_str!("../../../docs/spec/a2a-envelope.md");

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The value of `name: value` in the spec's vector block.
fn vector(name: &str) -> Result<&'static str, String> {
    SpecVectors::read("docs/spec/a2a-envelope.md", SPEC)?.value(name)
}

fn key(name: &str) -> Result<SigningIdentity, Box<dyn std::error::Error>> {
    let secret: [u8; 32] = hex::decode(vector(name)?)?
        .try_into()
        .map_err(|_| "the secret key is not 32 bytes")?;
    Ok(SigningIdentity::from_bytes(&secret))
}

fn at(s: &str) -> Result<Timestamp, jiff::Error> {
    s.parse()
}

#[test]
fn dids_match_the_secret_keys() -> TestResult {
    assert_eq!(
        key("sender_secret_key")?.did().as_str(),
        vector("sender_did")?
    );
    assert_eq!(
        key("addressee_secret_key")?.did().as_str(),
        vector("addressee_did")?
    );
    Ok(())
}

#[test]
fn signing_reproduces_the_envelope() -> TestResult {
    let sender = key("sender_secret_key")?;
    let addressee = key("addressee_secret_key")?;
    let msg_id = MsgId::parse(vector("msg_id")?).ok_or("bad msg_id")?;
    let body = serde_json::from_str(vector("body")?)?;
    let envelope = sign_with_id(
        &sender,
        addressee.did(),
        body,
        at(vector("issued_at")?)?,
        msg_id,
    )?;
    assert_eq!(
        std::str::from_utf8(&envelope.to_bytes())?,
        vector("envelope")?
    );
    // The signature is over the domain line and the canonical unsigned form.
    let mut message = format!("{DOMAIN}\n").into_bytes();
    message.extend_from_slice(vector("canonical_unsigned")?.as_bytes());
    let sig = sender.sign(&message);
    assert_eq!(BASE64.encode(sig.to_bytes()), vector("sig")?);
    Ok(())
}

#[test]
fn the_envelope_verifies_inside_the_window_only() -> TestResult {
    let sender = key("sender_secret_key")?;
    let addressee = key("addressee_secret_key")?;
    let check = |now: &str| -> Result<(), Refusal> {
        let envelope = Envelope::from_slice(
            vector("envelope").map_err(Refusal::Malformed)?.as_bytes(),
            MAX_ENVELOPE_BYTES,
        )?;
        let now = at(now).map_err(|e| Refusal::Malformed(e.to_string()))?;
        envelope
            .verify(addressee.did(), |d| d == sender.did(), now)
            .map(drop)
    };
    check("2026-04-01T09:55:00Z")?;
    check("2026-04-01T10:05:00Z")?;
    assert!(matches!(
        check("2026-04-01T09:54:59Z"),
        Err(Refusal::FromTheFuture)
    ));
    assert!(matches!(
        check("2026-04-01T10:05:01Z"),
        Err(Refusal::TooOld)
    ));
    Ok(())
}

#[test]
fn reordered_verifies_and_edited_does_not() -> TestResult {
    let sender = key("sender_secret_key")?;
    let addressee = key("addressee_secret_key")?;
    let now = at(vector("issued_at")?)?;
    let wire: serde_json::Value = serde_json::from_str(vector("envelope")?)?;
    let verify = |text: &str| {
        Envelope::from_slice(text.as_bytes(), MAX_ENVELOPE_BYTES)
            .and_then(|e| e.verify(addressee.did(), |d| d == sender.did(), now))
    };
    // Pretty-printed, members in another order: the same JSON.
    let map = wire.as_object().ok_or("not an object")?;
    let mut reordered = String::from("{\n");
    let mut members: Vec<_> = map.iter().collect();
    members.reverse();
    for (i, (k, v)) in members.iter().enumerate() {
        let comma = if i + 1 < members.len() { "," } else { "" };
        reordered.push_str(&format!("  {}: {}{comma}\n", serde_json::to_string(k)?, v));
    }
    reordered.push('}');
    verify(&reordered)?;
    for (member, value) in [
        (
            "body",
            serde_json::json!({"text": "hello, bob", "n": 43, "amount": {"value": "12.50", "currency": "USD"}}),
        ),
        (
            "msg_id",
            serde_json::json!("0123456789abcdef0123456789abcdee"),
        ),
        ("issued_at", serde_json::json!("2026-04-01T10:00:01Z")),
    ] {
        let mut edited = wire.clone();
        edited[member] = value;
        assert!(
            matches!(verify(&edited.to_string()), Err(Refusal::BadSignature)),
            "{member}"
        );
    }
    Ok(())
}
