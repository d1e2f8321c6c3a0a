//! The envelope: its wire form, signing, parsing and verification.
//!
//! An [`Envelope`] is only ever made by [`sign_envelope`] (which signs it)
//! or [`Envelope::from_slice`] (which parses one off the wire, strictly, but
//! trusts nothing in it yet). A [`VerifiedEnvelope`] is only ever made by
//! [`Envelope::verify`]: the sender is a declared peer, the signature is
//! valid under `verify_strict`, the envelope is addressed to the verifier and
//! was issued within [`CLOCK_SKEW`] of the verifier's clock. Whether its
//! `msg_id` was seen before is the listener's question (see
//! [`crate::ReplayStore`]).

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::ed25519_dalek::Signature;
use constle_identity::{DidKey, SigningIdentity};
use jiff::Timestamp;
use serde_json::{Map, Value};

use crate::Refusal;

/// The protocol name and version. It is the envelope's `v` field and the
/// first line of every signed message, so a signature made for anything
/// else (another protocol, a later version) never verifies as an envelope.
pub const DOMAIN: &str = "constle-a2a-v1";

/// How far an envelope's `issued_at` may be from the listener's clock, in
/// either direction.
pub const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// The largest envelope, in bytes, a listener accepts by default and
/// [`sign_envelope`] makes.
pub const MAX_ENVELOPE_BYTES: usize = 256 * 1024;

/// The largest integer magnitude a body may hold: 2⁵³ − 1. RFC 8785 writes
/// numbers as IEEE doubles, so two larger integers could share one canonical
/// form, and one signature. Put bigger numbers in strings.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The fields of an envelope, in canonical (sorted) order.
const FIELDS: [&str; 7] = ["body", "from", "issued_at", "msg_id", "sig", "to", "v"];

/// A message id: 128 random bits as 32 lowercase hex digits.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgId(String);

impl MsgId {
    /// A fresh random id.
    ///
    /// # Errors
    ///
    /// [`EnvelopeError::Random`] if the operating system gives no random bytes.
    pub fn random() -> Result<MsgId, EnvelopeError> {
        let mut bits = [0u8; 16];
        getrandom::fill(&mut bits).map_err(|_| EnvelopeError::Random)?;
        Ok(MsgId(hex::encode(bits)))
    }

    /// Parses an id: exactly 32 lowercase hex digits.
    pub fn parse(text: &str) -> Option<MsgId> {
        (text.len() == 32 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| MsgId(text.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for MsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MsgId({})", self.0)
    }
}

impl serde::Serialize for MsgId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// Why an envelope could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// The operating system gave no random bytes for the message id.
    #[error("no random bytes for a message id (getrandom failed)")]
    Random,
    /// The body holds an integer beyond ±(2⁵³ − 1).
    #[error(
        "the body holds the integer {0}, beyond ±(2^53 - 1), which canonical JSON (RFC 8785) cannot sign exactly; send it as a string"
    )]
    UnsafeInteger(String),
    /// The envelope would be larger than [`MAX_ENVELOPE_BYTES`].
    #[error("the envelope would be {len} bytes, more than the limit of {max}")]
    TooLarge {
        /// Its size in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The body could not be canonicalized.
    #[error("the body cannot be written as canonical JSON: {0}")]
    Canonical(String),
}

/// A signed envelope, as sent on the wire. Not yet trusted when parsed.
#[derive(Clone)]
pub struct Envelope {
    msg_id: MsgId,
    from: DidKey,
    to: DidKey,
    issued_at: Timestamp,
    body: Value,
    sig: Signature,
}

impl fmt::Debug for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Envelope")
            .field("msg_id", &self.msg_id)
            .field("from", &self.from)
            .field("to", &self.to)
            .field("issued_at", &self.issued_at)
            .finish_non_exhaustive()
    }
}

/// `issued_at` as written on the wire: `YYYY-MM-DDTHH:MM:SSZ`, UTC, whole
/// seconds.
pub(crate) fn format_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn parse_time(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    let shape = b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        });
    let ts: Timestamp = text.parse().ok().filter(|_| shape)?;
    // One spelling: `…T23:59:60Z` and the like would print differently.
    (format_time(ts) == text).then_some(ts)
}

