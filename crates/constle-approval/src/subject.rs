//! The subject of a gated call and its digest.

use std::fmt;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// The largest integer magnitude that an IEEE 754 double holds exactly
/// (2^53 − 1), the I-JSON limit (RFC 7493 §2.2).
const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

/// `sha256:` and 64 lowercase hex digits: the digest of one gated call.
///
/// Computed by [`subject_digest`]; printed and compared as that string.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SubjectDigest(pub(crate) [u8; 32]);

impl SubjectDigest {
    /// The 32 bytes of the SHA-256 digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for SubjectDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

impl fmt::Debug for SubjectDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SubjectDigest({self})")
    }
}

/// Why a call has no subject digest. The gate must refuse such a call: it
/// cannot be approved, because an approval could not pin it exactly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubjectError {
    /// An integer too large for the canonical form to keep exactly.
    #[error(
        "the arguments hold an integer outside ±(2^53−1); RFC 8785 would round it, so two \
         different calls could share one digest: send large numbers as strings"
    )]
    NumberOutOfRange,
    /// The canonicaliser refused the value.
    #[error("the call cannot be put in RFC 8785 canonical form")]
    Canonical,
}

/// The digest that a webhook decision pins: SHA-256 over the UTF-8 bytes of
/// the RFC 8785 (JCS) canonical form of the JSON object
/// `{"arguments": arguments, "server": server, "tool": tool}`.
///
/// `server` is the declared server id, `tool` the exact `params.name` and
/// `arguments` the `params.arguments` of the `tools/call` (JSON `null` when
/// the call has none). The digest is unsalted (see the specification's
/// limitations).
///
/// # Errors
///
/// [`SubjectError::NumberOutOfRange`] if `arguments` holds an integer whose
/// magnitude exceeds 2^53 − 1: JCS writes numbers as doubles, so it would
/// give two different calls the same digest.
pub fn subject_digest(
    server: &str,
    tool: &str,
    arguments: &Value,
) -> Result<SubjectDigest, SubjectError> {
    check_numbers(arguments)?;
    let subject = json!({ "server": server, "tool": tool, "arguments": arguments });
    let canonical =
        serde_json_canonicalizer::to_vec(&subject).map_err(|_| SubjectError::Canonical)?;
    Ok(SubjectDigest(Sha256::digest(&canonical).into()))
}

/// The canonical bytes that [`subject_digest`] hashes, for test vectors and
/// for endpoints that want to show what they are asked to approve.
///
/// # Errors
///
/// As [`subject_digest`].
pub fn canonical_subject(
    server: &str,
    tool: &str,
    arguments: &Value,
) -> Result<String, SubjectError> {
    check_numbers(arguments)?;
    let subject = json!({ "server": server, "tool": tool, "arguments": arguments });
    serde_json_canonicalizer::to_string(&subject).map_err(|_| SubjectError::Canonical)
}

/// Refuse integers that JCS cannot write exactly. Iterative, so a deeply
/// nested value cannot exhaust the stack here.
pub(crate) fn check_numbers(value: &Value) -> Result<(), SubjectError> {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Number(n) => {
                let exact = match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => u <= MAX_EXACT_INTEGER,
                    (None, Some(i)) => i.unsigned_abs() <= MAX_EXACT_INTEGER,
                    // A float is already a double: JCS writes it exactly.
                    (None, None) => true,
                };
                if !exact {
                    return Err(SubjectError::NumberOutOfRange);
                }
            }
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            Value::Null | Value::Bool(_) | Value::String(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_prefixed_lowercase_hex() -> Result<(), SubjectError> {
        let d = subject_digest("s", "t", &json!({}))?;
        let text = d.to_string();
        assert!(text.starts_with("sha256:"));
        assert_eq!(text.len(), 7 + 64);
        assert!(
            text[7..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        Ok(())
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() -> Result<(), Box<dyn std::error::Error>> {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": [true, null]}"#)?;
        let b: Value = serde_json::from_str(r#"{"a":[true,null],"b":1.0}"#)?;
        assert_eq!(subject_digest("s", "t", &a)?, subject_digest("s", "t", &b)?);
        Ok(())
    }

    #[test]
    fn every_part_is_pinned() -> Result<(), SubjectError> {
        let args = json!({"invoice_id": "INV-0042"});
        let base = subject_digest("accounting", "pay_invoice", &args)?;
        assert_ne!(base, subject_digest("accountin", "gpay_invoice", &args)?);
        assert_ne!(base, subject_digest("other", "pay_invoice", &args)?);
        assert_ne!(base, subject_digest("accounting", "Pay_invoice", &args)?);
        assert_ne!(
            base,
            subject_digest(
                "accounting",
                "pay_invoice",
                &json!({"invoice_id": "INV-0043"})
            )?
        );
        Ok(())
    }

    #[test]
    fn integers_that_would_round_are_refused() -> Result<(), SubjectError> {
        subject_digest("s", "t", &json!({"n": MAX_EXACT_INTEGER}))?;
        subject_digest("s", "t", &json!({"n": -(MAX_EXACT_INTEGER as i64)}))?;
        for n in [
            json!(MAX_EXACT_INTEGER + 1),
            json!(u64::MAX),
            json!(i64::MIN),
        ] {
            assert!(matches!(
                subject_digest("s", "t", &json!({"deep": [[n]]})),
                Err(SubjectError::NumberOutOfRange)
            ));
        }
        Ok(())
    }
}
