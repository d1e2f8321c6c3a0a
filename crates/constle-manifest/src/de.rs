//! A serde deserializer over the pre-pass tree ([`crate::yaml`]) that keeps
//! going after a mistake.
//!
//! Serde's derived code stops at the first error. To report every mistake in
//! one pass, this deserializer never hands serde a type mismatch: it records
//! a [`Diagnostic`](crate::Diagnostic) in the [`Sink`], poisons the position
//! and gives the visitor a harmless placeholder (an empty string or list,
//! `false`, `0`). Unknown keys of a struct are recorded and skipped before
//! serde sees them (so `deny_unknown_fields` on the raw types is a second
//! line, never the first).
//!
//! Scalar rules, decided by the target type and never by YAML's implicit
//! typing:
//! - string: the scalar's text exactly (`no`, `0443`, `1e3` stay text); a
//!   plain null (`~`, `null`, empty) is an error, quoted `"~"` is the text `~`;
//! - bool: plain `true` or `false` only;
//! - unsigned integer: plain ASCII digits without a leading zero;
//! - null is never "absent": a field that is not wanted is left out.
//!
//! [`Located`] captures the position of a value (and of its key) through a
//! private struct name this deserializer recognises.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

use crate::diagnostic::{Pos, Sink, escape, show, suggest};
use crate::yaml::{Entry, Kind, Node};

/// A value with the position of its node and, inside a mapping, of its key.
#[derive(Debug, Clone)]
pub(crate) struct Located<T> {
    pub value: T,
    pub pos: Pos,
    pub key: Option<Pos>,
}

impl<T> Located<T> {
    /// The key's position when there is one, else the value's.
    pub fn key_pos(&self) -> Pos {
        self.key.unwrap_or(self.pos)
    }
}

/// A struct field: `None` when the key is absent. Null is not absence: a
/// null value goes to `T`'s deserializer, which refuses it.
#[derive(Debug, Clone)]
pub(crate) struct Field<T>(pub Option<Located<T>>);

impl<T> Default for Field<T> {
    fn default() -> Self {
        Field(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Located::deserialize(deserializer).map(|l| Field(Some(l)))
    }
}

/// A mapping with free-form string keys, in document order.
#[derive(Debug, Clone)]
pub(crate) struct Pairs<V>(pub Vec<(Located<String>, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Pairs<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PairsVisitor<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for PairsVisitor<V> {
            type Value = Pairs<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut pairs = Vec::new();
                while let Some(key) = map.next_key::<Located<String>>()? {
                    pairs.push((key, map.next_value()?));
                }
                Ok(Pairs(pairs))
            }
        }
        deserializer.deserialize_map(PairsVisitor(PhantomData))
    }
}

const LOCATED: &str = "$__constle_manifest_located";
const LOCATED_FIELDS: &[&str] = &["line", "column", "key_line", "key_column", "value"];

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Located<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LocatedVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for LocatedVisitor<T> {
            type Value = Located<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a located value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut numbers = [0usize; 4];
                for number in &mut numbers {
                    let (_, n) = map
                        .next_entry::<de::IgnoredAny, usize>()?
                        .ok_or_else(|| de::Error::custom("located value: missing position"))?;
                    *number = n;
                }
                let (_, value) = map
                    .next_entry::<de::IgnoredAny, T>()?
                    .ok_or_else(|| de::Error::custom("located value: missing value"))?;
                let [line, column, key_line, key_column] = numbers;
                Ok(Located {
                    value,
                    pos: Pos { line, column },
                    key: (key_line > 0).then_some(Pos {
                        line: key_line,
                        column: key_column,
                    }),
                })
            }
        }
        deserializer.deserialize_struct(LOCATED, LOCATED_FIELDS, LocatedVisitor(PhantomData))
    }
}

/// Error type of the deserializer. Only raised for a serde error this module
/// did not anticipate; ordinary mistakes go to the [`Sink`] instead.
#[derive(Debug)]
pub(crate) struct DeError(pub String);

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError(msg.to_string())
    }
}

/// State shared by every deserializer of one document.
pub(crate) struct Ctx<'s> {
    sink: RefCell<&'s mut Sink>,
    /// Position of the last node entered, for unanticipated serde errors.
    last: RefCell<Pos>,
}

