//! One log line: how an event is sealed into bytes, and how bytes are read
//! back into an entry without trusting anything a re-serialisation could hide.
//!
//! A line is the canonical form of a JSON object in [`LINE_SPELLING`]: RFC
//! 8785 (JCS), with every character a terminal must not be shown written as
//! a `\uxxxx` escape, so that `cat` of a log shows what `audit show` shows.
//! The envelope keys are fixed (`v`, `seq`, `ts`, `agent`, `event`, `prev`,
//! and for signed logs `did` and `sig`); every other key is a field of the
//! event. `sig` is an Ed25519 signature over the canonical form of the
//! object without `sig`, and `prev` is the SHA-256 of the previous line's
//! bytes. Because a line must be byte-for-byte its own canonical form, the
//! bytes that are hashed are exactly the bytes that are signed, and no two
//! spellings of one entry exist.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_escape::is_unsafe;
use constle_identity::{DidKey, Name, SigningIdentity};
use ed25519_dalek::Signature;
use jiff::Timestamp;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use constle_json::{self as strict_json, Member, Spelling};
use serde::Deserialize;

/// The format version written in every entry's `v`.
pub const FORMAT_VERSION: u64 = 1;

/// How a line (and the head anchor) spells its object: JCS, with every
/// character [`constle_escape::is_unsafe`] names escaped.
pub const LINE_SPELLING: Spelling = Spelling::TerminalSafe;

/// Keys the log itself owns; an event may not use them as field names.
pub const ENVELOPE_KEYS: [&str; 8] = ["v", "seq", "ts", "agent", "event", "prev", "did", "sig"];

/// Integers outside this range do not survive a round trip through the
/// IEEE doubles that JCS (and most JSON readers) use.
pub(crate) const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// The SHA-256 of one line's bytes (without its newline), written
/// `sha256:<hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LineHash([u8; 32]);

impl LineHash {
    /// Hashes the bytes of one line.
    pub fn of(line: &[u8]) -> LineHash {
        LineHash(Sha256::digest(line).into())
    }

    /// Reads the `sha256:<64 lowercase hex>` form.
    pub fn parse(text: &str) -> Option<LineHash> {
        let hex_digits = text.strip_prefix("sha256:")?;
        if hex_digits.len() != 64 || hex_digits.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        let mut bytes = [0; 32];
        hex::decode_to_slice(hex_digits, &mut bytes).ok()?;
        Some(LineHash(bytes))
    }
}

impl fmt::Display for LineHash {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

impl fmt::Debug for LineHash {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Something that happened, to be recorded: an event name and its fields.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    name: String,
    fields: Map<String, Value>,
}

/// Why an [`Event`] cannot be recorded as given.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum EventError {
    /// Event names are short snake_case words so they can be grepped.
    #[error("event name `{0}` is not snake_case ASCII (like `gate_approved`)")]
    BadName(String),
    /// The field would overwrite part of the log's own envelope.
    #[error("field `{0}` is reserved by the audit log; rename the field")]
    ReservedField(String),
    /// The number would change meaning when read back as a double.
    #[error("field `{0}` holds a number JSON cannot carry exactly; record it as a string")]
    InexactNumber(String),
}

impl Event {
    /// Starts an event with no fields. The name must be snake_case ASCII.
    pub fn new(name: &str) -> Result<Event, EventError> {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && name.as_bytes()[0].is_ascii_lowercase();
        if !valid {
            return Err(EventError::BadName(name.to_owned()));
        }
        Ok(Event {
            name: name.to_owned(),
            fields: Map::new(),
        })
    }

    /// Adds a field. Numbers must be integers JSON carries exactly; amounts
    /// and other decimals belong in strings.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Result<Event, EventError> {
        if ENVELOPE_KEYS.contains(&key) {
            return Err(EventError::ReservedField(key.to_owned()));
        }
        let value = value.into();
        if !exact_numbers(&value) {
            return Err(EventError::InexactNumber(key.to_owned()));
        }
        self.fields.insert(key.to_owned(), value);
        Ok(self)
    }

    /// An event of the [catalogue](crate::catalogue), built without the
    /// checks of [`Event::new`] and [`Event::with`]: the catalogue's tests
    /// check its names once, and its fields write only exact numbers.
    pub(crate) fn from_catalogue(name: &'static str, fields: Map<String, Value>) -> Event {
        Event {
            name: name.to_owned(),
            fields,
        }
    }

    /// The event's fields, for an event of the catalogue written under
    /// another name with the same fields.
    pub(crate) fn into_fields(self) -> Map<String, Value> {
        self.fields
    }

    /// The event's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

