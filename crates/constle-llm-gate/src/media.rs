//! The parts of a request body the provider reads beyond its bytes: media
//! held inline (an image, a PDF), whose tokens are not bounded by their
//! length, and references to input held elsewhere (a URL, a file id, a
//! stored item), which no bound covers at all.
//!
//! Every object of the body is looked at, wherever it sits (a message, a
//! tool result inside one, a Responses input item), by its `type`; so a
//! nesting the gate was not written for is looked at all the same. Tool
//! definitions (`tools`) and the input of a recorded tool call
//! (`tool_use.input`) are skipped: they are the agent's own data, where
//! an object typed `image` means nothing to the provider.

use serde_json::{Map, Value};

use crate::reason::Reason;

/// The most input tokens one inline image can cost. Anthropic resizes
/// images to at most 1568 pixels on the long edge (about 1,600 tokens);
/// OpenAI's most detailed settings stay under about 10,000 (patches
/// times the model's multiplier). Twice the larger, for models to come.
pub const IMAGE_TOKENS: u64 = 20_000;

/// The most input tokens one inline document (a PDF) can cost: its pages
/// are read as text and images, and a few hundred bytes of PDF can make a
/// page, so its length bounds nothing; what bounds it is the model's
/// context window, which no model of these APIs has larger than this.
pub const DOCUMENT_TOKENS: u64 = 1_000_000;

/// What a body holds inline besides its text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Media {
    pub(crate) images: u64,
    pub(crate) documents: u64,
}

impl Media {
    /// The input tokens the media may add to the body's bound.
    pub(crate) fn tokens(self) -> u64 {
        self.images
            .saturating_mul(IMAGE_TOKENS)
            .saturating_add(self.documents.saturating_mul(DOCUMENT_TOKENS))
    }
}

/// Why a part cannot be let through: the reason and what was refused.
pub(crate) type Refused = (Reason, String);

/// Counts the inline media of `body` (a request's top-level object), or
/// says which part makes its input unbounded or unsupported.
pub(crate) fn scan(body: &Map<String, Value>) -> Result<Media, Refused> {
    let mut media = Media::default();
    for (key, value) in body {
        if key != "tools" {
            walk(value, &mut media)?;
        }
    }
    Ok(media)
}

fn walk(value: &Value, media: &mut Media) -> Result<(), Refused> {
    match value {
        Value::Array(items) => items.iter().try_for_each(|item| walk(item, media)),
        Value::Object(object) => {
            let kind = object.get("type").and_then(Value::as_str);
            if let Some(kind) = kind {
                part(kind, object, media)?;
            }
            let skipped = matches!(kind, Some("tool_use" | "server_tool_use"));
            object
                .iter()
                .filter(|(key, _)| !(skipped && *key == "input"))
                .try_for_each(|(_, value)| walk(value, media))
        }
        _ => Ok(()),
    }
}

/// Checks one typed object.
fn part(kind: &str, object: &Map<String, Value>, media: &mut Media) -> Result<(), Refused> {
    let unbounded = |what: &str| Err((Reason::InputUnbounded, what.to_owned()));
    match kind {
        // Anthropic: `source` says where the bytes are.
        "image" | "document" => {
            let source = object.get("source").and_then(Value::as_object);
            match source.and_then(|s| s.get("type")).and_then(Value::as_str) {
                Some("base64") if kind == "image" => media.images += 1,
                Some("base64") => media.documents += 1,
                Some("text" | "content") if kind == "document" => {}
                _ => {
                    return unbounded(&format!(
                        "an {kind} not held in the body (by URL or file id)"
                    ));
                }
            }
        }
        "container_upload" | "item_reference" => {
            return unbounded(&format!("a {kind} (input held by the provider)"));
        }
        // OpenAI Responses.
        "input_image" => {
            let url = object.get("image_url").and_then(Value::as_str);
            if !url.is_some_and(is_data_url) || object.contains_key("file_id") {
                return unbounded("an input_image not held in the body (by URL or file id)");
            }
            media.images += 1;
        }
        "input_file" => {
            let inline = object.get("file_data").is_some_and(Value::is_string);
            if !inline || object.contains_key("file_id") || object.contains_key("file_url") {
                return unbounded("an input_file not held in the body (by URL or file id)");
            }
            media.documents += 1;
        }
        // OpenAI Chat Completions.
        "image_url" => {
            let url = object
                .get("image_url")
                .and_then(|i| i.get("url"))
                .and_then(Value::as_str);
            if !url.is_some_and(is_data_url) {
                return unbounded("an image_url not held in the body (a URL)");
            }
            media.images += 1;
        }
        "file" => {
            let file = object.get("file").and_then(Value::as_object);
            let inline = file.is_some_and(|f| f.get("file_data").is_some_and(Value::is_string));
            if !inline || file.is_some_and(|f| f.contains_key("file_id")) {
                return unbounded("a file not held in the body (by file id)");
            }
            media.documents += 1;
        }
        "input_audio" => {
            return Err((
                Reason::Unsupported,
                "audio input (priced per second, not per token of the body)".to_owned(),
            ));
        }
        _ => {}
    }
    Ok(())
}

