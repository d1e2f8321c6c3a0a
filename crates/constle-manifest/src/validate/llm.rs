//! `llm`: the model providers the agent reaches through the LLM gate (each
//! its API, upstream URL, key variable, output ceiling and priced models),
//! and the caps on model spend alone.

use std::collections::HashMap;

use super::context::V;
use crate::de::{Field, Located, Pairs};
use crate::diagnostic::{Pos, show};
use crate::model::{
    DEFAULT_MAX_OUTPUT_TOKENS, Egress, Llm, LlmApi, LlmModel, LlmProvider, LlmSpending,
    MAX_MODEL_NAME_LEN, MAX_OUTPUT_TOKENS, ModelPrices, Network,
};
use crate::raw::{RawLlm, RawLlmSpending, RawModel, RawProvider};
use crate::values::{EnvVarName, InvalidValue, ProviderId, UrlHost, parse_amount};

impl V<'_, '_> {
    /// The `llm` section; `network` is the agent's, when valid, to warn
    /// about a provider the agent could reach around the gate.
    pub(super) fn llm(&mut self, raw: &Located<RawLlm>, network: Option<&Network>) -> Option<Llm> {
        let l = &raw.value;
        let providers = match &l.providers.0 {
            None => Some(Vec::new()),
            Some(list) => self.providers(list),
        };
        if let (Some(providers), Some(network)) = (&providers, network) {
            for (provider, raw) in providers
                .iter()
                .zip(l.providers.0.iter().flat_map(|p| &p.value))
            {
                self.around_the_gate(provider, raw, network);
            }
        }
        let spending = match &l.spending.0 {
            None => Some(LlmSpending::default()),
            Some(s) => self.llm_spending(&s.value),
        };
        Some(Llm {
            providers: providers?,
            spending: spending?,
        })
    }

    fn providers(&mut self, list: &Located<Vec<Located<RawProvider>>>) -> Option<Vec<LlmProvider>> {
        let ids = list.value.iter().filter_map(|p| p.value.id.0.as_ref());
        let mut ok = self.unique_ids(
            ids,
            "LLM provider",
            ("duplicate_provider_id", "provider_id_collision"),
            |id| ProviderId::new(id).ok().map(|id| id.env_var()),
        );
        // The first provider to set each base-URL variable, and where.
        let mut bases: HashMap<&str, (&LlmProvider, Pos)> = HashMap::new();
        let mut checked = Vec::new();
        for raw in &list.value {
            match self.provider(raw) {
                Some(provider) => checked.push((provider, raw)),
                None => ok = false,
            }
        }
        for (provider, raw) in &checked {
            let at = raw.value.api.0.as_ref().map_or(raw.pos, |a| a.pos);
            let base = provider.api.agent_env()[0];
            if let Some((first, pos)) = bases.get(base) {
                self.sink.error(
                    "duplicate_provider_api",
                    at,
                    format!(
                        "LLM providers {} ({}) and {} ({}) would both set {base} for the agent",
                        show(first.id.as_str()),
                        first.api.as_str(),
                        show(provider.id.as_str()),
                        provider.api.as_str()
                    ),
                    Some(format!(
                        "declare at most one anthropic provider and at most one of openai and openai-compatible; the other is at line {}",
                        pos.line
                    )),
                );
                ok = false;
                continue;
            }
            bases.insert(base, (provider, at));
        }
        ok.then(|| checked.into_iter().map(|(p, _)| p).collect())
    }

