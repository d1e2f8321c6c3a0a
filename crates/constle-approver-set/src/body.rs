//! The `signed` part of a version: [`SetBody`] (number, expiry, threshold,
//! approvers), which can only hold a set that keeps every rule, and the
//! bytes its signatures cover.

use std::collections::HashSet;
use std::fmt;

use constle_identity::DidKey;
use jiff::Timestamp;
use serde_json::{Map, Value};

use crate::digest::SetDigest;
use crate::{DOMAIN_SEPARATOR, MAX_APPROVERS, MAX_LABEL_BYTES, SET_TYPE};

/// The largest version number: integers beyond it are not exact in the
/// IEEE doubles RFC 8785 reads numbers as.
pub const MAX_VERSION: u64 = (1 << 53) - 1;

/// A human name for an approver key, as shown in prompts and logs:
/// 1 to [`MAX_LABEL_BYTES`] bytes, no control, bidirectional or invisible
/// characters, no leading or trailing whitespace.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Label(String);

impl Label {
    /// Check `text` as a label.
    ///
    /// # Errors
    ///
    /// A sentence saying what is wrong with it.
    pub fn new(text: &str) -> Result<Label, String> {
        if text.is_empty() {
            return Err("a label must not be empty".to_owned());
        }
        if text.len() > MAX_LABEL_BYTES {
            return Err(format!(
                "label {} is {} bytes, at most {MAX_LABEL_BYTES} are allowed",
                shown(text),
                text.len()
            ));
        }
        if let Some(c) = text.chars().find(|&c| constle_escape::is_unsafe(c)) {
            return Err(format!(
                "label {} holds {}, a control or invisible character; labels are shown to people and must print as they read",
                shown(text),
                c.escape_unicode()
            ));
        }
        if text.trim() != text {
            return Err(format!(
                "label {} has leading or trailing whitespace",
                shown(text)
            ));
        }
        Ok(Label(text.to_owned()))
    }

    /// The label.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Label({:?})", self.0)
    }
}

/// Text from a file, made safe and short for a message.
pub(crate) fn shown(text: &str) -> String {
    let short: String = text.chars().take(80).collect();
    let more = if short.len() < text.len() { "…" } else { "" };
    format!("\"{}{more}\"", constle_escape::escape(&short))
}

/// One approver: a key and the label people know it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Approver {
    /// The key, an Ed25519 did:key.
    pub did: DidKey,
    /// Its label.
    pub label: Label,
}

/// The `signed` object of a version, valid by construction: version
/// 1 ≤ N ≤ [`MAX_VERSION`], expiry in whole seconds (UTC), 1 to
/// [`MAX_APPROVERS`] approvers with distinct keys and distinct labels, and
/// 1 ≤ threshold ≤ the number of approvers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetBody {
    version: u64,
    expires: Timestamp,
    threshold: usize,
    approvers: Vec<Approver>,
}

impl SetBody {
    /// Check and hold a version's contents.
    ///
    /// # Errors
    ///
    /// A sentence naming the first rule broken.
    pub fn new(
        version: u64,
        expires: Timestamp,
        threshold: usize,
        approvers: Vec<Approver>,
    ) -> Result<SetBody, String> {
        if version == 0 || version > MAX_VERSION {
            return Err(format!(
                "version {version}: versions are numbered from 1 (at most {MAX_VERSION})"
            ));
        }
        if expires.subsec_nanosecond() != 0 {
            return Err(format!(
                "expiry {expires} is not a whole second; write it as 2027-06-01T00:00:00Z"
            ));
        }
        let year = expires.to_zoned_datetime(jiff::tz::TimeZone::UTC).year();
        if !(1970..=9999).contains(&year) {
            return Err(format!(
                "expiry {expires} is outside the years 1970 to 9999"
            ));
        }
        if approvers.is_empty() {
            return Err("an approver set needs at least one approver".to_owned());
        }
        if approvers.len() > MAX_APPROVERS {
            return Err(format!(
                "{} approvers, at most {MAX_APPROVERS} are allowed",
                approvers.len()
            ));
        }
        let mut dids = HashSet::new();
        let mut labels = HashSet::new();
        for approver in &approvers {
            if !dids.insert(approver.did.as_str()) {
                return Err(format!(
                    "{} is listed twice; each key may appear once",
                    approver.did
                ));
            }
            if !labels.insert(approver.label.as_str()) {
                return Err(format!(
                    "label {} is given to two keys; labels must tell approvers apart",
                    shown(approver.label.as_str())
                ));
            }
        }
        if threshold == 0 || threshold > approvers.len() {
            return Err(format!(
                "threshold {threshold} with {} approvers; it must be at least 1 and at most the number of approvers",
                approvers.len()
            ));
        }
        Ok(SetBody {
            version,
            expires,
            threshold,
            approvers,
        })
    }

