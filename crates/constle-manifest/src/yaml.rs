//! The pre-pass: YAML parser events into a small tree of located nodes.
//!
//! This is where the YAML features an Agentfile has no use for are refused,
//! each with its position: anchors, aliases, merge keys (`<<`), explicit tags
//! (`!!str`, `!foo`), directives, more than one document, complex keys,
//! duplicate keys. Because aliases are refused and never expanded, a
//! "billion laughs" document costs no more than its own bytes. Nesting depth
//! and node count are bounded here too.
//!
//! Scalars keep their text exactly as the parser produced it and their style
//! (plain or quoted), so later stages decide what a scalar means from the
//! schema, not from YAML's implicit typing.

use std::collections::HashMap;

use serde_saphyr::granit_parser::{self, Event, Marker, Parser, ScalarStyle, Span};

use crate::diagnostic::{Pos, Sink, show};

/// Deepest nesting of mappings and sequences accepted. The schema itself needs 6.
pub const MAX_DEPTH: usize = 16;

/// Most nodes (scalars, mappings, sequences) accepted in one Agentfile.
pub const MAX_NODES: usize = 50_000;

/// A node of the document tree.
#[derive(Debug)]
pub(crate) struct Node {
    pub kind: Kind,
    pub pos: Pos,
}

#[derive(Debug)]
pub(crate) enum Kind {
    /// A scalar; `plain` is false for quoted and block scalars.
    Scalar {
        text: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    Map(Vec<Entry>),
    /// Stands in for a node already reported as refused (an alias).
    Refused,
}

/// One `key: value` pair of a mapping. Keys are always scalars.
#[derive(Debug)]
pub(crate) struct Entry {
    pub key: String,
    pub key_pos: Pos,
    pub value: Node,
}

impl Node {
    /// A plain scalar YAML reads as null: empty, `~`, `null`, `Null`, `NULL`.
    pub fn is_null(&self) -> bool {
        match &self.kind {
            Kind::Scalar { text, plain: true } => {
                matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL")
            }
            _ => false,
        }
    }

    /// What this node is, for "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Scalar { text, plain } => {
                if self.is_null() {
                    if text.is_empty() {
                        "nothing (null)".to_string()
                    } else {
                        format!("null ({})", show(text))
                    }
                } else if *plain {
                    format!("the value {}", show(text))
                } else {
                    format!("the string {}", show(text))
                }
            }
            Kind::Seq(_) => "a list".to_string(),
            Kind::Map(_) => "a mapping".to_string(),
            Kind::Refused => "a refused node".to_string(),
        }
    }
}

fn pos(marker: &Marker) -> Pos {
    Pos {
        line: marker.line(),
        column: marker.col() + 1,
    }
}

/// A collection being built.
enum Frame {
    Seq {
        pos: Pos,
        items: Vec<Node>,
    },
    Map {
        pos: Pos,
        entries: Vec<Entry>,
        key: KeyState,
        seen: HashMap<String, Pos>,
    },
}

/// Where a mapping is between a key and its value.
enum KeyState {
    /// The next node is a key.
    Expecting,
    /// The next node is the value of this key.
    Have(String, Pos),
    /// The next node is the value of a refused key: dropped.
    Skip,
}

