//! [`VersionFile`]: one `<N>.approvers.json`, parsed strictly but not
//! verified, and written back in one fixed layout.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::ed25519_dalek::Signature;
use constle_identity::{DidKey, SigningIdentity};
use serde_json::{Map, Value};

use crate::body::{Approver, Label, SetBody, parse_expiry, shown};
use crate::digest::SetDigest;
use crate::error::{ApproverSetError, Location};
use crate::{MAX_APPROVERS, MAX_FILE_BYTES, MAX_SIGNATURES, SET_TYPE};

/// One signature entry of a file, parsed but not checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureEntry {
    /// Who says they signed.
    pub did: DidKey,
    /// The signature.
    pub sig: Signature,
}

/// A version file, parsed strictly: nothing in it is to be trusted until
/// [`verify_chain`](crate::verify_chain) or
/// [`ApproverSets::load`](crate::ApproverSets::load) has checked it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionFile {
    body: SetBody,
    signatures: Vec<SignatureEntry>,
}

impl VersionFile {
    /// A version with no signatures yet.
    pub fn unsigned(body: SetBody) -> VersionFile {
        VersionFile {
            body,
            signatures: Vec::new(),
        }
    }

    /// Parse a file's bytes. Strict: at most [`MAX_FILE_BYTES`], one JSON
    /// object with exactly the members of the format (no duplicates, no
    /// others, right types), no trailing data; and every rule of
    /// [`SetBody::new`].
    ///
    /// # Errors
    ///
    /// [`ApproverSetError::TooLarge`] or [`ApproverSetError::Malformed`],
    /// naming `location` and the member at fault.
    pub fn parse(bytes: &[u8], location: &Location) -> Result<VersionFile, ApproverSetError> {
        let malformed = |what: String| ApproverSetError::Malformed {
            location: location.clone(),
            what,
        };
        let value =
            constle_json::parse_limited(bytes, MAX_FILE_BYTES).map_err(|err| match err {
                constle_json::LimitedError::TooLarge { len, max } => ApproverSetError::TooLarge {
                    location: location.clone(),
                    len: len as u64,
                    max,
                },
                other => malformed(format!("not strict JSON: {other}")),
            })?;
        let top = object(&value, "the file", &["signed", "signatures"]).map_err(malformed)?;
        let body = parse_body(&top["signed"]).map_err(malformed)?;
        let signatures = parse_signatures(&top["signatures"]).map_err(malformed)?;
        Ok(VersionFile { body, signatures })
    }

    /// The `signed` part.
    pub fn body(&self) -> &SetBody {
        &self.body
    }

    /// The signature entries, in file order.
    pub fn signatures(&self) -> &[SignatureEntry] {
        &self.signatures
    }

    /// The digest of the signed part.
    pub fn digest(&self) -> SetDigest {
        self.body.digest()
    }

    /// Sign with `identity`, replacing any signature of that key already
    /// in the file. Returns whether one was replaced.
    pub fn sign(&mut self, identity: &SigningIdentity) -> bool {
        let before = self.signatures.len();
        self.signatures.retain(|entry| &entry.did != identity.did());
        let replaced = self.signatures.len() != before;
        self.signatures.push(SignatureEntry {
            did: identity.did().clone(),
            sig: identity.sign(&self.body.signed_bytes()),
        });
        replaced
    }

    /// Add a signature entry as it is (for tests and tools that sign
    /// elsewhere); nothing is checked.
    pub fn push_signature(&mut self, entry: SignatureEntry) {
        self.signatures.push(entry);
    }

    /// The file's bytes, in a fixed layout (members in the order of the
    /// spec, two-space indentation, one approver or signature a line).
    pub fn to_bytes(&self) -> Vec<u8> {
        let s = |text: &str| Value::String(text.to_owned()).to_string();
        let mut out = String::with_capacity(1024);
        out.push_str("{\n  \"signed\": {\n");
        out.push_str(&format!("    \"type\": {},\n", s(SET_TYPE)));
        out.push_str(&format!("    \"version\": {},\n", self.body.version()));
        out.push_str(&format!(
            "    \"expires\": {},\n",
            s(&self.body.expires_text())
        ));
        out.push_str(&format!("    \"threshold\": {},\n", self.body.threshold()));
        out.push_str("    \"approvers\": [\n");
        let approvers: Vec<String> = self
            .body
            .approvers()
            .iter()
            .map(|a| {
                format!(
                    "      {{\"did\": {}, \"label\": {}}}",
                    s(a.did.as_str()),
                    s(a.label.as_str())
                )
            })
            .collect();
        out.push_str(&approvers.join(",\n"));
        out.push_str("\n    ]\n  },\n  \"signatures\": [");
        let signatures: Vec<String> = self
            .signatures
            .iter()
            .map(|e| {
                format!(
                    "\n    {{\"did\": {}, \"sig\": {}}}",
                    s(e.did.as_str()),
                    s(&BASE64.encode(e.sig.to_bytes()))
                )
            })
            .collect();
        out.push_str(&signatures.join(","));
        if !self.signatures.is_empty() {
            out.push_str("\n  ");
        }
        out.push_str("]\n}\n");
        out.into_bytes()
    }
}