    fn provider(&mut self, raw: &Located<RawProvider>) -> Option<LlmProvider> {
        let p = &raw.value;
        let at = raw.pos;
        let id = self
            .required(
                &p.id,
                "llm.providers[].id",
                at,
                "name the provider, e.g. id: anthropic",
            )
            .and_then(|id| self.check(id, "invalid_provider_id", ProviderId::new));
        let api = self
            .required(
                &p.api,
                "llm.providers[].api",
                at,
                "write the API the provider speaks: anthropic, openai or openai-compatible",
            )
            .and_then(|a| self.api(a));
        let url = self
            .required(
                &p.url,
                "llm.providers[].url",
                at,
                "write the provider's base URL, e.g. url: https://api.anthropic.com",
            )
            .and_then(|u| self.url(u, "llm.providers[].url"));
        let key = self
            .required(
                &p.key_secret_ref,
                "llm.providers[].key_secret_ref",
                at,
                "name the host environment variable holding the key, e.g. key_secret_ref: ANTHROPIC_API_KEY",
            )
            .and_then(|k| Some((k, self.check(k, "invalid_env_name", EnvVarName::new)?)));
        let max_output_tokens = match &p.max_output_tokens.0 {
            None => Some(DEFAULT_MAX_OUTPUT_TOKENS),
            Some(m) => self.bounded(
                m,
                "max_output_tokens",
                (1, MAX_OUTPUT_TOKENS),
                "out_of_range",
                format!(
                    "write the most output tokens a request may ask for, from 1 to {MAX_OUTPUT_TOKENS}; the default is {DEFAULT_MAX_OUTPUT_TOKENS}"
                ),
            ),
        };
        let models = self
            .required(
                &p.models,
                "llm.providers[].models",
                at,
                "list the models the agent may use, each with its prices",
            )
            .and_then(|m| self.models(m));
        let (key_at, key) = key?;
        let provider = LlmProvider {
            id: id?,
            api: api?,
            url: url?,
            key_secret_ref: key,
            max_output_tokens: max_output_tokens?,
            models: models?,
        };
        if let Err(err) = provider.key(self.env) {
            let sent = format!(
                "the gate sends it to provider {}",
                show(provider.id.as_str())
            );
            self.secret_warning(key_at, &err, &sent, "");
        }
        Some(provider)
    }

    fn api(&mut self, value: &Located<String>) -> Option<LlmApi> {
        let names = LlmApi::ALL.map(LlmApi::as_str);
        let name = self.choice(value, "llm api", &names)?;
        LlmApi::ALL.into_iter().find(|api| api.as_str() == name)
    }

    /// `models`: at least one, names unique.
    fn models(&mut self, list: &Located<Vec<Located<RawModel>>>) -> Option<Vec<LlmModel>> {
        if list.value.is_empty() {
            self.sink.error(
                "empty_models",
                list.pos,
                "an LLM provider must declare at least one model",
                Some("list the exact model names the agent may use, each with its prices, or remove the provider".to_string()),
            );
            return None;
        }
        let mut out = Vec::new();
        let mut ok = true;
        let mut seen: HashMap<String, Pos> = HashMap::new();
        for raw in &list.value {
            let Some(model) = self.model(raw) else {
                ok = false;
                continue;
            };
            let at = raw.value.name.0.as_ref().map_or(raw.pos, |n| n.pos);
            if let Some(first) = seen.get(&model.name) {
                self.sink.error(
                    "duplicate_model",
                    at,
                    format!(
                        "model {} is listed twice for this provider",
                        show(&model.name)
                    ),
                    Some(format!("remove one; the first is at line {}", first.line)),
                );
                ok = false;
                continue;
            }
            seen.insert(model.name.clone(), at);
            out.push(model);
        }
        ok.then_some(out)
    }

    fn model(&mut self, raw: &Located<RawModel>) -> Option<LlmModel> {
        let m = &raw.value;
        let at = raw.pos;
        let name = self
            .required(
                &m.name,
                "llm.providers[].models[].name",
                at,
                "write the exact model name requests carry, e.g. name: claude-sonnet-4-5",
            )
            .and_then(|n| self.check(n, "invalid_model_name", check_model_name));
        let price = |v: &mut Self, field: &Field<String>, name: &str| {
            let help = format!("write its price in USD per million tokens, e.g. {name}: \"3.00\"");
            v.required(
                field,
                &format!("llm.providers[].models[].{name}"),
                at,
                &help,
            )
            .and_then(|p| v.check(p, "invalid_amount", parse_amount))
        };
        let input = price(self, &m.input_usd_per_mtok, "input_usd_per_mtok");
        let output = price(self, &m.output_usd_per_mtok, "output_usd_per_mtok");
        let cached_input = self.amount(&m.cached_input_usd_per_mtok);
        let cache_write = self.amount(&m.cache_write_usd_per_mtok);
        let input = input?;
        Some(LlmModel {
            name: name?,
            prices: ModelPrices {
                input,
                output: output?,
                cached_input: cached_input?.unwrap_or(input),
                cache_write: cache_write?.unwrap_or(input),
            },
        })
    }

