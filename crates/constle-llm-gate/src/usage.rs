//! The usage a provider reports, read from its response as it passes: a
//! JSON body once whole, or each event of an SSE stream.
//!
//! The four counts are disjoint, whatever the API: `input` is the input
//! read without a cache, `cached_input` the input read from it,
//! `cache_write` the input written to it, `output` the output (reasoning
//! included). Anthropic reports them so; OpenAI counts cached tokens
//! inside its input count, so they are taken out of it here.
//!
//! Usage counts as reported only once the provider's final count has
//! arrived: Anthropic's `message_delta` (its counts are cumulative; the
//! `message_start` ones alone undercount the output), OpenAI's
//! `response.completed` / `response.incomplete` / `response.failed`, the
//! final chat chunk with `usage`, or a whole JSON body. A stream cut
//! before that has no usage, and the call is charged its reservation.

use rust_decimal::Decimal;
use serde_json::Value;

use crate::config::{Api, Prices};
use crate::inspect::{MAX_BODY_BYTES, cost};
use crate::route::Kind;

/// Token counts of one call, disjoint (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens read without a cache.
    pub input: u64,
    /// Input tokens read from the provider's cache.
    pub cached_input: u64,
    /// Input tokens written to the provider's cache.
    pub cache_write: u64,
    /// Output tokens, reasoning included.
    pub output: u64,
}

impl Usage {
    /// What these tokens cost at `prices`; `None` on overflow.
    pub fn cost(&self, prices: &Prices) -> Option<Decimal> {
        [
            cost(self.input, prices.input)?,
            cost(self.cached_input, prices.cached_input)?,
            cost(self.cache_write, prices.cache_write)?,
            cost(self.output, prices.output)?,
        ]
        .into_iter()
        .try_fold(Decimal::ZERO, Decimal::checked_add)
    }

    /// All input and output tokens: what a later call continuing this
    /// response reads again, at most.
    pub fn total(&self) -> u64 {
        self.input
            .saturating_add(self.cached_input)
            .saturating_add(self.cache_write)
            .saturating_add(self.output)
    }
}

fn count(value: &Value, key: &str) -> Option<u64> {
    value.get(key).and_then(Value::as_u64)
}

/// Anthropic's `usage` object, its fields laid over `usage` (a
/// `message_delta` carries only the counts that changed).
fn anthropic(usage: &Value, into: &mut Usage) {
    let fields: [(&str, &mut u64); 4] = [
        ("input_tokens", &mut into.input),
        ("cache_read_input_tokens", &mut into.cached_input),
        ("cache_creation_input_tokens", &mut into.cache_write),
        ("output_tokens", &mut into.output),
    ];
    for (key, slot) in fields {
        if let Some(n) = count(usage, key) {
            *slot = n;
        }
    }
}

/// OpenAI's `usage`: Responses (`input_tokens`) or Chat Completions
/// (`prompt_tokens`) names.
fn openai(usage: &Value) -> Option<Usage> {
    let (input, output, details) = match count(usage, "input_tokens") {
        Some(input) => (
            input,
            count(usage, "output_tokens")?,
            "input_tokens_details",
        ),
        None => (
            count(usage, "prompt_tokens")?,
            count(usage, "completion_tokens")?,
            "prompt_tokens_details",
        ),
    };
    let cached = usage
        .get(details)
        .and_then(|d| count(d, "cached_tokens"))
        .unwrap_or(0)
        .min(input);
    Some(Usage {
        input: input - cached,
        cached_input: cached,
        cache_write: 0,
        output,
    })
}

/// What a response told the gate, once it has passed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    /// The final usage, if it arrived.
    pub(crate) usage: Option<Usage>,
    /// A Responses response that completed: its id, for
    /// `previous_response_id`.
    pub(crate) completed: Option<String>,
}

/// Reads usage from a response as it passes, chunk by chunk, without
/// holding the agent's bytes back.
#[derive(Debug)]
pub(crate) struct Tracker {
    api: Api,
    kind: Kind,
    stream: bool,
    /// The unparsed tail of an SSE stream, or the whole of a JSON body.
    buf: Vec<u8>,
    /// `data` of the SSE event being read.
    data: Vec<u8>,
    /// Anthropic: counts so far (from `message_start`, then deltas).
    partial: Usage,
    /// Past what the gate reads (an endless line, a huge body): usage is
    /// then not reported.
    overflow: bool,
    reading: Reading,
}

impl Tracker {
    /// A tracker for the response to a call of `kind`; `stream` when the
    /// response is `text/event-stream`.
    pub(crate) fn new(api: Api, kind: Kind, stream: bool) -> Tracker {
        Tracker {
            api,
            kind,
            stream,
            buf: Vec::new(),
            data: Vec::new(),
            partial: Usage::default(),
            overflow: false,
            reading: Reading::default(),
        }
    }

