//! The model gates of one run: one per provider the Agentfile declares
//! (`llm.providers`), each serving its own door into the sandbox on
//! 127.0.0.1, and announced to the agent through the variables
//! its clients read (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`, …) with a
//! placeholder key. The providers' keys and URLs stay here.
//!
//! The gates are built before anything of the run starts
//! ([`PreparedModelGates`]), since building one reads its key from
//! constle's environment: a key that is unset or unusable stops the run
//! before the audit log, the proxy or the sandbox exist.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};

use constle_llm_gate::{Api, CancellationToken, Gate, Key, Prices, Provider};
use constle_manifest::{LlmApi, LlmProvider, Manifest};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::doors::{self, OpenDoor};
use crate::error::RunError;
use crate::llm_spend::{ModelBook, ModelLog};
use crate::mcp::host_var;
use crate::stop::ModelStop;

/// The first port the doors of the model gates listen on inside the
/// sandbox; provider `n` (in Agentfile order) gets `LLM_BASE_PORT + n`.
const LLM_BASE_PORT: u16 = 4000;

/// The key the agent's clients are given, where they refuse to start
/// without one. The gate drops whatever key the agent sends.
pub const PLACEHOLDER_KEY: &str = "constle-gate-holds-the-key";

/// One gate per declared provider, in Agentfile order, not yet serving.
pub(crate) struct PreparedModelGates(Vec<Prepared>);

struct Prepared {
    id: String,
    api: LlmApi,
    /// `CONSTLE_LLM_<ID>_URL`.
    url_var: String,
    gate: Gate,
}

impl PreparedModelGates {
    /// Builds the gate of every declared provider, each with the key its
    /// `key_secret_ref` names; the first that cannot be built is the error.
    pub(crate) fn new(manifest: &Manifest) -> Result<PreparedModelGates, RunError> {
        let gates = manifest.llm.providers.iter().map(|declared| {
            let id = declared.id.to_string();
            let gate = Gate::new(provider(declared)?).map_err(|source| RunError::LlmGate {
                provider: id.clone(),
                source,
            })?;
            Ok(Prepared {
                id,
                api: declared.api,
                url_var: declared.env_var(),
                gate,
            })
        });
        gates.collect::<Result<_, _>>().map(PreparedModelGates)
    }
}

/// The gate's own view of a declared provider, with its key read from
/// constle's environment.
fn provider(declared: &LlmProvider) -> Result<Provider, RunError> {
    let key = declared.key(&host_var).map_err(|source| RunError::LlmKey {
        provider: declared.id.to_string(),
        source,
    })?;
    let upstream = declared
        .url
        .as_str()
        .parse()
        .map_err(|_| RunError::LlmGate {
            provider: declared.id.to_string(),
            source: constle_llm_gate::GateError::Url(declared.url.redacted()),
        })?;
    let models = declared.models.iter().map(|model| {
        let prices = model.prices;
        let prices = Prices {
            input: prices.input,
            output: prices.output,
            cached_input: prices.cached_input,
            cache_write: prices.cache_write,
        };
        (model.name.clone(), prices)
    });
    Ok(Provider {
        id: declared.id.to_string(),
        api: match declared.api {
            LlmApi::Anthropic => Api::Anthropic,
            LlmApi::OpenAi => Api::OpenAi,
            LlmApi::OpenAiCompatible => Api::OpenAiCompatible,
        },
        upstream,
        key: Key::new(key),
        max_output_tokens: declared.max_output_tokens,
        models: models.collect(),
    })
}

/// The running model gates. Dropping them stops accepting connections;
/// closing them ([`ModelGates::close`]) stops every one forwarding.
pub(crate) struct ModelGates {
    /// What charges and records the gates' calls; `None` without gates.
    book: Option<ModelBook>,
    doors: Vec<OpenDoor>,
    env: BTreeMap<String, String>,
    etc_files: BTreeMap<String, String>,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
    stopped: mpsc::UnboundedReceiver<ModelStop>,
    shutoff: CancellationToken,
}

