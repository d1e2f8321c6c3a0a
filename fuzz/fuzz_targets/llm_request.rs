//! The model gate's request inspection on arbitrary bodies, for every API
//! and endpoint: `inspect` must never panic; a body it lets through names
//! a declared model, asks for no more output than the provider's ceiling,
//! has an input bound covering what is forwarded, and inspects the same
//! again (what is forwarded is what was decided on). Refusals end as the
//! agent is told they do, and never carry the key.

#![no_main]

use std::collections::BTreeMap;

use constle_llm_gate::{Api, Key, Kind, Prices, Provider, inspect};
use libfuzzer_sys::fuzz_target;
use rust_decimal::Decimal;

const KEY: &str = "sk-fuzz-key";

fn provider(api: Api) -> Option<Provider> {
    let prices = Prices {
        input: Decimal::new(3, 0),
        output: Decimal::new(15, 0),
        cached_input: Decimal::new(3, 1),
        cache_write: Decimal::new(375, 2),
    };
    Some(Provider {
        id: "p".to_owned(),
        api,
        upstream: "https://api.example.com/v1".parse().ok()?,
        key: Key::new(KEY.to_owned()),
        max_output_tokens: 1000,
        models: BTreeMap::from([("m".to_owned(), prices)]),
    })
}

fuzz_target!(|data: &[u8]| {
    let endpoints = [
        (Api::Anthropic, Kind::Messages),
        (Api::Anthropic, Kind::CountTokens),
        (Api::OpenAi, Kind::Responses),
        (Api::OpenAi, Kind::ChatCompletions),
        (Api::OpenAiCompatible, Kind::ChatCompletions),
    ];
    for (api, kind) in endpoints {
        let Some(provider) = provider(api) else { return };
        let previous = |id: &str| (id == "resp_seen").then_some(10);
        match inspect(&provider, kind, data, &previous) {
            Ok(inspected) => {
                assert_eq!(inspected.model, "m");
                assert!(inspected.input_tokens_bound >= inspected.body.len() as u64);
                let sent: serde_json::Value =
                    serde_json::from_slice(&inspected.body).expect("forwarded body is JSON");
                for field in ["max_tokens", "max_output_tokens", "max_completion_tokens"] {
                    if let Some(max) = sent.get(field).and_then(serde_json::Value::as_u64) {
                        assert!(max <= 1000 || kind == Kind::CountTokens);
                    }
                }
                let again = inspect(&provider, kind, &inspected.body, &previous);
                assert!(again.is_ok());
            }
            Err(refusal) => {
                assert!(refusal.message.ends_with("; the Constle gate did not forward it"));
                assert!(!refusal.message.contains(KEY));
            }
        }
    }
});