/// `value` as an object with exactly the members `names`.
fn object<'a>(
    value: &'a Value,
    path: &str,
    names: &[&str],
) -> Result<&'a Map<String, Value>, String> {
    let Value::Object(map) = value else {
        return Err(format!(
            "{path} must be a JSON object, found {}",
            kind(value)
        ));
    };
    if let Some(unknown) = map.keys().find(|k| !names.contains(&k.as_str())) {
        return Err(format!(
            "{path} has an unknown member {}; it may hold only {}",
            shown(unknown),
            names.join(", ")
        ));
    }
    if let Some(missing) = names.iter().find(|n| !map.contains_key(**n)) {
        return Err(format!("{path} lacks the member `{missing}`"));
    }
    Ok(map)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn string<'a>(value: &'a Value, path: &str) -> Result<&'a str, String> {
    value
        .as_str()
        .ok_or_else(|| format!("{path} must be a string, found {}", kind(value)))
}

fn integer(value: &Value, path: &str) -> Result<u64, String> {
    match value {
        Value::Number(n) if n.is_u64() => n
            .as_u64()
            .ok_or_else(|| format!("{path} must be a whole number")),
        Value::Number(n) => Err(format!(
            "{path} must be a whole number from 1 written without fraction or exponent, found {n}"
        )),
        other => Err(format!("{path} must be a number, found {}", kind(other))),
    }
}

fn array<'a>(value: &'a Value, path: &str, max: usize) -> Result<&'a [Value], String> {
    let items = value
        .as_array()
        .ok_or_else(|| format!("{path} must be an array, found {}", kind(value)))?;
    if items.len() > max {
        return Err(format!(
            "{path} has {} entries, at most {max} are allowed",
            items.len()
        ));
    }
    Ok(items)
}

fn did(value: &Value, path: &str) -> Result<DidKey, String> {
    DidKey::parse(string(value, path)?).map_err(|err| format!("{path}: {err}"))
}

fn parse_body(value: &Value) -> Result<SetBody, String> {
    let m = object(
        value,
        "`signed`",
        &["type", "version", "expires", "threshold", "approvers"],
    )?;
    let kind = string(&m["type"], "`signed.type`")?;
    if kind != SET_TYPE {
        return Err(format!(
            "`signed.type` is {}, expected \"{SET_TYPE}\"",
            shown(kind)
        ));
    }
    let version = integer(&m["version"], "`signed.version`")?;
    let expires = parse_expiry(string(&m["expires"], "`signed.expires`")?)
        .map_err(|err| format!("`signed.expires`: {err}"))?;
    let threshold = integer(&m["threshold"], "`signed.threshold`")?;
    let threshold = usize::try_from(threshold).unwrap_or(usize::MAX);
    let mut approvers = Vec::new();
    for (i, entry) in array(&m["approvers"], "`signed.approvers`", MAX_APPROVERS)?
        .iter()
        .enumerate()
    {
        let path = format!("`signed.approvers[{i}]`");
        let a = object(entry, &path, &["did", "label"])?;
        let did = did(&a["did"], &format!("{path}.did"))?;
        let label = Label::new(string(&a["label"], &format!("{path}.label"))?)
            .map_err(|err| format!("{path}.label: {err}"))?;
        approvers.push(Approver { did, label });
    }
    SetBody::new(version, expires, threshold, approvers)
}