    /// Reads one chunk of the response.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        if self.overflow {
            return;
        }
        self.buf.extend_from_slice(chunk);
        if self.buf.len() > MAX_BODY_BYTES {
            self.overflow = true;
            self.buf = Vec::new();
            return;
        }
        if self.stream {
            self.lines();
        }
    }

    /// What was read, once the response has ended (or was cut).
    pub(crate) fn finish(mut self) -> Reading {
        if !self.stream
            && !self.overflow
            && let Ok(body) = serde_json::from_slice::<Value>(&self.buf)
        {
            self.body(&body);
        }
        self.reading
    }

    fn lines(&mut self) {
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + pos;
            let line = self.buf[start..end]
                .strip_suffix(b"\r")
                .unwrap_or(&self.buf[start..end]);
            if line.is_empty() {
                let data = std::mem::take(&mut self.data);
                // Only an event that names `usage` can carry it: the token
                // deltas, nearly all of a stream, are not parsed at all.
                let usage = memchr::memmem::find(&data, b"\"usage\"").is_some();
                if let Some(event) = usage
                    .then(|| serde_json::from_slice::<Value>(&data).ok())
                    .flatten()
                {
                    self.event(&event);
                }
            } else if let Some(value) = line.strip_prefix(b"data:") {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                if !self.data.is_empty() {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
            }
            start = end + 1;
        }
        self.buf.drain(..start);
        if self.data.len() > MAX_BODY_BYTES {
            self.overflow = true;
        }
    }

    /// One event's JSON, of either API (the `type` inside names it).
    pub(crate) fn event(&mut self, event: &Value) {
        match (self.api, event.get("type").and_then(Value::as_str)) {
            (Api::Anthropic, Some("message_start")) => {
                if let Some(usage) = event.get("message").and_then(|m| m.get("usage")) {
                    anthropic(usage, &mut self.partial);
                }
            }
            (Api::Anthropic, Some("message_delta")) => {
                if let Some(usage) = event.get("usage") {
                    anthropic(usage, &mut self.partial);
                    self.reading.usage = Some(self.partial);
                }
            }
            (
                _,
                Some(kind @ ("response.completed" | "response.incomplete" | "response.failed")),
            ) => {
                let response = event.get("response");
                self.reading.usage = response.and_then(|r| r.get("usage")).and_then(openai);
                if kind == "response.completed" {
                    self.reading.completed = response
                        .and_then(|r| r.get("id"))
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                }
            }
            // A chat chunk: only the final one carries usage.
            (_, None) if self.kind == Kind::ChatCompletions => {
                if let Some(usage) = event.get("usage").and_then(openai) {
                    self.reading.usage = Some(usage);
                }
            }
            _ => {}
        }
    }

    /// A whole JSON response.
    fn body(&mut self, body: &Value) {
        let Some(usage) = body.get("usage") else {
            return;
        };
        self.reading.usage = match self.api {
            Api::Anthropic => {
                let mut read = Usage::default();
                anthropic(usage, &mut read);
                Some(read)
            }
            _ => openai(usage),
        };
        if self.kind == Kind::Responses
            && body.get("status").and_then(Value::as_str) == Some("completed")
        {
            self.reading.completed = body.get("id").and_then(Value::as_str).map(str::to_owned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(api: Api, kind: Kind, stream: bool, chunks: &[&str]) -> Reading {
        let mut tracker = Tracker::new(api, kind, stream);
        for chunk in chunks {
            tracker.push(chunk.as_bytes());
        }
        tracker.finish()
    }

    #[test]
    fn anthropic_stream_usage_is_cumulative_and_needs_the_delta() {
        let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":20,\"cache_creation_input_tokens\":30,\"output_tokens\":1}}}\n\n";
        let delta = "event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":55}}\r\n\r\n";
        let (a, b) = delta.split_at(40);
        let full = read(Api::Anthropic, Kind::Messages, true, &[start, a, b]);
        let expected = Usage {
            input: 10,
            cached_input: 20,
            cache_write: 30,
            output: 55,
        };
        assert_eq!(full.usage, Some(expected));
        let cut = read(Api::Anthropic, Kind::Messages, true, &[start]);
        assert_eq!(cut.usage, None);
    }

    #[test]
    fn openai_usage_takes_cached_tokens_out_of_input() {
        let completed = "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":{\"input_tokens\":100,\"input_tokens_details\":{\"cached_tokens\":40},\"output_tokens\":7}}}\n\n";
        let reading = read(Api::OpenAi, Kind::Responses, true, &[completed]);
        let expected = Usage {
            input: 60,
            cached_input: 40,
            cache_write: 0,
            output: 7,
        };
        assert_eq!(reading.usage, Some(expected));
        assert_eq!(reading.completed.as_deref(), Some("resp_1"));
        let chat = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\ndata: [DONE]\n\n",
        ];
        let reading = read(Api::OpenAiCompatible, Kind::ChatCompletions, true, &chat);
        let expected = Usage {
            input: 7,
            cached_input: 2,
            cache_write: 0,
            output: 3,
        };
        assert_eq!(reading.usage, Some(expected));
    }

    #[test]
    fn json_bodies_are_read_whole() {
        let body = r#"{"id":"msg_1","usage":{"input_tokens":3,"output_tokens":4}}"#;
        let (a, b) = body.split_at(10);
        let reading = read(Api::Anthropic, Kind::Messages, false, &[a, b]);
        assert_eq!(
            reading.usage,
            Some(Usage {
                input: 3,
                output: 4,
                ..Usage::default()
            })
        );
        let cut = read(Api::Anthropic, Kind::Messages, false, &[a]);
        assert_eq!(cut.usage, None);
        let resp =
            r#"{"id":"resp_9","status":"completed","usage":{"input_tokens":3,"output_tokens":4}}"#;
        let reading = read(Api::OpenAi, Kind::Responses, false, &[resp]);
        assert_eq!(reading.completed.as_deref(), Some("resp_9"));
    }

    #[test]
    fn cost_prices_each_count_at_its_own_price() {
        let prices = Prices {
            input: Decimal::new(3, 0),
            output: Decimal::new(15, 0),
            cached_input: Decimal::new(3, 1),
            cache_write: Decimal::new(375, 2),
        };
        let usage = Usage {
            input: 1_000_000,
            cached_input: 1_000_000,
            cache_write: 1_000_000,
            output: 1_000_000,
        };
        assert_eq!(usage.cost(&prices), Some(Decimal::new(2205, 2)));
    }
}