    fn llm_spending(&mut self, s: &RawLlmSpending) -> Option<LlmSpending> {
        let run = self.amount(&s.max_per_run_usd);
        let day = self.amount(&s.max_per_day_usd);
        let month = self.amount(&s.max_per_month_usd);
        Some(LlmSpending {
            max_per_run_usd: run?,
            max_per_day_usd: day?,
            max_per_month_usd: month?,
        })
    }

    /// Warns when the agent's own egress reaches `provider`'s host: then it
    /// could call the provider directly, around the gate.
    fn around_the_gate(
        &mut self,
        provider: &LlmProvider,
        raw: &Located<RawProvider>,
        network: &Network,
    ) {
        let Some(url) = &raw.value.url.0 else {
            return;
        };
        let id = show(provider.id.as_str());
        let (message, help) = match (network.egress, provider.url.host()) {
            (Egress::Open, _) if !provider.url.is_loopback() => (
                format!(
                    "egress: open lets the agent reach provider {id}'s host too: the agent could reach the provider directly, around the gate"
                ),
                "write egress: restricted; the agent needs no allowed host to reach a provider through the gate".to_string(),
            ),
            (Egress::Restricted, UrlHost::Domain(host)) if network.allows(host) => (
                format!(
                    "provider {id}'s host {} is also in sandbox.network.allowed_hosts: the agent could reach the provider directly, around the gate",
                    show(host)
                ),
                format!(
                    "remove {} from allowed_hosts; the agent reaches the provider through the gate at {}",
                    show(host),
                    provider.env_var()
                ),
            ),
            _ => return,
        };
        self.sink
            .warning("llm_host_allowed", url.pos, message, Some(help));
    }

    /// Refuses in `sandbox.env` (`env`) what a declared provider's API
    /// reserves, in any case: constle sets those variables, and a key
    /// there would be inside the sandbox.
    pub(super) fn llm_env(&mut self, env: &Pairs<Located<String>>, llm: &Llm) {
        for (key, _) in &env.0 {
            let upper = key.value.to_ascii_uppercase();
            let Some(provider) = llm
                .providers
                .iter()
                .find(|p| p.api.reserved_env().contains(&upper.as_str()))
            else {
                continue;
            };
            self.sink.error(
                "reserved_env_name",
                key.pos,
                format!(
                    "{} is reserved by constle while LLM provider {} is declared and cannot be set in sandbox.env",
                    show(&key.value),
                    show(provider.id.as_str())
                ),
                Some(format!(
                    "remove it: the agent reaches the provider through the gate, which holds its key; constle sets {} for the agent",
                    provider.api.agent_env().join(", ")
                )),
            );
        }
    }
}

/// A model name: 1 to [`MAX_MODEL_NAME_LEN`] bytes of visible ASCII.
fn check_model_name(name: &str) -> Result<String, InvalidValue> {
    if name.is_empty()
        || name.len() > MAX_MODEL_NAME_LEN
        || !name.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(InvalidValue {
            message: format!(
                "model name {} is not 1 to {MAX_MODEL_NAME_LEN} bytes of visible ASCII (no spaces)",
                show(name)
            ),
            help: Some("write the exact model name requests carry, e.g. claude-sonnet-4-5".into()),
        });
    }
    Ok(name.to_owned())
}