fn exact_numbers(value: &Value) -> bool {
    match value {
        Value::Number(n) => n
            .as_i64()
            .is_some_and(|i| (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&i)),
        Value::Array(items) => items.iter().all(exact_numbers),
        Value::Object(map) => map.values().all(exact_numbers),
        _ => true,
    }
}

/// The envelope of an entry about to be sealed.
pub(crate) struct Header<'a> {
    pub seq: u64,
    pub ts: Timestamp,
    pub agent: &'a Name,
    pub prev: Option<LineHash>,
}

/// Turns an event into the bytes of one line (without the newline).
pub(crate) fn seal(header: &Header, event: Event, signer: Option<&SigningIdentity>) -> Vec<u8> {
    let mut object = event.fields;
    object.insert("v".into(), FORMAT_VERSION.into());
    object.insert("seq".into(), header.seq.into());
    object.insert("ts".into(), format_timestamp(header.ts).into());
    object.insert("agent".into(), header.agent.as_str().into());
    object.insert("event".into(), event.name.into());
    object.insert(
        "prev".into(),
        header.prev.map_or(Value::Null, |h| h.to_string().into()),
    );
    let Some(signer) = signer else {
        return LINE_SPELLING.object(&object);
    };
    object.insert("did".into(), signer.did().to_string().into());
    let signature = signer.sign(&LINE_SPELLING.object(&object));
    object.insert("sig".into(), BASE64.encode(signature.to_bytes()).into());
    LINE_SPELLING.object(&object)
}

/// Timestamps are UTC with microseconds, so that one clock reading has
/// exactly one spelling.
pub fn format_timestamp(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The UTC day a timestamp falls on: the day file its entry belongs in.
pub(crate) fn utc_date(ts: Timestamp) -> jiff::civil::Date {
    ts.to_zoned_datetime(jiff::tz::TimeZone::UTC).date()
}

/// A line read back from a log: its envelope, its event fields, and what was
/// signed. Nothing here is verified yet except that the line is well formed.
#[derive(Debug)]
pub struct Entry {
    /// Position in the agent's chain, counting from 0 across all days.
    pub seq: u64,
    /// When the event was recorded.
    pub ts: Timestamp,
    /// The agent the entry claims to belong to.
    pub agent: String,
    /// The event name.
    pub event: String,
    /// The hash of the previous line, or `None` for the first entry of a chain.
    pub prev: Option<LineHash>,
    /// The signer, for signed logs.
    pub did: Option<DidKey>,
    /// The signature and the exact bytes it covers, for signed logs.
    pub signature: Option<(Signature, Vec<u8>)>,
    /// The event's own fields.
    pub fields: Map<String, Value>,
}

/// Why a line is not a well-formed entry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum LineError {
    /// The line repeats a key, so readers could disagree on its meaning.
    #[error("{0}")]
    DuplicateKey(String),
    /// Not a JSON object, or a required field is missing or mistyped.
    #[error("{0}")]
    Malformed(String),
    /// Valid JSON, but not in the canonical form the writer produces.
    #[error("the bytes are not the canonical form of the entry they encode")]
    NotCanonical,
    /// Valid JSON holding, as it is, a character the writer escapes (a
    /// log edited, or written before lines escaped it): not canonical.
    #[error(
        "the line holds U+{:04X} as it is, which the log writes as a \\u escape: the bytes are not the canonical form of the entry they encode",
        u32::from(*.0)
    )]
    Unescaped(char),
}

/// Parses one line (without its newline) into an [`Entry`].
pub fn parse_line(line: &[u8]) -> Result<Entry, LineError> {
    parse_line_cached(line, &mut DidCache::default(), |_| true)
}

/// Why a line is not an entry signed by the key expected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignedLineError {
    /// Not a well-formed entry.
    #[error(transparent)]
    Line(#[from] LineError),
    /// The entry has no `did` and `sig`.
    #[error("the entry is not signed")]
    Unsigned,
    /// Signed by another key.
    #[error("the entry is signed by {found}, not {expected}")]
    WrongSigner {
        /// The key expected.
        expected: String,
        /// The key the entry names.
        found: String,
    },
    /// The signature does not verify.
    #[error("the entry's signature does not verify against {key}")]
    InvalidSignature {
        /// The key it was checked against.
        key: String,
    },
}