impl<'s> Ctx<'s> {
    pub fn new(sink: &'s mut Sink) -> Ctx<'s> {
        Ctx {
            sink: RefCell::new(sink),
            last: RefCell::new(Pos::START),
        }
    }

    /// Where the last node entered was.
    pub fn last_pos(&self) -> Pos {
        *self.last.borrow()
    }

    fn mismatch(&self, node: &NodeDe<'_, '_>, code: &'static str, message: String, help: String) {
        let mut sink = self.sink.borrow_mut();
        // An empty value has no text to point at: point at its key.
        let empty =
            matches!(&node.node.kind, Kind::Scalar { text, plain: true } if text.is_empty());
        let at = match node.key {
            Some(key) if empty => key,
            _ => node.node.pos,
        };
        sink.error_poison(code, at, message, Some(help));
        sink.poison(node.node.pos);
        if let Some(key) = node.key {
            sink.poison(key);
        }
    }
}

/// Deserializes `T` from the tree rooted at `node`.
pub(crate) fn from_node<'de, T: Deserialize<'de>>(
    node: &Node,
    ctx: &Ctx<'_>,
) -> Result<T, DeError> {
    T::deserialize(NodeDe {
        node,
        ctx,
        path: String::new(),
        key: None,
    })
}

/// Deserializer for one node. `path` names it for messages (`sandbox.env`,
/// `mcp.servers[0]`); empty at the top level.
struct NodeDe<'a, 's> {
    node: &'a Node,
    ctx: &'a Ctx<'s>,
    path: String,
    key: Option<Pos>,
}

impl<'a, 's> NodeDe<'a, 's> {
    fn enter(&self) {
        *self.ctx.last.borrow_mut() = self.node.pos;
    }

    fn what(&self) -> String {
        if self.path.is_empty() {
            "the Agentfile".to_string()
        } else {
            format!("`{}`", self.path)
        }
    }

    fn child(&self, node: &'a Node, path: String, key: Option<Pos>) -> NodeDe<'a, 's> {
        NodeDe {
            node,
            ctx: self.ctx,
            path,
            key,
        }
    }

    /// Records a type mismatch unless the node was refused already.
    fn mismatch(&self, code: &'static str, expected: &str, help: String) {
        if matches!(self.node.kind, Kind::Refused) {
            return;
        }
        let message = format!(
            "{} must be {expected}, found {}",
            self.what(),
            self.node.describe()
        );
        self.ctx.mismatch(self, code, message, help);
    }

    fn scalar_text(&self) -> Option<(&'a str, bool)> {
        match &self.node.kind {
            Kind::Scalar { text, plain } => Some((text.as_str(), *plain)),
            _ => None,
        }
    }

    fn string_value(&self) -> String {
        match self.scalar_text() {
            Some((text, _)) if !self.node.is_null() => text.to_string(),
            _ => {
                let help = if self.node.is_null() {
                    match self.scalar_text() {
                        Some((text, _)) if !text.is_empty() => {
                            format!(
                                "write a value; to mean the text {} itself, quote it: \"{text}\"",
                                show(text)
                            )
                        }
                        _ => "write a value, or remove the key".to_string(),
                    }
                } else {
                    "write a single value here".to_string()
                };
                self.mismatch("invalid_type", "a string", help);
                String::new()
            }
        }
    }
}

impl<'de> Deserializer<'de> for NodeDe<'_, '_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.enter();
        match &self.node.kind {
            Kind::Scalar { text, .. } if !self.node.is_null() => visitor.visit_str(text),
            Kind::Scalar { .. } | Kind::Refused => visitor.visit_unit(),
            Kind::Seq(_) => self.deserialize_seq(visitor),
            Kind::Map(_) => self.deserialize_map(visitor),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.enter();
        match self.scalar_text() {
            Some(("true", true)) => visitor.visit_bool(true),
            Some(("false", true)) => visitor.visit_bool(false),
            _ => {
                let help = match self.scalar_text() {
                    Some((text @ ("true" | "false"), false)) => {
                        format!("write true or false without quotes: {text}")
                    }
                    _ => "write true or false".to_string(),
                };
                self.mismatch("invalid_bool", "true or false", help);
                visitor.visit_bool(false)
            }
        }
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.enter();
        let parsed = match self.scalar_text() {
            Some((text, true)) => parse_uint(text),
            Some((text, false)) => Err((
                "invalid_integer",
                match parse_uint(text) {
                    Ok(n) => format!("write it without quotes: {n}"),
                    Err(_) => "write a whole number without quotes, e.g. 300".to_string(),
                },
            )),
            None => Err((
                "invalid_integer",
                "write a whole number, e.g. 300".to_string(),
            )),
        };
        match parsed {
            Ok(n) => visitor.visit_u64(n),
            Err((code, help)) => {
                self.mismatch(code, "a whole number", help);
                visitor.visit_u64(0)
            }
        }
    }

    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_u64(visitor)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_u64(visitor)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.enter();
        visitor.visit_string(self.string_value())
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        // Null is not absence in an Agentfile: the inner type decides.
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.enter();
        match &self.node.kind {
            Kind::Seq(items) => visitor.visit_seq(Items {
                parent: &self,
                items: items.iter().enumerate(),
            }),
            _ => {
                let help = match self.scalar_text() {
                    _ if self.node.is_null() => {
                        "write a list, e.g. [a, b]; for no entries write [] or remove the key"
                            .to_string()
                    }
                    Some((text, _)) => format!("write a list: {}", list_form(text)),
                    None => "write a list, e.g. [a, b], or one `- item` per line".to_string(),
                };
                self.mismatch("invalid_type", "a list", help);
                visitor.visit_seq(Items {
                    parent: &self,
                    items: [].iter().enumerate(),
                })
            }
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.enter();
        match &self.node.kind {
            Kind::Map(entries) => visitor.visit_map(Entries {
                parent: &self,
                entries: entries.iter(),
                fields: None,
                value: None,
            }),
            _ => {
                self.mismatch(
                    "invalid_type",
                    "a mapping",
                    "write `key: value` pairs indented under the key, or {} for none".to_string(),
                );
                visitor.visit_map(Entries {
                    parent: &self,
                    entries: [].iter(),
                    fields: None,
                    value: None,
                })
            }
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if name == LOCATED {
            return visitor.visit_map(LocatedAccess {
                de: Some(self),
                step: 0,
            });
        }
        self.enter();
        match &self.node.kind {
            Kind::Map(entries) => visitor.visit_map(Entries {
                parent: &self,
                entries: entries.iter(),
                fields: Some(fields),
                value: None,
            }),
            _ => {
                let help = if self.node.is_null() {
                    format!(
                        "write the fields indented under the key ({}), or remove the key",
                        fields.join(", ")
                    )
                } else {
                    format!("write a mapping with these fields: {}", fields.join(", "))
                };
                self.mismatch("invalid_type", "a mapping", help);
                visitor.visit_map(Entries {
                    parent: &self,
                    entries: [].iter(),
                    fields: Some(fields),
                    value: None,
                })
            }
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u128 f32 f64 char bytes byte_buf unit unit_struct
        tuple tuple_struct enum
    }
}

/// Sequence items.
struct Items<'p, 'a, 's, I> {
    parent: &'p NodeDe<'a, 's>,
    items: I,
}

impl<'de, 'a, I: Iterator<Item = (usize, &'a Node)>> SeqAccess<'de> for Items<'_, 'a, '_, I> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            None => Ok(None),
            Some((i, node)) => {
                let path = format!("{}[{i}]", self.parent.path);
                seed.deserialize(self.parent.child(node, path, None))
                    .map(Some)
            }
        }
    }
}