/// The first integer in `value` beyond ±[`MAX_SAFE_INTEGER`], if any.
fn unsafe_integer(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => {
            let safe = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u <= MAX_SAFE_INTEGER,
                (None, Some(i)) => i.unsigned_abs() <= MAX_SAFE_INTEGER,
                (None, None) => true,
            };
            (!safe).then(|| n.to_string())
        }
        Value::Array(items) => items.iter().find_map(unsafe_integer),
        Value::Object(map) => map.values().find_map(unsafe_integer),
        _ => None,
    }
}

/// The bytes signed for an envelope: [`DOMAIN`], a newline, and the RFC 8785
/// canonical JSON of the envelope without `sig`.
fn signed_message(
    msg_id: &MsgId,
    from: &DidKey,
    to: &DidKey,
    issued_at: Timestamp,
    body: &Value,
) -> Result<Vec<u8>, serde_json::Error> {
    let unsigned = serde_json::json!({
        "body": body,
        "from": from.as_str(),
        "issued_at": format_time(issued_at),
        "msg_id": msg_id.as_str(),
        "to": to.as_str(),
        "v": DOMAIN,
    });
    let mut message = Vec::with_capacity(256);
    message.extend_from_slice(DOMAIN.as_bytes());
    message.push(b'\n');
    message.extend(serde_json_canonicalizer::to_vec(&unsigned)?);
    Ok(message)
}

/// Signs `body` from `identity` to `to`, issued at `now` (cut to whole
/// seconds), with a fresh random `msg_id`. The host signs for its agent: the
/// key never enters the sandbox.
///
/// # Errors
///
/// [`EnvelopeError`] if the body holds an integer beyond ±(2⁵³ − 1), the
/// envelope would exceed [`MAX_ENVELOPE_BYTES`], or there are no random bytes.
pub fn sign_envelope(
    identity: &SigningIdentity,
    to: &DidKey,
    body: Value,
    now: Timestamp,
) -> Result<Envelope, EnvelopeError> {
    sign_with_id(identity, to, body, now, MsgId::random()?)
}

/// [`sign_envelope`] with a given id: for test vectors.
pub(crate) fn sign_with_id(
    identity: &SigningIdentity,
    to: &DidKey,
    body: Value,
    now: Timestamp,
    msg_id: MsgId,
) -> Result<Envelope, EnvelopeError> {
    if let Some(n) = unsafe_integer(&body) {
        return Err(EnvelopeError::UnsafeInteger(n));
    }
    let issued_at = Timestamp::from_second(now.as_second())
        .map_err(|err| EnvelopeError::Canonical(err.to_string()))?;
    let message = signed_message(&msg_id, identity.did(), to, issued_at, &body)
        .map_err(|err| EnvelopeError::Canonical(err.to_string()))?;
    let sig = identity.sign(&message);
    let envelope = Envelope {
        msg_id,
        from: identity.did().clone(),
        to: to.clone(),
        issued_at,
        body,
        sig,
    };
    let len = envelope.to_bytes().len();
    if len > MAX_ENVELOPE_BYTES {
        return Err(EnvelopeError::TooLarge {
            len,
            max: MAX_ENVELOPE_BYTES,
        });
    }
    Ok(envelope)
}

fn malformed(reason: impl Into<String>) -> Refusal {
    Refusal::Malformed(reason.into())
}

impl Envelope {
    /// The envelope's id.
    pub fn msg_id(&self) -> &MsgId {
        &self.msg_id
    }

    /// The sender, as claimed (checked only by [`Envelope::verify`]).
    pub fn from(&self) -> &DidKey {
        &self.from
    }

    /// The addressee.
    pub fn to(&self) -> &DidKey {
        &self.to
    }

    /// When the sender says it was issued.
    pub fn issued_at(&self) -> Timestamp {
        self.issued_at
    }

    /// The wire form: the RFC 8785 canonical JSON of all seven fields.
    pub fn to_bytes(&self) -> Vec<u8> {
        let value = serde_json::json!({
            "body": self.body,
            "from": self.from.as_str(),
            "issued_at": format_time(self.issued_at),
            "msg_id": self.msg_id.as_str(),
            "sig": BASE64.encode(self.sig.to_bytes()),
            "to": self.to.as_str(),
            "v": DOMAIN,
        });
        // Canonicalizing a value built from strings and a body that was
        // canonicalized when it was signed or parsed cannot fail; fall back
        // to plain JSON rather than panic.
        serde_json_canonicalizer::to_vec(&value).unwrap_or_else(|_| value.to_string().into_bytes())
    }