/// Reads one line (without its newline) and checks it on its own as
/// `audit verify` checks each line: well formed and canonical, naming
/// `signer` as its `did`, and its signature by `signer` verifying
/// (strictly). The chain through it is not checked here.
pub fn verify_signed_line(line: &[u8], signer: &DidKey) -> Result<Entry, SignedLineError> {
    let entry = parse_line(line)?;
    let (Some(did), Some((signature, signed))) = (&entry.did, &entry.signature) else {
        return Err(SignedLineError::Unsigned);
    };
    if did != signer {
        return Err(SignedLineError::WrongSigner {
            expected: signer.to_string(),
            found: did.to_string(),
        });
    }
    signer
        .verify(signed, signature)
        .map_err(|_| SignedLineError::InvalidSignature {
            key: signer.to_string(),
        })?;
    Ok(entry)
}

/// The last signer parsed. Decoding a did:key decompresses a curve point,
/// which costs more than the rest of parsing a line; the lines of one log
/// almost always share one signer.
#[derive(Default)]
pub(crate) struct DidCache(Option<(String, DidKey)>);

impl DidCache {
    fn parse(&mut self, text: &str) -> Result<DidKey, LineError> {
        if let Some((_, did)) = self.0.as_ref().filter(|(cached, _)| cached == text) {
            return Ok(did.clone());
        }
        let did = DidKey::parse(text)
            .map_err(|err| malformed(&format!("`did` is not a valid did:key: {err}")))?;
        self.0 = Some((text.to_owned(), did.clone()));
        Ok(did)
    }
}

/// Parses one line. The event's own fields are read only when `keep_fields`
/// holds for the event's name (otherwise [`Entry::fields`] is empty):
/// building them is most of the cost of a line, and the verifier looks at
/// the fields of few events.
pub(crate) fn parse_line_cached(
    line: &[u8],
    dids: &mut DidCache,
    keep_fields: impl Fn(&str) -> bool,
) -> Result<Entry, LineError> {
    let members = LINE_SPELLING.members(line).ok_or_else(|| refusal(line))?;
    // The line is canonical, so without its `sig` member it is exactly the
    // canonical form of the rest: the bytes that were signed.
    let signature = match members.iter().position(|m| m.name == "sig") {
        None => None,
        Some(index) => Some((
            signature_from(serde_json::from_str(members[index].value.get()).ok())?,
            strict_json::without_member(line, &members, index),
        )),
    };
    let version: u64 = take(&members, "v", Some)?;
    if version != FORMAT_VERSION {
        return Err(malformed(&format!(
            "format version {version} is not {FORMAT_VERSION}"
        )));
    }
    let did = match members.iter().any(|m| m.name == "did") {
        false => None,
        true => Some(dids.parse(take(&members, "did", Some)?)?),
    };
    if did.is_some() != signature.is_some() {
        return Err(malformed("`did` and `sig` must appear together"));
    }
    let event: String = take(&members, "event", Some)?;
    Ok(Entry {
        seq: take(&members, "seq", Some)?,
        ts: take(&members, "ts", parse_ts)?,
        agent: take(&members, "agent", Some)?,
        prev: take(&members, "prev", |prev: Option<&str>| match prev {
            None => Some(None),
            Some(hash) => LineHash::parse(hash).map(Some),
        })?,
        did,
        signature,
        fields: match keep_fields(&event) {
            true => fields(&members)?,
            false => Map::new(),
        },
        event,
    })
}

/// Why a line that is not a canonical JSON object is refused.
fn refusal(line: &[u8]) -> LineError {
    match strict_json::parse(line) {
        Ok(Value::Object(_)) => match raw_unsafe(line) {
            Some(c) => LineError::Unescaped(c),
            None => LineError::NotCanonical,
        },
        Ok(_) => malformed("the line is not a JSON object"),
        Err(err) if err.to_string().contains("duplicate key") => {
            LineError::DuplicateKey(err.to_string())
        }
        Err(err) => LineError::Malformed(format!("not valid JSON: {err}")),
    }
}

