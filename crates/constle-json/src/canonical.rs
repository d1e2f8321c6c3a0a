//! The RFC 8785 (JCS) canonical form, written straight from a parsed value.
//!
//! The audit verifier canonicalises every line it reads, so this is on its
//! hottest path. `serde_json_canonicalizer` formats every number through a
//! double and re-sorts keys through UTF-16 copies; here integers that a
//! double holds exactly are written directly and keys are compared in UTF-16
//! order without copying. Other numbers still go through the crate, so the
//! output is byte for byte what it produces (a property test pins that).
//!
//! [`canonical_members`] goes the other way for the verifier: it decides
//! whether bytes are the canonical form of an object and hands back each
//! top-level member as written, building no value but nested arrays and
//! objects (which are checked by the strict parser, as everywhere else).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer as _, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};

/// Integers of at most this magnitude are exact in an IEEE double, which is
/// how JCS reads every number.
const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

/// The canonical bytes of `object`.
pub fn canonical_object(object: &Map<String, Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_object(object, &mut out);
    out
}

/// The canonical bytes of any value (an array, say). As JCS reads every
/// number as an IEEE double, integers beyond 2^53 are written rounded.
pub fn canonical_value(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_value(value, &mut out);
    out
}

/// One top-level member of a canonical object, as written.
#[derive(Debug)]
pub struct Member<'a> {
    /// The member's name, unescaped.
    pub name: Cow<'a, str>,
    /// The member's value, exactly as it appears in the input.
    pub value: &'a RawValue,
    /// Where the member sits in the input, with the comma before it if any.
    span: Range<usize>,
}

/// The members of `bytes`, in order, if `bytes` are exactly the canonical
/// form of a JSON object that [`crate::parse`] accepts; `None` otherwise
/// (use [`crate::parse`] to learn why).
pub fn canonical_members(bytes: &[u8]) -> Option<Vec<Member<'_>>> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let written = deserializer.deserialize_map(Members).ok()?;
    deserializer.end().ok()?;
    let mut rebuilt = Vec::with_capacity(bytes.len());
    let mut members: Vec<Member> = Vec::with_capacity(written.len());
    rebuilt.push(b'{');
    for (name, value) in written {
        let start = rebuilt.len();
        if let Some(previous) = members.last() {
            // Strictly increasing names: sorted, and no name twice.
            if utf16_order(&previous.name, &name) != Ordering::Less {
                return None;
            }
            rebuilt.push(b',');
        }
        write_string(&name, &mut rebuilt);
        rebuilt.push(b':');
        write_raw(value, &mut rebuilt)?;
        let span = start..rebuilt.len();
        members.push(Member { name, value, span });
    }
    rebuilt.push(b'}');
    (rebuilt == bytes).then_some(members)
}

/// The canonical bytes of the object `members` came from, without the member
/// at `index`.
pub fn without_member(bytes: &[u8], members: &[Member], index: usize) -> Vec<u8> {
    let mut cut = members[index].span.clone();
    if index == 0 && members.len() > 1 {
        // The first member has no comma before it; take the one after.
        cut.end += 1;
    }
    [&bytes[..cut.start], &bytes[cut.end..]].concat()
}

/// Writes the canonical form of one member's value.
fn write_raw(value: &RawValue, out: &mut Vec<u8>) -> Option<()> {
    let text = value.get();
    if text.starts_with('"') && !text.contains('\\') {
        // A JSON string without escapes holds no quote, backslash or control
        // character, so it is already canonical.
        out.extend_from_slice(text.as_bytes());
        return Some(());
    }
    let value = crate::parse_member(text.as_bytes()).ok()?;
    write_value(&value, out);
    Some(())
}

/// Reads an object's members without building their values.
struct Members;

impl<'de> Visitor<'de> for Members {
    type Value = Vec<(Cow<'de, str>, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::with_capacity(16);
        while let Some(name) = map.next_key_seed(Name)? {
            members.push((name, map.next_value()?));
        }
        Ok(members)
    }
}

/// A member name, borrowed from the input unless it had to be unescaped.
struct Name;

