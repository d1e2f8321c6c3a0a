//! JSON parsing that refuses what a lenient parser would quietly accept.
//!
//! Two readers of one message must never disagree about what it says: the
//! audit log is read back by other tools, and the MCP gate decides on a body
//! that a server then parses again. `serde_json` keeps the last of two equal
//! keys, so `{"event":"a","event":"b"}` could mean one thing to us and another
//! to a reader that keeps the first; duplicate keys are therefore an error
//! here, at any depth. Lone surrogates (`"\ud800"`), `NaN`, trailing commas,
//! comments, single quotes, a byte-order mark and trailing data are refused by
//! `serde_json` itself; the tests pin that.
//!
//! Nesting is bounded by [`MAX_DEPTH`], and [`parse_limited`] also bounds the
//! input size. [`canonical_object`] writes the RFC 8785 form that signatures
//! cover, [`canonical_value`] that of any value; [`Spelling`] has the same
//! for a form that also escapes what a terminal must not be shown (the
//! audit log's).

#![forbid(unsafe_code)]

mod canonical;
mod spelling;

pub use canonical::{Member, canonical_members, canonical_object, canonical_value, without_member};
pub use spelling::Spelling;

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// How deep arrays and objects may nest; `serde_json` stops at 128 itself,
/// this keeps our own recursion well inside that.
pub const MAX_DEPTH: usize = 64;

/// Parses exactly one JSON value from `bytes`, refusing duplicate object keys
/// and more than [`MAX_DEPTH`] levels of nested arrays and objects.
pub fn parse(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    parse_at_depth(bytes, 0)
}

/// Parses the value of a top-level member the way [`parse`] parses it inside
/// its object: one level down.
fn parse_member(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    parse_at_depth(bytes, 1)
}

fn parse_at_depth(bytes: &[u8], depth: usize) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue { depth }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// Why [`parse_limited`] refused its input.
#[derive(Debug)]
#[non_exhaustive]
pub enum LimitedError {
    /// The input is longer than the limit; it was not parsed.
    TooLarge {
        /// The input's length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The input is not strict JSON (see [`parse`]).
    Json(serde_json::Error),
}

impl fmt::Display for LimitedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitedError::TooLarge { len, max } => {
                write!(f, "{len} bytes of JSON, more than the limit of {max}")
            }
            LimitedError::Json(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for LimitedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LimitedError::TooLarge { .. } => None,
            LimitedError::Json(err) => Some(err),
        }
    }
}

/// Like [`parse`], but refuses without parsing any input longer than
/// `max_bytes`.
pub fn parse_limited(bytes: &[u8], max_bytes: usize) -> Result<Value, LimitedError> {
    if bytes.len() > max_bytes {
        return Err(LimitedError::TooLarge {
            len: bytes.len(),
            max: max_bytes,
        });
    }
    parse(bytes).map_err(LimitedError::Json)
}

struct StrictValue {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl StrictValue {
    fn nested<E: de::Error>(&self) -> Result<StrictValue, E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom(format_args!(
                "nesting deeper than {MAX_DEPTH} levels"
            )));
        }
        Ok(StrictValue {
            depth: self.depth + 1,
        })
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.nested()?)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            let value = map.next_value_seed(self.nested()?)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::{LimitedError, MAX_DEPTH, parse, parse_limited};

    #[test]
    fn accepts_plain_json() {
        let value = parse(br#"{"a":[1,-2,"x",null,true,{"b":1.5}]}"#).unwrap();
        assert_eq!(value["a"][5]["b"], 1.5);
    }

    #[test]
    fn refuses_duplicate_keys_at_any_depth() {
        for input in [
            r#"{"a":1,"a":1}"#,
            r#"{"x":{"a":1,"a":2}}"#,
            r#"[{"a":1,"a":2}]"#,
        ] {
            let err = parse(input.as_bytes()).unwrap_err();
            assert!(
                err.to_string().contains("duplicate key `a`"),
                "{input}: {err}"
            );
        }
    }

    #[test]
    fn refuses_lone_surrogates_and_extensions() {
        for input in [
            r#""\ud800""#,
            r#""\udc00x""#,
            "[1,]",
            "{\"a\":1,}",
            "// c\n1",
            "NaN",
            "1 2",
            "'a'",
            "\u{feff}1",
            "Infinity",
            "-Infinity",
            "1e400",
            "[1,2,]",
            "/* c */ {}",
            "{\"a\":1} // c",
            "{a:1}",
            "0x10",
            "+1",
            "01",
            "\"\\ud800\\u0041\"",
            "\"\t\"",
            "",
        ] {
            assert!(parse(input.as_bytes()).is_err(), "accepted {input}");
        }
    }

    #[test]
    fn refuses_deep_nesting() {
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(parse(deep.as_bytes()).is_err());
        let fine = "[".repeat(60) + &"]".repeat(60);
        assert!(parse(fine.as_bytes()).is_ok());
    }

    #[test]
    fn accepts_surrogate_pairs_and_escapes() {
        let value = parse(br#""\ud83d\ude00\u0041""#).unwrap();
        assert_eq!(value, "\u{1f600}A");
    }

    #[test]
    fn depth_limit_is_exact() {
        // MAX_DEPTH levels of arrays and objects are fine, one more is not.
        let ok = "[".repeat(MAX_DEPTH) + "1" + &"]".repeat(MAX_DEPTH);
        assert!(parse(ok.as_bytes()).is_ok());
        let deep = "[".repeat(MAX_DEPTH + 1) + "1" + &"]".repeat(MAX_DEPTH + 1);
        let err = parse(deep.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("nesting deeper"), "{err}");
        let objects = |n: usize| r#"{"a":"#.repeat(n) + "1" + &"}".repeat(n);
        assert!(parse(objects(MAX_DEPTH).as_bytes()).is_ok());
        assert!(parse(objects(MAX_DEPTH + 1).as_bytes()).is_err());
    }

    #[test]
    fn size_limit_refuses_before_parsing() {
        assert!(parse_limited(b"[1]", 3).is_ok());
        match parse_limited(b"[1] ", 3) {
            Err(LimitedError::TooLarge { len: 4, max: 3 }) => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_limited(b"[1,]", 10),
            Err(LimitedError::Json(_))
        ));
    }
}
