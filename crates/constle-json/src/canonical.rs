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
//!
//! Each function has a [`Spelling`] method beside it for the form with
//! more characters escaped ([`Spelling::TerminalSafe`]); the free functions
//! are RFC 8785 exactly.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer as _, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};

use crate::spelling::{Spelling, write_string};

/// Integers of at most this magnitude are exact in an IEEE double, which is
/// how JCS reads every number.
const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

/// The canonical bytes of `object`.
pub fn canonical_object(object: &Map<String, Value>) -> Vec<u8> {
    Spelling::Jcs.object(object)
}

/// The canonical bytes of any value (an array, say). As JCS reads every
/// number as an IEEE double, integers beyond 2^53 are written rounded.
pub fn canonical_value(value: &Value) -> Vec<u8> {
    Spelling::Jcs.value(value)
}

impl Spelling {
    /// The canonical bytes of `object` in this spelling.
    pub fn object(self, object: &Map<String, Value>) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        write_object(object, self, &mut out);
        out
    }

    /// The canonical bytes of any value in this spelling (see
    /// [`canonical_value`]).
    pub fn value(self, value: &Value) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        write_value(value, self, &mut out);
        out
    }

    /// The members of `bytes`, in order, if `bytes` are exactly the
    /// canonical form in this spelling of a JSON object that
    /// [`crate::parse`] accepts; `None` otherwise (use [`crate::parse`] to
    /// learn why).
    pub fn members(self, bytes: &[u8]) -> Option<Vec<Member<'_>>> {
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
            write_string(&name, self, &mut rebuilt);
            rebuilt.push(b':');
            write_raw(value, self, &mut rebuilt)?;
            let span = start..rebuilt.len();
            members.push(Member { name, value, span });
        }
        rebuilt.push(b'}');
        (rebuilt == bytes).then_some(members)
    }
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
    Spelling::Jcs.members(bytes)
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
fn write_raw(value: &RawValue, spelling: Spelling, out: &mut Vec<u8>) -> Option<()> {
    let text = value.get();
    if text.starts_with('"') && !text.contains('\\') && !spelling.holds_raw(text) {
        // A JSON string without escapes holds no quote, backslash or control
        // character, so it is already canonical unless the spelling escapes
        // more.
        out.extend_from_slice(text.as_bytes());
        return Some(());
    }
    let value = crate::parse_member(text.as_bytes()).ok()?;
    write_value(&value, spelling, out);
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

fn write_value(value: &Value, spelling: Spelling, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => write_number(number, out),
        Value::String(text) => write_string(text, spelling, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, spelling, out);
            }
            out.push(b']');
        }
        Value::Object(object) => write_object(object, spelling, out),
    }
}

