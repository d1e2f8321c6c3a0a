//! What the gate is told about one provider: the plain types the run maps
//! the Agentfile's `llm.providers[]` onto. No parsing of the Agentfile
//! here; the manifest crate validates, the run converts.

use std::collections::BTreeMap;
use std::fmt;

use hyper::Uri;
use rust_decimal::Decimal;
use zeroize::Zeroizing;

/// The API a provider speaks, which fixes the paths the gate serves, the
/// request fields it reads, the usage it parses and the shape of its
/// errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// The Anthropic Messages API.
    Anthropic,
    /// OpenAI: the Responses and the Chat Completions APIs.
    OpenAi,
    /// Another host speaking OpenAI's Chat Completions API.
    OpenAiCompatible,
}

impl Api {
    /// The name the Agentfile uses (`anthropic`, `openai`, `openai-compatible`).
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::OpenAi => "openai",
            Api::OpenAiCompatible => "openai-compatible",
        }
    }
}

/// A model's prices, in USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prices {
    /// Input tokens read without a cache.
    pub input: Decimal,
    /// Output tokens (reasoning included).
    pub output: Decimal,
    /// Input tokens read from the provider's prompt cache.
    pub cached_input: Decimal,
    /// Input tokens written to the provider's prompt cache.
    pub cache_write: Decimal,
}

impl Prices {
    /// The highest price any input token can cost: what the worst case of
    /// a request's input is priced at, since the gate cannot tell which of
    /// its tokens the provider will read from or write to its cache.
    pub fn max_input(&self) -> Decimal {
        self.input.max(self.cached_input).max(self.cache_write)
    }
}

/// The provider's API key. Zeroed on drop; its `Debug` shows nothing of it
/// and it has no `Display`, so no message, event or log line can carry it
/// by accident.
pub struct Key(Zeroizing<String>);

impl Key {
    /// Wraps `key` (read from the host variable `key_secret_ref` names).
    pub fn new(key: String) -> Key {
        Key(Zeroizing::new(key))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

/// One declared model provider.
#[derive(Debug)]
pub struct Provider {
    /// The provider's id (`llm.providers[].id`), as events name it.
    pub id: String,
    /// The API it speaks.
    pub api: Api,
    /// The upstream base URL: `https://api.anthropic.com`,
    /// `https://api.openai.com/v1`, or wherever an OpenAI-compatible host
    /// appends `/chat/completions`.
    pub upstream: Uri,
    /// The key the gate adds to every request it forwards.
    pub key: Key,
    /// The output maximum a request without one gets, and the ceiling a
    /// larger one is lowered to.
    pub max_output_tokens: u32,
    /// The models the agent may use, by exact name, with their prices.
    pub models: BTreeMap<String, Prices>,
}