/// The first character in `line` that JCS writes as it is but the log
/// escapes (C0 controls never stand raw in a JSON string; between tokens
/// they are whitespace).
fn raw_unsafe(line: &[u8]) -> Option<char> {
    String::from_utf8_lossy(line)
        .chars()
        .find(|c| *c >= '\u{7f}' && is_unsafe(*c))
}

fn malformed(what: &str) -> LineError {
    LineError::Malformed(what.to_owned())
}

/// Reads the envelope member `key` as a `T` and checks it with `read`.
fn take<'a, T: Deserialize<'a>, U>(
    members: &[Member<'a>],
    key: &str,
    read: impl FnOnce(T) -> Option<U>,
) -> Result<U, LineError> {
    let raw = members
        .iter()
        .find(|m| m.name == key)
        .ok_or_else(|| malformed(&format!("missing `{key}`")))?
        .value;
    serde_json::from_str(raw.get())
        .ok()
        .and_then(read)
        .ok_or_else(|| {
            malformed(&format!(
                "`{key}` has the wrong type or form: {}",
                raw.get()
            ))
        })
}

/// The members that are not part of the envelope.
fn fields(members: &[Member]) -> Result<Map<String, Value>, LineError> {
    members
        .iter()
        .filter(|m| !ENVELOPE_KEYS.contains(&m.name.as_ref()))
        .map(|m| {
            let value = serde_json::from_str(m.value.get())
                .map_err(|err| malformed(&format!("field `{}`: {err}", m.name)))?;
            Ok((m.name.to_string(), value))
        })
        .collect()
}

fn parse_ts(text: &str) -> Option<Timestamp> {
    let ts: Timestamp = text.parse().ok()?;
    (format_timestamp(ts) == text).then_some(ts)
}

/// Reads a standard-base64 Ed25519 signature (64 bytes).
pub fn parse_signature(value: &Value) -> Result<Signature, LineError> {
    signature_from(value.as_str())
}

fn signature_from(text: Option<&str>) -> Result<Signature, LineError> {
    let bytes = text
        .and_then(|s| BASE64.decode(s).ok())
        .ok_or_else(|| malformed("`sig` is not standard base64"))?;
    let bytes: [u8; 64] = bytes
        .try_into()
        .map_err(|_| malformed("`sig` is not 64 bytes"))?;
    Ok(Signature::from_bytes(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn agent() -> Name {
        Name::new("test-agent").unwrap()
    }

    fn header(agent: &Name) -> Header<'_> {
        Header {
            seq: 7,
            ts: "2026-08-08T10:00:00.5Z".parse().unwrap(),
            agent,
            prev: None,
        }
    }

    #[test]
    fn sealed_lines_parse_back() {
        let signer = SigningIdentity::from_bytes(&[7; 32]);
        let agent = agent();
        let event = Event::new("run_started")
            .unwrap()
            .with("command", vec!["python3", "a.py"])
            .unwrap();
        let line = seal(&header(&agent), event, Some(&signer));
        let entry = parse_line(&line).unwrap();
        assert_eq!(entry.seq, 7);
        assert_eq!(entry.event, "run_started");
        assert_eq!(entry.did.as_ref(), Some(signer.did()));
        let (sig, signed) = entry.signature.unwrap();
        signer.did().verify(&signed, &sig).unwrap();
        assert_eq!(entry.fields["command"][1], "a.py");
        assert!(
            std::str::from_utf8(&line)
                .unwrap()
                .contains(r#""ts":"2026-08-08T10:00:00.500000Z""#)
        );
    }

    #[test]
    fn a_signed_line_verifies_against_its_signer_only() {
        let signer = SigningIdentity::from_bytes(&[7; 32]);
        let other = SigningIdentity::from_bytes(&[8; 32]);
        let agent = agent();
        let event = Event::new("run_started").unwrap().with("a", "b").unwrap();
        let line = seal(&header(&agent), event.clone(), Some(&signer));
        assert_eq!(verify_signed_line(&line, signer.did()).unwrap().seq, 7);
        assert!(matches!(
            verify_signed_line(&line, other.did()),
            Err(SignedLineError::WrongSigner { .. })
        ));
        let unsigned = seal(&header(&agent), event, None);
        assert_eq!(
            verify_signed_line(&unsigned, signer.did()).unwrap_err(),
            SignedLineError::Unsigned
        );
        // Another value, still canonical: the signature no longer covers it.
        let edited = String::from_utf8(line)
            .unwrap()
            .replace(r#""a":"b""#, r#""a":"c""#);
        assert!(matches!(
            verify_signed_line(edited.as_bytes(), signer.did()),
            Err(SignedLineError::InvalidSignature { .. })
        ));
    }

    #[test]
    fn unsigned_lines_have_neither_did_nor_sig() {
        let agent = agent();
        let line = seal(&header(&agent), Event::new("x").unwrap(), None);
        let entry = parse_line(&line).unwrap();
        assert!(entry.did.is_none() && entry.signature.is_none());
    }

    #[test]
    fn refuses_reserved_fields_and_inexact_numbers() {
        let event = Event::new("x").unwrap();
        assert_eq!(
            event.clone().with("seq", 1),
            Err(EventError::ReservedField("seq".into()))
        );
        assert_eq!(
            event.clone().with("n", 1.5),
            Err(EventError::InexactNumber("n".into()))
        );
        assert_eq!(
            event.clone().with("n", u64::MAX),
            Err(EventError::InexactNumber("n".into()))
        );
        assert!(event.with("n", MAX_SAFE_INTEGER).is_ok());
        for bad in ["", "Run", "run-started", "1run", "run started"] {
            assert!(Event::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reserialised_lines_are_not_canonical() {
        let agent = agent();
        let line = seal(
            &header(&agent),
            Event::new("x").unwrap().with("a", "b").unwrap(),
            None,
        );
        let pretty =
            serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&line).unwrap()).unwrap();
        assert_eq!(parse_line(&pretty).unwrap_err(), LineError::NotCanonical);
        let spaced = String::from_utf8(line).unwrap().replace(":", ": ");
        assert_eq!(
            parse_line(spaced.as_bytes()).unwrap_err(),
            LineError::NotCanonical
        );
    }

    /// Every character a terminal must not be shown as it is.
    fn unsafe_chars() -> Vec<char> {
        static ALL: std::sync::LazyLock<Vec<char>> =
            std::sync::LazyLock::new(|| ('\0'..=char::MAX).filter(|c| is_unsafe(*c)).collect());
        ALL.clone()
    }

    /// Any text, rich in unsafe characters and astral ones.
    fn text() -> impl Strategy<Value = String> {
        let c = prop_oneof![
            any::<char>(),
            prop::sample::select(unsafe_chars()),
            prop::char::range('\u{10000}', char::MAX),
        ];
        prop::collection::vec(c, 0..12).prop_map(String::from_iter)
    }

    proptest! {
        #[test]
        fn any_text_is_kept_and_no_unsafe_character_reaches_the_line(text in text()) {
            let signer = SigningIdentity::from_bytes(&[7; 32]);
            let agent = agent();
            let event = Event::new("network_blocked")
                .unwrap()
                .with("host", text.as_str())
                .unwrap()
                .with(&format!("f{text}"), vec![text.as_str()])
                .unwrap();
            let line = seal(&header(&agent), event, Some(&signer));
            let written = std::str::from_utf8(&line).unwrap();
            prop_assert!(!written.chars().any(is_unsafe), "{written:?}");
            let entry = verify_signed_line(&line, signer.did()).unwrap();
            prop_assert_eq!(&entry.fields["host"], &Value::from(text.as_str()));
            prop_assert_eq!(&entry.fields[&format!("f{text}")][0], &Value::from(text.as_str()));
            // What JCS alone writes differs exactly when the text holds an
            // unsafe character, and is then refused, naming it.
            let object: Map<String, Value> = serde_json::from_slice(&line).unwrap();
            let jcs = strict_json::canonical_object(&object);
            match raw_unsafe(&jcs) {
                None => prop_assert_eq!(jcs, line),
                Some(_) => prop_assert!(matches!(parse_line(&jcs), Err(LineError::Unescaped(_)))),
            }
        }
    }

    #[test]
    fn duplicate_keys_are_their_own_error() {
        let line = br#"{"agent":"a","agent":"b"}"#;
        assert!(matches!(parse_line(line), Err(LineError::DuplicateKey(_))));
    }

    #[test]
    fn line_hash_round_trips_and_is_strict() {
        let hash = LineHash::of(b"abc");
        assert_eq!(LineHash::parse(&hash.to_string()), Some(hash));
        assert_eq!(LineHash::parse(&hash.to_string().to_uppercase()), None);
        assert_eq!(LineHash::parse("sha256:00"), None);
    }
}