/// Mapping entries; for a struct (`fields` set), unknown keys are reported
/// and skipped.
struct Entries<'p, 'a, 's, I> {
    parent: &'p NodeDe<'a, 's>,
    entries: I,
    fields: Option<&'static [&'static str]>,
    value: Option<&'a Entry>,
}

impl<'de, 'a, I: Iterator<Item = &'a Entry>> MapAccess<'de> for Entries<'_, 'a, '_, I> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        for entry in self.entries.by_ref() {
            if let Some(fields) = self.fields
                && !fields.contains(&entry.key.as_str())
            {
                let mut sink = self.parent.ctx.sink.borrow_mut();
                if sink.full() {
                    // Past the error cap: skip without computing suggestions.
                    sink.overflow(entry.key_pos);
                    continue;
                }
                let place = if self.parent.path.is_empty() {
                    "at the top level".to_string()
                } else {
                    format!("in {}", self.parent.path)
                };
                let message = format!("unknown field {} {place}", show(&entry.key));
                let help = suggest(&entry.key, "fields", fields);
                sink.error("unknown_field", entry.key_pos, message, Some(help));
                continue;
            }
            self.value = Some(entry);
            return if self.fields.is_some() {
                seed.deserialize(entry.key.as_str().into_deserializer())
                    .map(Some)
            } else {
                // Free-form keys keep their position.
                let key_node = KeyNode(entry);
                seed.deserialize(key_node).map(Some)
            };
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let entry = self
            .value
            .take()
            .ok_or_else(|| DeError("value requested before its key".to_string()))?;
        let path = if self.parent.path.is_empty() {
            entry.key.clone()
        } else if self.fields.is_some() {
            format!("{}.{}", self.parent.path, entry.key)
        } else {
            format!("{}.{}", self.parent.path, escape(&entry.key))
        };
        seed.deserialize(self.parent.child(&entry.value, path, Some(entry.key_pos)))
    }
}

/// A free-form mapping key, deserialized as a [`Located`] string or a plain one.
struct KeyNode<'a>(&'a Entry);

impl<'de> Deserializer<'de> for KeyNode<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_str(&self.0.key)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if name == LOCATED {
            let pos = self.0.key_pos;
            return visitor.visit_map(KeyLocatedAccess {
                key: &self.0.key,
                pos,
                step: 0,
            });
        }
        let _ = fields;
        visitor.visit_str(&self.0.key)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The name of [`Located`]'s field number `step`, as a map key; `None`