    /// The version after this one: the same approvers but `remove`d,
    /// with `add`ed ones at the end, and the new threshold (or the old one)
    /// and expiry.
    ///
    /// # Errors
    ///
    /// A sentence naming the first problem: a key to remove that is not in
    /// the set, one to add that already is, or a rule the result breaks.
    pub fn next(
        &self,
        add: Vec<Approver>,
        remove: &[DidKey],
        threshold: Option<usize>,
        expires: Timestamp,
    ) -> Result<SetBody, String> {
        for did in remove {
            if !self.contains(did) {
                return Err(format!(
                    "cannot remove {did}: version {} does not list it",
                    self.version
                ));
            }
        }
        for approver in &add {
            if self.contains(&approver.did) && !remove.contains(&approver.did) {
                return Err(format!(
                    "cannot add {}: version {} lists it already (as {})",
                    approver.did,
                    self.version,
                    shown(self.label_of(&approver.did).unwrap_or_default())
                ));
            }
        }
        let mut approvers: Vec<Approver> = self
            .approvers
            .iter()
            .filter(|a| !remove.contains(&a.did))
            .cloned()
            .collect();
        approvers.extend(add);
        let threshold = threshold.unwrap_or(self.threshold);
        if threshold > approvers.len() {
            return Err(format!(
                "version {} would have {} approvers but keep threshold {threshold}; give a lower --threshold",
                self.version + 1,
                approvers.len()
            ));
        }
        SetBody::new(self.version + 1, expires, threshold, approvers)
    }

    /// The version number.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// When the version stops being usable.
    pub fn expires(&self) -> Timestamp {
        self.expires
    }

    /// How many distinct approvers must agree.
    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// The approvers, in the order the file lists them.
    pub fn approvers(&self) -> &[Approver] {
        &self.approvers
    }

    /// Whether `did` is one of the approvers.
    pub fn contains(&self, did: &DidKey) -> bool {
        self.approvers.iter().any(|a| &a.did == did)
    }

    /// The label of approver `did`, if it is one.
    pub fn label_of(&self, did: &DidKey) -> Option<&str> {
        self.approvers
            .iter()
            .find(|a| &a.did == did)
            .map(|a| a.label.as_str())
    }

    /// `expires` as the file writes it: RFC 3339, UTC, whole seconds, `Z`.
    pub fn expires_text(&self) -> String {
        format_expiry(self.expires)
    }

    /// The `signed` object as JSON.
    pub(crate) fn to_value(&self) -> Map<String, Value> {
        let approvers = self
            .approvers
            .iter()
            .map(|a| {
                let mut m = Map::new();
                m.insert("did".to_owned(), Value::String(a.did.to_string()));
                m.insert("label".to_owned(), Value::String(a.label.0.clone()));
                Value::Object(m)
            })
            .collect();
        let mut m = Map::new();
        m.insert("type".to_owned(), Value::String(SET_TYPE.to_owned()));
        m.insert("version".to_owned(), Value::from(self.version));
        m.insert("expires".to_owned(), Value::String(self.expires_text()));
        m.insert("threshold".to_owned(), Value::from(self.threshold));
        m.insert("approvers".to_owned(), Value::Array(approvers));
        m
    }

    /// The bytes every signature on this version covers: the domain
    /// separator, then the RFC 8785 canonical form of the `signed` object.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut bytes = DOMAIN_SEPARATOR.to_vec();
        bytes.extend(constle_json::canonical_object(&self.to_value()));
        bytes
    }

    /// The version's digest: SHA-256 of [`SetBody::signed_bytes`].
    pub fn digest(&self) -> SetDigest {
        SetDigest::of(&self.signed_bytes())
    }
}

/// RFC 3339, UTC, whole seconds, `Z`: `2027-06-01T00:00:00Z`.
pub(crate) fn format_expiry(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parse an expiry written exactly as [`format_expiry`] writes it.
///
/// # Errors
///
/// A sentence saying what is wrong.
pub fn parse_expiry(text: &str) -> Result<Timestamp, String> {
    let wrong = || {
        format!(
            "expiry {} is not an RFC 3339 UTC time in whole seconds such as 2027-06-01T00:00:00Z",
            shown(text)
        )
    };
    let t: Timestamp = text.parse().map_err(|_| wrong())?;
    if format_expiry(t) != text {
        return Err(wrong());
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_has_one_spelling() {
        assert!(parse_expiry("2027-06-01T00:00:00Z").is_ok());
        for bad in [
            "2027-06-01T00:00:00+00:00",
            "2027-06-01T00:00:00.000Z",
            "2027-06-01t00:00:00z",
            "2027-06-01 00:00:00Z",
            "2027-06-01T00:00Z",
            "2027-06-01",
            " 2027-06-01T00:00:00Z",
            "2027-06-01T01:00:00+01:00",
        ] {
            assert!(parse_expiry(bad).is_err(), "accepted {bad}");
        }
    }

    #[test]
    fn labels() {
        assert!(Label::new("alice").is_ok());
        assert!(Label::new("Zoë Müller (finance)").is_ok());
        assert!(Label::new(&"x".repeat(64)).is_ok());
        for bad in [
            "",
            " alice",
            "alice ",
            "a\nb",
            "a\u{1b}[31m",
            "a\u{202e}b",
            &"x".repeat(65),
        ] {
            assert!(Label::new(bad).is_err(), "accepted {bad:?}");
        }
    }
}
