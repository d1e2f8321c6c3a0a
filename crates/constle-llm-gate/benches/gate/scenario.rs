//! What one measured call is: the API it speaks and whether it streams,
//! with the request body the client sends and what in the answer marks
//! the first token and each token.

use serde_json::json;

/// The model every request names (declared, priced).
pub const MODEL: &str = "bench-model";

/// The two APIs the bench speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// Anthropic Messages, `POST /v1/messages`.
    Anthropic,
    /// OpenAI Responses, `POST /v1/responses`.
    Responses,
}

/// One kind of call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scenario {
    pub api: Api,
    pub stream: bool,
}

impl Scenario {
    /// Every kind of call, in table order.
    pub const ALL: [Scenario; 4] = [
        Scenario {
            api: Api::Anthropic,
            stream: false,
        },
        Scenario {
            api: Api::Anthropic,
            stream: true,
        },
        Scenario {
            api: Api::Responses,
            stream: false,
        },
        Scenario {
            api: Api::Responses,
            stream: true,
        },
    ];

    pub fn label(self) -> &'static str {
        match (self.api, self.stream) {
            (Api::Anthropic, false) => "messages, JSON",
            (Api::Anthropic, true) => "messages, SSE",
            (Api::Responses, false) => "responses, JSON",
            (Api::Responses, true) => "responses, SSE",
        }
    }

    /// The path the client asks for, of the provider and of the gate alike
    /// (the gate's Anthropic base is the provider's root, its OpenAI base
    /// the root's `/v1`, as in an Agentfile).
    pub fn path(self) -> &'static str {
        match self.api {
            Api::Anthropic => "/v1/messages",
            Api::Responses => "/v1/responses",
        }
    }

    /// The request body: a short prompt, an output maximum of `tokens`.
    pub fn body(self, tokens: u64) -> String {
        let prompt = "Say tok as many times as you may.";
        match self.api {
            Api::Anthropic => json!({"model": MODEL, "max_tokens": tokens, "stream": self.stream,
                "messages": [{"role": "user", "content": prompt}]}),
            Api::Responses => json!({"model": MODEL, "max_output_tokens": tokens,
                "stream": self.stream, "input": prompt}),
        }
        .to_string()
    }

    /// What each token's event holds, once per token: the first one seen
    /// is the time to first token.
    pub fn token_marker(self) -> &'static [u8] {
        match self.api {
            Api::Anthropic => b"\"text_delta\"",
            Api::Responses => b"\"response.output_text.delta\"",
        }
    }

    /// What only the final event holds: an answer without it was cut.
    pub fn end_marker(self) -> &'static [u8] {
        match (self.api, self.stream) {
            (Api::Anthropic, true) => b"event: message_stop",
            (Api::Responses, true) => b"event: response.completed",
            (_, false) => b"\"output_tokens\"",
        }
    }
}