impl<'de> DeserializeSeed<'de> for Name {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, name: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(name))
    }

    fn visit_str<E>(self, name: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(name.to_owned()))
    }
}

fn write_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => write_number(number, out),
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out);
            }
            out.push(b']');
        }
        Value::Object(object) => write_object(object, out),
    }
}

/// Writes the members sorted by the UTF-16 code units of their names.
fn write_object(object: &Map<String, Value>, out: &mut Vec<u8>) {
    let mut members: Vec<(&String, &Value)> = object.iter().collect();
    members.sort_by(|a, b| utf16_order(a.0, b.0));
    out.push(b'{');
    for (i, (name, value)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(name, out);
        out.push(b':');
        write_value(value, out);
    }
    out.push(b'}');
}

fn utf16_order(a: &str, b: &str) -> Ordering {
    // UTF-8 byte order is UTF-16 order except between supplementary-plane
    // characters and U+E000..U+FFFF, which only non-ASCII names can hold.
    if a.is_ascii() && b.is_ascii() {
        return a.cmp(b);
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write_number(number: &Number, out: &mut Vec<u8>) {
    let mut digits = itoa::Buffer::new();
    let exact = match (number.as_u64(), number.as_i64()) {
        (Some(n), _) if n <= MAX_EXACT_INTEGER => Some(digits.format(n)),
        (_, Some(n)) if n.unsigned_abs() <= MAX_EXACT_INTEGER => Some(digits.format(n)),
        _ => None,
    };
    match exact {
        Some(digits) => out.extend_from_slice(digits.as_bytes()),
        // serde_json's numbers are always finite, so JCS cannot refuse one.
        None => out.extend(serde_json_canonicalizer::to_vec(number).unwrap_or_default()),
    }
}

/// JCS strings are ECMAScript's `JSON.stringify`: only `"`, `\` and control
/// characters are escaped, with the short forms where they exist.
fn write_string(text: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let escape = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
    let bytes = text.as_bytes();
    out.push(b'"');
    // A scan without early exit, which the compiler vectorises, settles the
    // common case of nothing to escape.
    if !bytes.iter().fold(false, |any, &b| any | escape(b)) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut plain_from = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escaped: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\x08' => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            b'\x0c' => b"\\f",
            b'\r' => b"\\r",
            0..0x20 => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[plain_from..i]);
        out.extend_from_slice(escaped);
        plain_from = i + 1;
    }
    out.extend_from_slice(&bytes[plain_from..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn jcs(value: &Value) -> Vec<u8> {
        serde_json_canonicalizer::to_vec(value).unwrap()
    }

    fn canonical(value: &Value) -> Vec<u8> {
        let object: Map<String, Value> = [("v".to_owned(), value.clone())].into_iter().collect();
        let bytes = canonical_object(&object);
        let inside = bytes[5..bytes.len() - 1].to_vec();
        assert_eq!(canonical_value(value), inside);
        inside
    }

    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e300f64..1e300).prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[\\x00-\\x7f\u{e000}-\u{e010}\u{10000}-\u{10010}]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(
                    "[a-z\u{e000}\u{10000}\u{ffff}]{0,3}|.{0,4}",
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn matches_serde_json_canonicalizer(value in any_value()) {
            prop_assert_eq!(canonical(&value), jcs(&value));
        }

        #[test]
        fn canonical_objects_are_read_back_member_by_member(value in any_object()) {
            let bytes = jcs(&value);
            let members = canonical_members(&bytes).expect("canonical");
            // Compared with what the bytes say: JCS rounds large integers.
            let object: Map<String, Value> = serde_json::from_slice(&bytes).unwrap();
            prop_assert_eq!(members.len(), object.len());
            for (index, member) in members.iter().enumerate() {
                let written: Value = serde_json::from_str(member.value.get()).unwrap();
                prop_assert_eq!(Some(&written), object.get(member.name.as_ref()));
                let mut rest = object.clone();
                rest.remove(member.name.as_ref());
                prop_assert_eq!(without_member(&bytes, &members, index), jcs(&Value::Object(rest)));
            }
        }

    }

    proptest! {
        // Few random edits leave valid JSON; many cases find those that do.
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn only_canonical_bytes_are_accepted(
            value in any_object(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), edit()), 1..4),
        ) {
            let mut bytes = jcs(&value);
            for (at, edit) in edits {
                let at = at.index(bytes.len() + 1);
                match edit {
                    Edit::Insert(snippet) => drop(bytes.splice(at..at, snippet.iter().copied())),
                    Edit::Replace(byte) if at < bytes.len() => bytes[at] = byte,
                    Edit::Delete if at < bytes.len() => { bytes.remove(at); }
                    _ => {}
                }
            }
            if canonical_members(&bytes).is_some() {
                let parsed = crate::parse(&bytes).expect("strict JSON");
                prop_assert_eq!(jcs(&parsed), bytes);
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Edit {
        Insert(&'static [u8]),
        Replace(u8),
        Delete,
    }

    /// Edits that keep JSON valid often enough to matter: escapes of plain
    /// characters, repeated or reordered members, other number spellings.
    fn edit() -> impl Strategy<Value = Edit> {
        let snippet = prop::sample::select(vec![
            &b" "[..],
            b"\\u0061",
            b"\\/",
            b"\\u00e9",
            b"\"\":0,",
            b",\"\":0",
            b",\"a\":0",
            b"\"a\":0,",
            b".0",
            b"e0",
            b"E+0",
            b"-",
            b"0",
            b"a",
            b"\\",
        ]);
        let byte = prop::sample::select(b" \"\\,:{}[]01.e-+uaAtfn/\t\x7f".to_vec());
        prop_oneof![
            snippet.prop_map(Edit::Insert),
            byte.prop_map(Edit::Replace),
            Just(Edit::Delete),
        ]
    }

    fn any_object() -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a-z\"\\\n\u{e000}\u{10000}]{0,3}", any_value(), 0..8)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    #[test]
    fn sorts_names_as_rfc_8785_does() {
        // RFC 8785 section 3.2.3: names compare as UTF-16 code units, so the
        // emoji (a surrogate pair) sorts before U+FB33.
        let value = json!({
            "\u{20ac}": "Euro Sign",
            "\r": "Carriage Return",
            "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\u{1f600}": "Emoji: Grinning Face",
            "\u{80}": "Control",
            "\u{f6}": "Latin Small Letter O With Diaeresis"
        });
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
                        \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
                        \"\u{1f600}\":\"Emoji: Grinning Face\",\
                        \"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(String::from_utf8(canonical(&value)).unwrap(), expected);
    }

    #[test]
    fn refuses_what_is_not_canonical() {
        for bytes in [
            &br#"{"a":1,"a":1}"#[..],
            br#"{"b":1,"a":1}"#,
            br#"{"a": 1}"#,
            br#"{"a":1.0}"#,
            br#"{"a":"\u0041"}"#,
            br#"{"a":{"b":1,"b":1}}"#,
            br#"{"a":{"c":1,"b":1}}"#,
            br#"{"a":1}x"#,
            br#"[1]"#,
        ] {
            assert!(
                canonical_members(bytes).is_none(),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let members = canonical_members(br#"{"a\n":"\t","b":[1,{"c":null}]}"#).unwrap();
        assert_eq!(members[0].name, "a\n");
        assert_eq!(members[1].value.get(), r#"[1,{"c":null}]"#);
    }

    #[test]
    fn nesting_is_bounded_as_in_parse() {
        let nested =
            |depth: usize| format!(r#"{{"a":{}1{}}}"#, "[".repeat(depth), "]".repeat(depth));
        let verdicts: Vec<(bool, bool)> = (crate::MAX_DEPTH - 2..crate::MAX_DEPTH + 2)
            .map(|depth| {
                let bytes = nested(depth);
                (
                    crate::parse(bytes.as_bytes()).is_ok(),
                    canonical_members(bytes.as_bytes()).is_some(),
                )
            })
            .collect();
        assert!(
            verdicts.iter().all(|(parse, members)| parse == members),
            "{verdicts:?}"
        );
        assert!(
            verdicts.first().unwrap().0 && !verdicts.last().unwrap().0,
            "{verdicts:?}"
        );
    }
}