fn parse_signatures(value: &Value) -> Result<Vec<SignatureEntry>, String> {
    let mut out = Vec::new();
    for (i, entry) in array(value, "`signatures`", MAX_SIGNATURES)?
        .iter()
        .enumerate()
    {
        let path = format!("`signatures[{i}]`");
        let e = object(entry, &path, &["did", "sig"])?;
        let did = did(&e["did"], &format!("{path}.did"))?;
        let text = string(&e["sig"], &format!("{path}.sig"))?;
        let bytes = BASE64
            .decode(text)
            .map_err(|_| format!("{path}.sig is not standard base64 (RFC 4648 §4, padded)"))?;
        let bytes: [u8; 64] = bytes.try_into().map_err(|b: Vec<u8>| {
            format!(
                "{path}.sig is {} bytes, an Ed25519 signature is 64",
                b.len()
            )
        })?;
        out.push(SignatureEntry {
            did,
            sig: Signature::from_bytes(&bytes),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(n: u8) -> SigningIdentity {
        SigningIdentity::from_bytes(&[n; 32])
    }

    fn file() -> VersionFile {
        let approvers = (1..=3)
            .map(|n| Approver {
                did: identity(n).did().clone(),
                label: Label::new(&format!("a{n}")).unwrap_or_else(|_| unreachable!()),
            })
            .collect();
        let body = SetBody::new(
            1,
            "2030-01-01T00:00:00Z".parse().unwrap_or_default(),
            2,
            approvers,
        );
        VersionFile::unsigned(body.unwrap_or_else(|e| panic!("{e}")))
    }

    fn parse(bytes: &[u8]) -> Result<VersionFile, String> {
        VersionFile::parse(bytes, &Location::Given(0)).map_err(|e| e.to_string())
    }

    #[test]
    fn round_trips_signed_and_unsigned() {
        let mut f = file();
        assert_eq!(parse(&f.to_bytes()).as_ref(), Ok(&f));
        assert!(!f.sign(&identity(1)));
        assert!(!f.sign(&identity(2)));
        assert!(f.sign(&identity(1)));
        assert_eq!(f.signatures().len(), 2);
        assert_eq!(parse(&f.to_bytes()).as_ref(), Ok(&f));
    }

    fn edited(from: &str, to: &str) -> Result<VersionFile, String> {
        let mut f = file();
        f.sign(&identity(1));
        let text = String::from_utf8(f.to_bytes()).unwrap_or_default();
        assert!(text.contains(from), "{text} lacks {from}");
        parse(text.replacen(from, to, 1).as_bytes())
    }

    #[test]
    fn refuses_what_is_not_exactly_the_format() {
        for (from, to, says) in [
            (
                "\"threshold\": 2",
                "\"threshold\": 2, \"threshold\": 2",
                "duplicate key",
            ),
            (
                "\"threshold\": 2",
                "\"threshold\": 2, \"extra\": 1",
                "unknown member",
            ),
            ("\"threshold\": 2", "\"threshold\": 2.0", "whole number"),
            (
                "\"threshold\": 2",
                "\"threshold\": \"2\"",
                "must be a number",
            ),
            (
                "\"threshold\": 2",
                "\"threshold\": 4",
                "threshold 4 with 3 approvers",
            ),
            ("\"threshold\": 2", "\"threshold\": 0", "threshold 0"),
            ("\"version\": 1", "\"version\": 0", "numbered from 1"),
            ("\"version\": 1", "\"version\": -1", "whole number"),
            ("\"version\": 1", "\"version\": 1e0", "whole number"),
            (
                "\"constle/approver-set\"",
                "\"constle/approver-set/v2\"",
                "signed.type",
            ),
            (
                "2030-01-01T00:00:00Z",
                "2030-01-01T00:00:00+00:00",
                "signed.expires",
            ),
            (
                "\"label\": \"a2\"",
                "\"label\": \"a1\"",
                "given to two keys",
            ),
            ("\"label\": \"a2\"", "\"label\": \"\"", "must not be empty"),
            ("\"label\": \"a2\"", "\"label\": \"a\\u001b\"", "control"),
            ("\"label\": \"a2\"", "\"name\": \"a2\"", "unknown member"),
            (
                "\"signatures\": [",
                "\"signatures\": 1, \"x\": [",
                "unknown member",
            ),
            ("\"sig\": \"", "\"sig\": \"AAAA", "64"),
            ("\"sig\": \"", "\"sig\": \"!", "base64"),
            ("{\n  \"signed\"", "[{\n  \"signed\"", "JSON"),
        ] {
            match edited(from, to) {
                Ok(_) => panic!("accepted {from} -> {to}"),
                Err(err) => assert!(err.contains(says), "{from} -> {to}: {err}"),
            }
        }
        let mut f = file().to_bytes();
        f.extend(b"{}");
        assert!(parse(&f).unwrap_err().contains("trailing"));
        let f = file().to_bytes();
        let two = String::from_utf8(f).unwrap_or_default().replacen(
            identity(2).did().as_str(),
            identity(1).did().as_str(),
            1,
        );
        assert!(parse(two.as_bytes()).unwrap_err().contains("listed twice"));
    }

    #[test]
    fn refuses_large_files_unparsed() {
        let big = vec![b' '; MAX_FILE_BYTES + 1];
        assert!(parse(&big).unwrap_err().contains("more than"));
    }
}