    /// Parses an envelope off the wire, refusing anything but exactly the
    /// seven fields in their exact forms. Strict JSON ([`constle_json`]):
    /// duplicate keys, trailing data and deep nesting are refused.
    ///
    /// # Errors
    ///
    /// [`Refusal::TooLarge`] beyond `max_bytes`, [`Refusal::Malformed`]
    /// otherwise.
    pub fn from_slice(bytes: &[u8], max_bytes: usize) -> Result<Envelope, Refusal> {
        let value = constle_json::parse_limited(bytes, max_bytes).map_err(|err| match err {
            constle_json::LimitedError::TooLarge { len, max } => Refusal::TooLarge { len, max },
            other => malformed(format!("not strict JSON: {other}")),
        })?;
        let Value::Object(mut map) = value else {
            return Err(malformed("the envelope is not a JSON object"));
        };
        if let Some(extra) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(malformed(format!(
                "unknown field {}",
                shorten(extra.as_str())
            )));
        }
        let text = |map: &mut Map<String, Value>, name: &str| match map.remove(name) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(malformed(format!("`{name}` is not a string"))),
            None => Err(malformed(format!("`{name}` is missing"))),
        };
        let v = text(&mut map, "v")?;
        if v != DOMAIN {
            return Err(malformed(format!(
                "`v` is {}, expected {DOMAIN:?}",
                shorten(&v)
            )));
        }
        let msg_id = MsgId::parse(&text(&mut map, "msg_id")?)
            .ok_or_else(|| malformed("`msg_id` is not 32 lowercase hex digits"))?;
        let did = |map: &mut Map<String, Value>, name: &str| {
            let s = text(map, name)?;
            DidKey::parse(&s).map_err(|err| malformed(format!("`{name}`: {err}")))
        };
        let from = did(&mut map, "from")?;
        let to = did(&mut map, "to")?;
        let issued_at = parse_time(&text(&mut map, "issued_at")?)
            .ok_or_else(|| malformed("`issued_at` is not a UTC time YYYY-MM-DDTHH:MM:SSZ"))?;
        let sig = text(&mut map, "sig")?;
        let sig: [u8; 64] = BASE64
            .decode(sig.as_bytes())
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| malformed("`sig` is not 64 bytes in padded standard base64"))?;
        let body = map
            .remove("body")
            .ok_or_else(|| malformed("`body` is missing"))?;
        if let Some(n) = unsafe_integer(&body) {
            return Err(malformed(format!(
                "the body holds the integer {}, beyond ±(2^53 - 1)",
                shorten(&n)
            )));
        }
        Ok(Envelope {
            msg_id,
            from,
            to,
            issued_at,
            body,
            sig: Signature::from_bytes(&sig),
        })
    }

    /// Checks, in this order: the sender is a declared peer (`is_peer`), the
    /// signature is the sender's (`verify_strict` over [`DOMAIN`] and the
    /// canonical form), the envelope is addressed to `me`, and `issued_at`
    /// is within [`CLOCK_SKEW`] of `now`. The replay check is not made here.
    ///
    /// # Errors
    ///
    /// The first [`Refusal`] that applies.
    pub fn verify(
        self,
        me: &DidKey,
        is_peer: impl Fn(&DidKey) -> bool,
        now: Timestamp,
    ) -> Result<VerifiedEnvelope, Refusal> {
        if !is_peer(&self.from) {
            return Err(Refusal::UnknownSender);
        }
        let message = signed_message(
            &self.msg_id,
            &self.from,
            &self.to,
            self.issued_at,
            &self.body,
        )
        .map_err(|err| malformed(format!("the body cannot be canonicalized: {err}")))?;
        self.from
            .verify(&message, &self.sig)
            .map_err(|_| Refusal::BadSignature)?;
        if &self.to != me {
            return Err(Refusal::WrongAddressee);
        }
        let skew = jiff::SignedDuration::try_from(CLOCK_SKEW).unwrap_or(jiff::SignedDuration::ZERO);
        let age = now.duration_since(self.issued_at);
        if age > skew {
            return Err(Refusal::TooOld);
        }
        if age < -skew {
            return Err(Refusal::FromTheFuture);
        }
        Ok(VerifiedEnvelope(self))
    }
}