/// Parses `source` into a tree. Refusals go to `sink`; `None` means there is
/// no tree to go on with (a syntax error, too deep, more than one document,
/// or an empty document).
pub(crate) fn parse(source: &str, sink: &mut Sink) -> Option<Node> {
    let mut options = granit_parser::Options::default();
    options.disallow_directives = true;
    options.emit_anchor_events = true;
    options.emit_unresolved_aliases = true;
    options.set_emit_comments(false);
    options.flow_nesting_limit = MAX_DEPTH + 1;
    options.block_nesting_limit = MAX_DEPTH + 1;

    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Node> = None;
    let mut documents = 0usize;
    let mut nodes = 0usize;

    for item in Parser::new_from_str_with_options(source, options) {
        let (event, span) = match item {
            Ok(item) => item,
            Err(error) => {
                let message = error.info();
                let (code, help) = match error.kind() {
                    granit_parser::ErrorKind::DirectiveDisallowed => (
                        "directive_not_allowed",
                        "remove the `%` directive line; an Agentfile is plain YAML".to_string(),
                    ),
                    _ if message.contains("tab") => (
                        "yaml_syntax",
                        "indent with spaces; YAML does not allow tabs for indentation".to_string(),
                    ),
                    _ => (
                        "yaml_syntax",
                        "fix the YAML syntax at this position (check indentation, quotes and brackets)"
                            .to_string(),
                    ),
                };
                let message = if message.is_empty() {
                    "invalid YAML".to_string()
                } else {
                    format!("invalid YAML: {message}")
                };
                sink.error(code, pos(error.marker()), message, Some(help));
                return None;
            }
        };
        let at = pos(&span.start);
        if sink.full() {
            sink.overflow(at);
            return None;
        }
        let node = match event {
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    sink.error(
                        "multiple_documents",
                        at,
                        "more than one YAML document; an Agentfile is exactly one",
                        Some(
                            "remove this `---` and everything after it, or merge the documents"
                                .to_string(),
                        ),
                    );
                    return None;
                }
                continue;
            }
            Event::Anchor(_, name) => {
                sink.error(
                    "anchor_not_allowed",
                    at,
                    format!("anchor &{} is not allowed in an Agentfile", name),
                    Some("remove the anchor and write the value out in full".to_string()),
                );
                continue;
            }
            Event::Alias(_) | Event::UnresolvedAlias(_) => {
                let text = span_text(source, &span).unwrap_or("*…");
                sink.error_poison(
                    "alias_not_allowed",
                    at,
                    format!("alias {} is not allowed in an Agentfile", show(text)),
                    Some(
                        "write the value out in full instead of referring to an anchor".to_string(),
                    ),
                );
                Node {
                    kind: Kind::Refused,
                    pos: at,
                }
            }
            Event::Scalar(text, style, _, tag) => {
                if let Some(tag) = tag {
                    refuse_tag(sink, &span, &tag.original(), at);
                }
                let plain = style == ScalarStyle::Plain;
                // An empty value (`key:`) comes as a zero-width `~`; keep it empty.
                let empty = plain && span.start.index() == span.end.index();
                Node {
                    kind: Kind::Scalar {
                        text: if empty {
                            String::new()
                        } else {
                            text.into_owned()
                        },
                        plain,
                    },
                    pos: at,
                }
            }
            Event::SequenceStart(_, _, ref tag) | Event::MappingStart(_, _, ref tag) => {
                if let Some(tag) = tag {
                    refuse_tag(sink, &span, &tag.original(), at);
                }
                nodes += 1;
                if nodes > MAX_NODES {
                    too_many_nodes(sink, at);
                    return None;
                }
                if stack.len() >= MAX_DEPTH {
                    sink.error(
                        "nesting_too_deep",
                        at,
                        format!("nesting deeper than {MAX_DEPTH} levels"),
                        Some("an Agentfile needs at most 6 levels; flatten this value".to_string()),
                    );
                    return None;
                }
                stack.push(if matches!(event, Event::SequenceStart(..)) {
                    Frame::Seq {
                        pos: at,
                        items: Vec::new(),
                    }
                } else {
                    Frame::Map {
                        pos: at,
                        entries: Vec::new(),
                        key: KeyState::Expecting,
                        seen: HashMap::new(),
                    }
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Frame::Seq { pos, items }) => Node {
                    kind: Kind::Seq(items),
                    pos,
                },
                Some(Frame::Map { pos, entries, .. }) => Node {
                    kind: Kind::Map(entries),
                    pos,
                },
                None => continue,
            },
            _ => continue,
        };
        nodes += 1;
        if nodes > MAX_NODES {
            too_many_nodes(sink, at);
            return None;
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries, key, seen, ..
            }) => match std::mem::replace(key, KeyState::Expecting) {
                KeyState::Expecting => *key = accept_key(sink, node, seen),
                KeyState::Have(name, key_pos) => entries.push(Entry {
                    key: name,
                    key_pos,
                    value: node,
                }),
                KeyState::Skip => {}
            },
        }
    }

    match root {
        None => {
            sink.error(
                "empty_document",
                Pos::START,
                "the Agentfile is empty",
                Some(
                    "write a mapping with at least `name:` and `sandbox:` (see docs/agentfile.md)"
                        .to_string(),
                ),
            );
            None
        }
        Some(node) if node.is_null() => {
            sink.error(
                "empty_document",
                node.pos,
                "the Agentfile holds no mapping",
                Some(
                    "write a mapping with at least `name:` and `sandbox:` (see docs/agentfile.md)"
                        .to_string(),
                ),
            );
            None
        }
        root => root,
    }
}

