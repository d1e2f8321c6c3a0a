//! JSON parsing that refuses what a lenient parser would quietly accept.
//!
//! `serde_json` keeps the last of two equal keys. A log line with
//! `{"event":"a","event":"b"}` would then mean one thing to us and possibly
//! another to a different reader, so duplicate keys are an error here. Lone
//! surrogates, trailing commas, comments and other extensions are already
//! refused by `serde_json` itself.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// How deep arrays and objects may nest; `serde_json` stops at 128 itself,
/// this keeps our own recursion well inside that.
const MAX_DEPTH: usize = 64;

/// Parses exactly one JSON value from `bytes`, refusing duplicate object keys
/// and nesting deeper than [`MAX_DEPTH`].
pub fn parse(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue { depth: 0 }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
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
    use super::parse;

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
}