impl ModelGates {
    /// Opens one door per gate and starts the gate on it, with `log`
    /// reserving, settling and recording its calls and refusals.
    pub(crate) fn start(
        prepared: PreparedModelGates,
        log: &ModelLog,
    ) -> Result<ModelGates, RunError> {
        let (stops, stopped) = mpsc::unbounded_channel();
        let shutoff = CancellationToken::new();
        let log = log.stopping(&shutoff, stops);
        let mut gates = ModelGates {
            book: Some(log.clone()),
            doors: Vec::new(),
            env: BTreeMap::new(),
            etc_files: BTreeMap::new(),
            tasks: Vec::new(),
            stopped,
            shutoff: shutoff.clone(),
        };
        for (prepared, port) in prepared.0.into_iter().zip(LLM_BASE_PORT..) {
            let Prepared {
                id,
                api,
                url_var,
                gate,
            } = prepared;
            let gate = gate
                .with_meter(log.clone())
                .with_recorder(log.clone())
                .with_shutoff(shutoff.clone());
            let listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
            let (door, listener) = doors::open(format!("llm-{id}"), listen);
            gates.tasks.push(tokio::spawn(gate.serve(listener)));
            gates.doors.push(door);
            let base = match api {
                LlmApi::Anthropic => format!("http://{listen}"),
                LlmApi::OpenAi | LlmApi::OpenAiCompatible => {
                    let base = format!("http://{listen}/v1");
                    gates
                        .etc_files
                        .insert(CODEX_CONFIG.to_owned(), codex_config(&base));
                    base
                }
            };
            gates.env.extend(agent_env(url_var, api, base));
        }
        Ok(gates)
    }

    /// No model gates: the Agentfile declares no provider.
    pub(crate) fn none() -> ModelGates {
        ModelGates {
            book: None,
            doors: Vec::new(),
            env: BTreeMap::new(),
            etc_files: BTreeMap::new(),
            tasks: Vec::new(),
            stopped: mpsc::unbounded_channel().1,
            shutoff: CancellationToken::new(),
        }
    }

    /// The doors to put into the sandbox (taken once).
    pub(crate) fn take_doors(&mut self) -> Vec<OpenDoor> {
        std::mem::take(&mut self.doors)
    }

    /// What the agent is told of each provider.
    pub(crate) fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    /// Variables the agent gets unless `sandbox.env` sets them: with an
    /// Anthropic provider, Claude Code's switch for the traffic it would
    /// send around the gate (telemetry, feature flags, its directory of
    /// servers), which the proxy would only refuse.
    pub(crate) fn defaults(&self) -> impl Iterator<Item = (String, String)> + '_ {
        let claude = self.env.contains_key("ANTHROPIC_BASE_URL");
        claude
            .then(|| {
                (
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(),
                    "1".to_owned(),
                )
            })
            .into_iter()
    }

    /// The files written into the sandbox's `/etc` for the agent CLIs.
    pub(crate) fn etc_files(&self) -> &BTreeMap<String, String> {
        &self.etc_files
    }

    /// Waits, at most `limit`, until every call the gates forwarded is
    /// settled and recorded; how many are not.
    pub(crate) async fn drained(&self, limit: std::time::Duration) -> usize {
        match &self.book {
            Some(book) => book.drained(limit).await,
            None => 0,
        }
    }

    /// Closes every model gate: from now on nothing is forwarded.
    pub(crate) fn close(&self) {
        self.shutoff.cancel();
    }

    /// Resolves when the model gates end the run.
    pub(crate) async fn stopped(&mut self) -> ModelStop {
        match self.stopped.recv().await {
            Some(stop) => stop,
            None => std::future::pending().await,
        }
    }
}

/// The variables through which the agent reaches a provider at `base`:
/// `url_var` (its `CONSTLE_LLM_<ID>_URL`), and those its API's clients
/// read: the first the base URL, the others the placeholder key.
fn agent_env(url_var: String, api: LlmApi, base: String) -> Vec<(String, String)> {
    let clients = api.agent_env().iter().enumerate().map(|(i, name)| {
        let value = if i == 0 { &base } else { PLACEHOLDER_KEY };
        ((*name).to_owned(), value.to_owned())
    });
    let own = (url_var, base.clone());
    std::iter::once(own).chain(clients).collect()
}

/// Codex's system-wide settings, below the user's own in its layers.
const CODEX_CONFIG: &str = "/etc/codex/config.toml";

/// What makes Codex CLI work in the sandbox untouched: it reads its base
/// URL from its settings, not from `OPENAI_BASE_URL`; its own sandbox
/// cannot start inside Constle's (every command would fail, and it would
/// still exit 0); its web search is a tool the provider runs, which the
/// gate refuses; and its analytics and plugin catalogue would only be
/// refused at the proxy.
fn codex_config(base: &str) -> String {
    format!(
        "# Written by constle for this run: Codex reaches the model gate.\n\
         openai_base_url = \"{base}\"\n\
         # Constle is the sandbox: Codex's own cannot start inside it.\n\
         sandbox_mode = \"danger-full-access\"\n\
         approval_policy = \"never\"\n\
         # Web search runs at the provider: the model gate refuses it.\n\
         web_search = \"disabled\"\n\
         \n\
         [analytics]\n\
         enabled = false\n\
         \n\
         [features]\n\
         plugins = false\n"
    )
}

impl Drop for ModelGates {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