/// An envelope whose sender, signature, addressee and time have been
/// checked by [`Envelope::verify`]; the only way to get one.
#[derive(Debug, Clone)]
pub struct VerifiedEnvelope(Envelope);

impl VerifiedEnvelope {
    /// The envelope's id.
    pub fn msg_id(&self) -> &MsgId {
        &self.0.msg_id
    }

    /// The sender (a declared peer, whose key signed this).
    pub fn from(&self) -> &DidKey {
        &self.0.from
    }

    /// The addressee (the verifier).
    pub fn to(&self) -> &DidKey {
        &self.0.to
    }

    /// When the sender issued it.
    pub fn issued_at(&self) -> Timestamp {
        self.0.issued_at
    }

    /// The body.
    pub fn body(&self) -> &Value {
        &self.0.body
    }

    /// The envelope as it was signed.
    pub fn envelope(&self) -> &Envelope {
        &self.0
    }

    /// Until when its id must be remembered: `issued_at` + [`CLOCK_SKEW`] +
    /// [`crate::REPLAY_MARGIN`]. A replay after that is refused as too old.
    pub fn remember_until(&self) -> Timestamp {
        let keep = jiff::SignedDuration::try_from(CLOCK_SKEW + crate::REPLAY_MARGIN)
            .unwrap_or(jiff::SignedDuration::MAX);
        self.0.issued_at.checked_add(keep).unwrap_or(Timestamp::MAX)
    }
}

/// Shortens untrusted text for a message.
pub(crate) fn shorten(s: &str) -> String {
    const MAX: usize = 64;
    let cut: String = s.chars().take(MAX).flat_map(char::escape_default).collect();
    if s.chars().count() > MAX {
        format!("\"{cut}…\"")
    } else {
        format!("\"{cut}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (SigningIdentity, SigningIdentity) {
        (
            SigningIdentity::from_bytes(&[1; 32]),
            SigningIdentity::from_bytes(&[2; 32]),
        )
    }

    #[test]
    fn sign_parse_verify_round_trip() {
        let (alice, bob) = ids();
        let now: Timestamp = "2026-04-01T10:00:00.7Z".parse().unwrap();
        let env =
            sign_envelope(&alice, bob.did(), serde_json::json!({"hi": [1, 2.5]}), now).unwrap();
        let bytes = env.to_bytes();
        let parsed = Envelope::from_slice(&bytes, MAX_ENVELOPE_BYTES).unwrap();
        assert_eq!(parsed.to_bytes(), bytes);
        let ok = parsed.verify(bob.did(), |d| d == alice.did(), now).unwrap();
        assert_eq!(ok.body(), &serde_json::json!({"hi": [1, 2.5]}));
        assert_eq!(format_time(ok.issued_at()), "2026-04-01T10:00:00Z");
    }

    #[test]
    fn times_have_one_spelling() {
        assert!(parse_time("2026-04-01T10:00:00Z").is_some());
        for bad in [
            "2026-04-01T10:00:00.0Z",
            "2026-04-01T10:00:00+00:00",
            "2026-04-01t10:00:00Z",
            "2026-04-01 10:00:00Z",
            "2026-04-01T10:00:60Z",
            "2026-02-30T10:00:00Z",
        ] {
            assert!(parse_time(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn big_integers_are_refused() {
        let (alice, bob) = ids();
        let now = Timestamp::now();
        let err = sign_envelope(&alice, bob.did(), serde_json::json!({"n": 1u64 << 53}), now);
        assert!(matches!(err, Err(EnvelopeError::UnsafeInteger(_))));
        assert!(
            sign_envelope(
                &alice,
                bob.did(),
                serde_json::json!([MAX_SAFE_INTEGER]),
                now
            )
            .is_ok()
        );
        assert!(
            sign_envelope(
                &alice,
                bob.did(),
                serde_json::json!([-(MAX_SAFE_INTEGER as i64)]),
                now
            )
            .is_ok()
        );
    }

    #[test]
    fn msg_ids_are_strict() {
        assert!(MsgId::parse(&"a".repeat(32)).is_some());
        assert!(MsgId::parse(&"A".repeat(32)).is_none());
        assert!(MsgId::parse(&"a".repeat(31)).is_none());
        assert_ne!(MsgId::random().unwrap(), MsgId::random().unwrap());
    }
}