/// after the last.
fn located_field<'de, K: DeserializeSeed<'de>>(
    step: usize,
    seed: K,
) -> Result<Option<K::Value>, DeError> {
    match LOCATED_FIELDS.get(step) {
        Some(name) => seed.deserialize(name.into_deserializer()).map(Some),
        None => Ok(None),
    }
}

/// Feeds [`Located`]'s visitor: four numbers, then the value.
struct LocatedAccess<'a, 's> {
    de: Option<NodeDe<'a, 's>>,
    step: usize,
}

impl<'de> MapAccess<'de> for LocatedAccess<'_, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        located_field(self.step, seed)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let step = self.step;
        self.step += 1;
        let de = match (step, &self.de) {
            (4, _) => self
                .de
                .take()
                .ok_or_else(|| DeError("located value read twice".to_string()))?,
            (_, Some(de)) => {
                let key = de.key.unwrap_or_default();
                let n = [de.node.pos.line, de.node.pos.column, key.line, key.column][step];
                return seed.deserialize(n.into_deserializer());
            }
            (_, None) => return Err(DeError("located value read twice".to_string())),
        };
        seed.deserialize(de)
    }
}

/// Feeds [`Located`]'s visitor for a free-form mapping key.
struct KeyLocatedAccess<'a> {
    key: &'a str,
    pos: Pos,
    step: usize,
}

impl<'de> MapAccess<'de> for KeyLocatedAccess<'_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        located_field(self.step, seed)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let step = self.step;
        self.step += 1;
        match step {
            0 => seed.deserialize(self.pos.line.into_deserializer()),
            1 => seed.deserialize(self.pos.column.into_deserializer()),
            2 | 3 => seed.deserialize(0usize.into_deserializer()),
            _ => seed.deserialize(self.key.into_deserializer()),
        }
    }
}

/// Reads a plain scalar as an unsigned integer: ASCII digits only, no sign,
/// no leading zero. The error is a code and the help text.
fn parse_uint(text: &str) -> Result<u64, (&'static str, String)> {
    parse_uint_text(text).map_err(|help| {
        if help.starts_with("too large") {
            ("out_of_range", help)
        } else {
            ("invalid_integer", help)
        }
    })
}

fn parse_uint_text(text: &str) -> Result<u64, String> {
    if text.is_empty() || matches!(text, "~" | "null" | "Null" | "NULL") {
        return Err("write a whole number, e.g. 300, or remove the key".to_string());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        if text.len() > 1 && text.starts_with('0') {
            let trimmed = text.trim_start_matches('0');
            let trimmed = if trimmed.is_empty() { "0" } else { trimmed };
            return Err(format!(
                "a leading zero is ambiguous (YAML 1.1 reads it as octal); write {trimmed}"
            ));
        }
        return text
            .parse::<u64>()
            .map_err(|_| "too large; write a smaller whole number".to_string());
    }
    if let Some((minutes, seconds)) = text.split_once(':')
        && let (Ok(m), Ok(s)) = (minutes.parse::<u64>(), seconds.parse::<u64>())
        && s < 60
        && minutes.bytes().all(|b| b.is_ascii_digit())
        && seconds.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!(
            "write a number of seconds, not minutes:seconds; {text} would be {}",
            m.saturating_mul(60).saturating_add(s)
        ));
    }
    if let Some((whole, frac)) = text.split_once('.')
        && !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b == b'0')
    {
        return Err(format!(
            "write a whole number without a decimal point: {whole}"
        ));
    }
    Err("write a whole number in plain decimal digits, e.g. 300".to_string())
}

/// `python agent.py --x` → `["python", "agent.py", "--x"]`, the list form of
/// a string given where a list belongs.
fn list_form(text: &str) -> String {
    let parts: Vec<String> = text
        .split_whitespace()
        .map(|p| format!("{:?}", p))
        .collect();
    if parts.is_empty() {
        return "[\"…\"]".to_string();
    }
    format!("[{}]", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uint_spellings() {
        assert_eq!(parse_uint("300"), Ok(300));
        assert_eq!(parse_uint("0"), Ok(0));
        assert!(parse_uint("0443").unwrap_err().1.contains("write 443"));
        assert!(parse_uint("1:30").unwrap_err().1.contains("would be 90"));
        assert!(parse_uint("300.0").unwrap_err().1.contains(": 300"));
        assert!(parse_uint("0x1F").is_err());
        assert!(parse_uint("1e3").is_err());
        assert!(parse_uint("+5").is_err());
        assert_eq!(
            parse_uint("99999999999999999999999").unwrap_err().0,
            "out_of_range"
        );
    }

    #[test]
    fn list_form_splits_words() {
        assert_eq!(list_form("python agent.py"), r#"["python", "agent.py"]"#);
    }
}
