//! `llm`: the model providers the agent reaches through the LLM gate, what
//! their models cost, and the caps on model spend alone.

use rust_decimal::Decimal;

use crate::values::{EnvVarName, HttpUrl, ProviderId};

/// `llm.providers[].max_output_tokens` when the Agentfile names none.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 8192;

/// Largest `llm.providers[].max_output_tokens`.
pub const MAX_OUTPUT_TOKENS: u32 = 1_000_000;

/// Longest model name, in bytes.
pub const MAX_MODEL_NAME_LEN: usize = 128;

/// `llm`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Llm {
    /// Declared providers, in Agentfile order: ids unique, and unique as
    /// `CONSTLE_LLM_<ID>_URL`; at most one [`LlmApi::Anthropic`] and at most
    /// one of the OpenAI family.
    pub providers: Vec<LlmProvider>,
    /// Caps on model spend alone.
    pub spending: LlmSpending,
}

impl Llm {
    /// The provider with this id.
    pub fn provider(&self, id: &str) -> Option<&LlmProvider> {
        self.providers.iter().find(|p| p.id == id)
    }
}

/// One entry of `llm.providers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LlmProvider {
    /// The provider's id.
    pub id: ProviderId,
    /// The API it speaks.
    pub api: LlmApi,
    /// The upstream base URL (host side only; the agent never sees it).
    pub url: HttpUrl,
    /// The host variable holding the provider's key, read when the run
    /// starts ([`LlmProvider::key`]), never kept here.
    pub key_secret_ref: EnvVarName,
    /// The output maximum a request without one gets, and the ceiling a
    /// larger request is lowered to: 1 to [`MAX_OUTPUT_TOKENS`], default
    /// [`DEFAULT_MAX_OUTPUT_TOKENS`].
    pub max_output_tokens: u32,
    /// The models the agent may use, names unique, never empty.
    pub models: Vec<LlmModel>,
}

impl LlmProvider {
    /// The variable through which the agent reaches this provider.
    pub fn env_var(&self) -> String {
        self.id.env_var()
    }

    /// The model with this exact name.
    pub fn model(&self, name: &str) -> Option<&LlmModel> {
        self.models.iter().find(|m| m.name == name)
    }
}

/// `llm.providers[].api`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LlmApi {
    /// `anthropic`: the Anthropic Messages API.
    Anthropic,
    /// `openai`: the OpenAI Responses and Chat Completions APIs.
    OpenAi,
    /// `openai-compatible`: Chat Completions on another host.
    OpenAiCompatible,
}

/// Variables constle sets for the agent for an Anthropic provider.
const ANTHROPIC_ENV: [&str; 2] = ["ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"];

/// Variables constle sets for the agent for an OpenAI-family provider.
const OPENAI_ENV: [&str; 3] = ["OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEX_API_KEY"];

/// What `sandbox.env` may not set beside an Anthropic provider: what
/// constle sets, and the token Anthropic's clients send instead of a key.
const ANTHROPIC_RESERVED: [&str; 3] = [
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
];

impl LlmApi {
    /// Every API, in the order the Agentfile's docs list them.
    pub const ALL: [LlmApi; 3] = [LlmApi::Anthropic, LlmApi::OpenAi, LlmApi::OpenAiCompatible];

    /// As written in the Agentfile.
    pub fn as_str(self) -> &'static str {
        match self {
            LlmApi::Anthropic => "anthropic",
            LlmApi::OpenAi => "openai",
            LlmApi::OpenAiCompatible => "openai-compatible",
        }
    }

    /// The variables constle sets for the agent for a provider of this
    /// API, besides its `CONSTLE_LLM_<ID>_URL`: the base URL first, then
    /// the variables that get the placeholder key. Two providers whose
    /// APIs set the same variables cannot both be declared.
    pub fn agent_env(self) -> &'static [&'static str] {
        match self {
            LlmApi::Anthropic => &ANTHROPIC_ENV,
            LlmApi::OpenAi | LlmApi::OpenAiCompatible => &OPENAI_ENV,
        }
    }

    /// The variables `sandbox.env` may not set while a provider of this API
    /// is declared: [`LlmApi::agent_env`], and any other credential its
    /// clients would send in place of the key the gate adds.
    pub fn reserved_env(self) -> &'static [&'static str] {
        match self {
            LlmApi::Anthropic => &ANTHROPIC_RESERVED,
            LlmApi::OpenAi | LlmApi::OpenAiCompatible => &OPENAI_ENV,
        }
    }
}

/// One entry of `llm.providers[].models`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LlmModel {
    /// The exact name requests carry: 1 to [`MAX_MODEL_NAME_LEN`] bytes of
    /// visible ASCII (no whitespace). Compared byte for byte.
    pub name: String,
    /// What its tokens cost.
    pub prices: ModelPrices,
}

/// A model's prices: USD per million tokens, exact, zero or more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelPrices {
    /// `input_usd_per_mtok`: input tokens.
    pub input: Decimal,
    /// `output_usd_per_mtok`: output tokens.
    pub output: Decimal,
    /// `cached_input_usd_per_mtok`: input tokens read from the provider's
    /// cache; `input` when not declared.
    pub cached_input: Decimal,
    /// `cache_write_usd_per_mtok`: input tokens written to the provider's
    /// cache; `input` when not declared.
    pub cache_write: Decimal,
}

/// `llm.spending`: caps on model spend alone, beside `spending`'s. Amounts
/// are USD, exact, zero or more.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LlmSpending {
    /// Cap for one run.
    pub max_per_run_usd: Option<Decimal>,
    /// Cap per UTC day, across runs.
    pub max_per_day_usd: Option<Decimal>,
    /// Cap per UTC month, across runs.
    pub max_per_month_usd: Option<Decimal>,
}