/// Checks a node in key position; decides what happens to the value after it.
fn accept_key(sink: &mut Sink, node: Node, seen: &mut HashMap<String, Pos>) -> KeyState {
    let Kind::Scalar { text, plain } = node.kind else {
        if !matches!(node.kind, Kind::Refused) {
            sink.error(
                "invalid_key",
                node.pos,
                format!(
                    "a mapping key must be a plain name, found {}",
                    Node::describe(&node)
                ),
                Some("write `name: value` with a simple word as the name".to_string()),
            );
        }
        return KeyState::Skip;
    };
    if plain && text == "<<" {
        sink.error(
            "merge_key_not_allowed",
            node.pos,
            "merge key `<<` is not allowed in an Agentfile",
            Some("write every field of this mapping out in full".to_string()),
        );
        return KeyState::Skip;
    }
    if let Some(first) = seen.get(&text) {
        sink.error(
            "duplicate_key",
            node.pos,
            format!("duplicate key {}", show(&text)),
            Some(format!(
                "it is already set at line {}, column {}; keep one of them",
                first.line, first.column
            )),
        );
        return KeyState::Skip;
    }
    seen.insert(text.clone(), node.pos);
    KeyState::Have(text, node.pos)
}

fn refuse_tag(sink: &mut Sink, span: &Span, tag: &str, at: Pos) {
    let tag_pos = span.tag_start.as_ref().map(pos).unwrap_or(at);
    sink.error(
        "tag_not_allowed",
        tag_pos,
        format!("explicit tag {} is not allowed in an Agentfile", show(tag)),
        Some("remove the tag; quote the value if you want it read as text".to_string()),
    );
}

fn too_many_nodes(sink: &mut Sink, at: Pos) {
    sink.error(
        "too_many_nodes",
        at,
        format!("more than {MAX_NODES} values in one Agentfile"),
        Some("an Agentfile is a short policy; split out or remove the bulk data".to_string()),
    );
}

fn span_text<'a>(source: &'a str, span: &Span) -> Option<&'a str> {
    let start = span.start.byte_offset()?;
    let end = span.end.byte_offset()?;
    source.get(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn run(source: &str) -> (Option<Node>, Vec<(&'static str, usize, usize)>) {
        let mut sink = Sink::new(Path::new("t.yaml"));
        let node = parse(source, &mut sink);
        let (errors, _) = sink.finish();
        let codes = errors
            .iter()
            .map(|d| {
                let l = d.location.as_ref().unwrap();
                (d.code, l.line, l.column)
            })
            .collect();
        (node, codes)
    }

    #[test]
    fn scalars_keep_text_and_style() {
        let (node, errors) = run("a: no\nb: 'x'\nc:\nd: 0443\n");
        assert!(errors.is_empty(), "{errors:?}");
        let Kind::Map(entries) = node.unwrap().kind else {
            panic!()
        };
        let texts: Vec<_> = entries
            .iter()
            .map(|e| match &e.value.kind {
                Kind::Scalar { text, plain } => (e.key.as_str(), text.as_str(), *plain),
                _ => panic!(),
            })
            .collect();
        assert_eq!(
            texts,
            [
                ("a", "no", true),
                ("b", "x", false),
                ("c", "", true),
                ("d", "0443", true)
            ]
        );
        assert_eq!(entries[1].key_pos, Pos { line: 2, column: 1 });
        assert_eq!(entries[1].value.pos, Pos { line: 2, column: 4 });
    }

    #[test]
    fn refusals_are_located() {
        let (_, errors) = run("a: &x 1\nb: *x\nc: !!str 3\n<<: {d: 1}\na: 2\n");
        assert_eq!(
            errors,
            [
                ("anchor_not_allowed", 1, 4),
                ("alias_not_allowed", 2, 4),
                ("tag_not_allowed", 3, 4),
                ("merge_key_not_allowed", 4, 1),
                ("duplicate_key", 5, 1),
            ]
        );
    }

    #[test]
    fn depth_is_bounded() {
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        let (node, errors) = run(&deep);
        assert!(node.is_none());
        assert_eq!(errors.len(), 1, "{errors:?}");
    }

    #[test]
    fn second_document_is_refused() {
        let (node, errors) = run("a: 1\n---\nb: 2\n");
        assert!(node.is_none());
        assert_eq!(errors, [("multiple_documents", 2, 1)]);
    }
}
