//! The RFC 8785 (JCS) canonical form, written straight from a parsed value.
//!
//! The audit verifier canonicalises every line it reads, so this is on its
//! hottest path. `serde_json_canonicalizer` formats every number through a
//! double and re-sorts keys through UTF-16 copies; here integers that a
//! double holds exactly are written directly and keys are compared in UTF-16
//! order without copying. Other numbers still go through the crate, so the
//! output is byte for byte what it produces (a property test pins that).
//!
//! [`canonical_with_cut`] also tells where one top-level member sits, so a
//! reader can derive the canonical form without that member (the signed
//! bytes of an entry, without its `sig`) from the line itself, instead of
//! serialising a second time.

use std::cmp::Ordering;
use std::ops::Range;

use serde_json::{Map, Number, Value};

/// Integers of at most this magnitude are exact in an IEEE double, which is
/// how JCS reads every number.
const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

/// The canonical bytes of `object`.
pub fn canonical_object(object: &Map<String, Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_object(object, &mut out, |_, _| {});
    out
}

/// The canonical bytes of `object`, and the range of its member `key`
/// together with one comma that joins it to a neighbour: cutting that range
/// out leaves exactly the canonical bytes of `object` without `key`.
pub fn canonical_with_cut(
    object: &Map<String, Value>,
    key: &str,
) -> (Vec<u8>, Option<Range<usize>>) {
    let mut out = Vec::with_capacity(256);
    let mut cut = None;
    write_object(object, &mut out, |name, range| {
        if name == key {
            cut = Some(range);
        }
    });
    let cut = cut.map(|range| match out.get(range.end) {
        // The first member has no comma before it; take the one after.
        Some(b',') if range.start == 1 => range.start..range.end + 1,
        _ => range,
    });
    (out, cut)
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
        Value::Object(object) => write_object(object, out, |_, _| {}),
    }
}

/// Writes the members sorted by the UTF-16 code units of their names, and
/// reports each member's range (with its leading comma, if any).
fn write_object(
    object: &Map<String, Value>,
    out: &mut Vec<u8>,
    mut member_at: impl FnMut(&str, Range<usize>),
) {
    let mut members: Vec<(&String, &Value)> = object.iter().collect();
    members.sort_by(|a, b| utf16_order(a.0, b.0));
    out.push(b'{');
    for (i, (name, value)) in members.into_iter().enumerate() {
        let start = out.len();
        if i > 0 {
            out.push(b',');
        }
        write_string(name, out);
        out.push(b':');
        write_value(value, out);
        member_at(name, start..out.len());
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
        bytes[5..bytes.len() - 1].to_vec()
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
        fn cutting_a_member_leaves_the_rest_canonical(
            value in any_value(),
            key in "[a-z]{0,2}",
        ) {
            let Value::Object(mut object) = value else { return Ok(()) };
            object.insert(key.clone(), json!("x"));
            let (bytes, cut) = canonical_with_cut(&object, &key);
            let cut = cut.unwrap();
            object.remove(&key);
            let rest = [&bytes[..cut.start], &bytes[cut.end..]].concat();
            prop_assert_eq!(rest, jcs(&Value::Object(object)));
        }
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
    fn a_missing_member_has_no_cut() {
        let Value::Object(object) = json!({"a": 1}) else {
            unreachable!()
        };
        assert_eq!(
            canonical_with_cut(&object, "b"),
            (b"{\"a\":1}".to_vec(), None)
        );
        let (bytes, cut) = canonical_with_cut(&object, "a");
        assert_eq!((bytes.as_slice(), cut), (&b"{\"a\":1}"[..], Some(1..6)));
    }
}