/// Writes the members sorted by the UTF-16 code units of their names.
fn write_object(object: &Map<String, Value>, spelling: Spelling, out: &mut Vec<u8>) {
    let mut members: Vec<(&String, &Value)> = object.iter().collect();
    members.sort_by(|a, b| utf16_order(a.0, b.0));
    out.push(b'{');
    for (i, (name, value)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(name, spelling, out);
        out.push(b':');
        write_value(value, spelling, out);
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
            unsafe_text().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof!["[a-z\u{e000}\u{10000}\u{ffff}]{0,3}|.{0,4}", unsafe_text()],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Every character [`constle_escape::is_unsafe`] names.
    fn unsafe_chars() -> Vec<char> {
        static ALL: std::sync::LazyLock<Vec<char>> = std::sync::LazyLock::new(|| {
            ('\0'..=char::MAX)
                .filter(|c| constle_escape::is_unsafe(*c))
                .collect()
        });
        ALL.clone()
    }

    /// Text that mixes any characters with unsafe ones, and with
    /// characters beside the unsafe ranges (astral ones too).
    fn unsafe_text() -> impl Strategy<Value = String> {
        let near = vec![
            '\u{7e}',
            '\u{a0}',
            '\u{200c}',
            '\u{200d}',
            '\u{2027}',
            '\u{202f}',
            '\u{fffc}',
            '\u{1f600}',
            '\u{e0080}',
            '\u{10ffff}',
        ];
        let c = prop_oneof![
            any::<char>(),
            prop::sample::select(unsafe_chars()),
            prop::sample::select(near),
            Just('"'),
            Just('\\'),
        ];
        prop::collection::vec(c, 0..8).prop_map(String::from_iter)
    }

    /// The terminal-safe form, derived from the JCS form alone: every
    /// unsafe character in it (only strings hold any) replaced by `\u`
    /// escapes of its UTF-16 units.
    fn escaped(jcs: &[u8]) -> Vec<u8> {
        let mut out = String::new();
        for c in std::str::from_utf8(jcs).unwrap().chars() {
            match constle_escape::is_unsafe(c) {
                true => c
                    .encode_utf16(&mut [0; 2])
                    .iter()
                    .for_each(|u| out.push_str(&format!("\\u{u:04x}"))),
                false => out.push(c),
            }
        }
        out.into_bytes()
    }

    fn spelling() -> impl Strategy<Value = Spelling> {
        prop_oneof![Just(Spelling::Jcs), Just(Spelling::TerminalSafe)]
    }

    fn holds_unsafe(bytes: &[u8]) -> bool {
        String::from_utf8_lossy(bytes)
            .chars()
            .any(constle_escape::is_unsafe)
    }

    proptest! {
        #[test]
        fn matches_serde_json_canonicalizer(value in any_value()) {
            prop_assert_eq!(canonical(&value), jcs(&value));
        }

        #[test]
        fn terminal_safe_is_jcs_with_every_unsafe_character_escaped(value in any_value()) {
            let safe = Spelling::TerminalSafe.value(&value);
            prop_assert!(!holds_unsafe(&safe), "{}", String::from_utf8_lossy(&safe));
            prop_assert_eq!(safe, escaped(&jcs(&value)));
        }

        #[test]
        fn any_text_round_trips_through_the_terminal_safe_form(text in unsafe_text()) {
            let object: Map<String, Value> =
                [(text.clone(), Value::from(1)), ("t".into(), Value::from(text))].into_iter().collect();
            let bytes = Spelling::TerminalSafe.object(&object);
            prop_assert!(!holds_unsafe(&bytes), "{}", String::from_utf8_lossy(&bytes));
            prop_assert_eq!(crate::parse(&bytes).unwrap(), Value::Object(object.clone()));
            let members = Spelling::TerminalSafe.members(&bytes).expect("its own spelling");
            let names: Vec<&str> = members.iter().map(|m| m.name.as_ref()).collect();
            let mut expected: Vec<&str> = object.keys().map(String::as_str).collect();
            expected.sort_by(|a, b| utf16_order(a, b));
            prop_assert_eq!(names, expected);
            // One spelling each: the JCS bytes are the terminal-safe ones
            // exactly when nothing needed escaping beyond JCS.
            let plain = canonical_object(&object);
            prop_assert_eq!(Spelling::TerminalSafe.members(&plain).is_some(), plain == bytes);
            prop_assert_eq!(canonical_members(&bytes).is_some(), plain == bytes);
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
            spelling in spelling(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), edit()), 1..4),
        ) {
            let mut bytes = spelling.value(&value);
            for (at, edit) in edits {
                let at = at.index(bytes.len() + 1);
                match edit {
                    Edit::Insert(snippet) => drop(bytes.splice(at..at, snippet.iter().copied())),
                    Edit::Replace(byte) if at < bytes.len() => bytes[at] = byte,
                    Edit::Delete if at < bytes.len() => { bytes.remove(at); }
                    _ => {}
                }
            }
            if spelling.members(&bytes).is_some() {
                let parsed = crate::parse(&bytes).expect("strict JSON");
                prop_assert_eq!(spelling.value(&parsed), bytes);
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
            "\u{202e}".as_bytes(),
            b"\\u202e",
            b"\\u202E",
            b"\\u007f",
            b"\\udb40\\udc41",
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
        for bytes in [
            "{\"a\":\"\u{202e}\"}".as_bytes(),
            "{\"\u{2028}\":1}".as_bytes(),
            br#"{"a":"\u202E"}"#,
            br#"{"a":["\u007F"]}"#,
        ] {
            assert!(
                Spelling::TerminalSafe.members(bytes).is_none(),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let members = canonical_members(br#"{"a\n":"\t","b":[1,{"c":null}]}"#).unwrap();
        assert_eq!(members[0].name, "a\n");
        assert_eq!(members[1].value.get(), r#"[1,{"c":null}]"#);
    }

    #[test]
    fn terminal_safe_escapes_what_a_terminal_must_not_be_shown() {
        let value =
            json!({"t\u{2066}": "x\u{202e}y\u{7f}\u{85}\u{2028}\u{e0041}\u{1b}\u{200d}é😀"});
        // U+200D (the zero width joiner emoji need) is not unsafe: it stays.
        let expected = concat!(
            r#"{"t\u2066":"x\u202ey\u007f\u0085\u2028\udb40\udc41\u001b"#,
            "\u{200d}é😀\"}"
        );
        let bytes = Spelling::TerminalSafe.value(&value);
        assert_eq!(String::from_utf8(bytes.clone()).unwrap(), expected);
        assert!(Spelling::TerminalSafe.members(&bytes).is_some());
        assert_eq!(crate::parse(&bytes).unwrap(), value);
        // Every unsafe character alone, astral ones as surrogate pairs.
        for c in unsafe_chars() {
            let text = format!("a{c}b");
            let bytes = Spelling::TerminalSafe.value(&Value::from(text.as_str()));
            assert!(!holds_unsafe(&bytes), "{c:?}");
            assert_eq!(crate::parse(&bytes).unwrap(), text, "{c:?}");
            assert_eq!(bytes, escaped(&jcs(&Value::from(text))), "{c:?}");
        }
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