fn is_data_url(url: &str) -> bool {
    url.get(..5)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scan_json(body: Value) -> Result<Media, Reason> {
        match body {
            Value::Object(object) => scan(&object).map_err(|(reason, _)| reason),
            _ => unreachable!("tests pass objects"),
        }
    }

    #[test]
    fn inline_media_is_counted_wherever_it_sits() {
        let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}});
        let pdf = json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AAAA"}});
        let body = json!({"messages": [
            {"role": "user", "content": [image, pdf, {"type": "text", "text": "hi"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [image]}]},
        ]});
        assert_eq!(
            scan_json(body),
            Ok(Media {
                images: 2,
                documents: 1
            })
        );
        let openai = json!({"input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
            {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,AAAA"},
        ]}]});
        assert_eq!(
            scan_json(openai),
            Ok(Media {
                images: 1,
                documents: 1
            })
        );
        let chat = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "DATA:image/png;base64,AAAA"}},
            {"type": "file", "file": {"file_data": "AAAA"}},
        ]}]});
        assert_eq!(
            scan_json(chat),
            Ok(Media {
                images: 1,
                documents: 1
            })
        );
    }

    #[test]
    fn input_held_elsewhere_is_unbounded() {
        let parts = [
            json!({"type": "image", "source": {"type": "url", "url": "https://x.example/a.png"}}),
            json!({"type": "image", "source": {"type": "file", "file_id": "file_1"}}),
            json!({"type": "image"}),
            json!({"type": "document", "source": {"type": "url", "url": "https://x.example/a.pdf"}}),
            json!({"type": "input_image", "image_url": "https://x.example/a.png"}),
            json!({"type": "input_image", "file_id": "file_1"}),
            json!({"type": "input_image", "image_url": "data:image/png;base64,AA", "file_id": "f"}),
            json!({"type": "input_file", "file_id": "file_1"}),
            json!({"type": "input_file", "file_url": "https://x.example/a.pdf"}),
            json!({"type": "image_url", "image_url": {"url": "https://x.example/a.png"}}),
            json!({"type": "file", "file": {"file_id": "file_1"}}),
            json!({"type": "item_reference", "id": "msg_1"}),
            json!({"type": "container_upload", "file_id": "file_1"}),
        ];
        for part in parts {
            let body = json!({"messages": [{"role": "user", "content": [part.clone()]}]});
            assert_eq!(scan_json(body), Err(Reason::InputUnbounded), "{part}");
        }
        let audio = json!({"messages": [{"content": [{"type": "input_audio", "input_audio": {"data": "AA"}}]}]});
        assert_eq!(scan_json(audio), Err(Reason::Unsupported));
    }

    #[test]
    fn tool_definitions_and_tool_inputs_are_the_agents_data() {
        let body = json!({
            "tools": [{"name": "t", "input_schema": {"type": "image"}}],
            "messages": [{"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "t", "input": {"type": "image_url", "x": 1}},
            ]}],
        });
        assert_eq!(scan_json(body), Ok(Media::default()));
    }
}
