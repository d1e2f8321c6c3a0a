//! Each rule of [`inspect`], and the proptest that no body gets past its
//! bounds.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::config::{Key, Prices};

pub(crate) fn provider(api: Api) -> Provider {
    let prices = Prices {
        input: Decimal::new(3, 0),
        output: Decimal::new(15, 0),
        cached_input: Decimal::new(3, 1),
        cache_write: Decimal::new(375, 2),
    };
    Provider {
        id: "p".to_owned(),
        api,
        upstream: "https://api.example.com/v1".parse().unwrap(),
        key: Key::new("sk-test-secret".to_owned()),
        max_output_tokens: 1000,
        models: BTreeMap::from([("m".to_owned(), prices)]),
    }
}

fn run(api: Api, kind: Kind, body: Value) -> Result<Inspected, Reason> {
    let seen = |id: &str| (id == "resp_seen").then_some(500);
    let bytes = serde_json::to_vec(&body).unwrap();
    inspect(&provider(api), kind, &bytes, &seen).map_err(|refusal| {
        assert!(
            refusal.message.ends_with(NOT_FORWARDED),
            "{}",
            refusal.message
        );
        refusal.reason
    })
}

fn forwarded(inspected: &Inspected) -> Value {
    serde_json::from_slice(&inspected.body).unwrap()
}

#[test]
fn bodies_that_are_not_one_strict_object_are_unreadable() {
    let p = provider(Api::Anthropic);
    let none = |_: &str| None;
    for body in [
        &b"[]"[..],
        b"{\"model\":\"m\",\"model\":\"m\"}",
        b"{",
        b"",
        b"{} {}",
    ] {
        let refused = inspect(&p, Kind::Messages, body, &none).unwrap_err();
        assert_eq!(refused.reason, Reason::BodyUnreadable, "{body:?}");
    }
    let big = vec![b' '; MAX_BODY_BYTES + 1];
    assert_eq!(
        inspect(&p, Kind::Messages, &big, &none).unwrap_err().reason,
        Reason::BodyUnreadable
    );
}

#[test]
fn only_declared_models_byte_for_byte() {
    for model in [json!("M"), json!("m "), json!(null), json!(["m"])] {
        let body = json!({"model": model, "max_tokens": 5, "messages": []});
        assert_eq!(
            run(Api::Anthropic, Kind::Messages, body),
            Err(Reason::ModelNotDeclared)
        );
    }
    let missing = json!({"max_tokens": 5, "messages": []});
    assert_eq!(
        run(Api::Anthropic, Kind::Messages, missing),
        Err(Reason::ModelNotDeclared)
    );
    let ok = json!({"model": "m", "max_tokens": 5, "messages": []});
    assert_eq!(run(Api::Anthropic, Kind::Messages, ok).unwrap().model, "m");
}

#[test]
fn hosted_tools_are_refused_and_client_tools_pass() {
    let anthropic =
        |tools: Value| json!({"model": "m", "max_tokens": 5, "messages": [], "tools": tools});
    for tool in [
        json!({"type": "web_search_20250305", "name": "web_search"}),
        json!({"type": "code_execution_20250825", "name": "code_execution"}),
        json!({"type": "web_fetch_20250910", "name": "web_fetch"}),
    ] {
        assert_eq!(
            run(Api::Anthropic, Kind::Messages, anthropic(json!([tool]))),
            Err(Reason::HostedTool)
        );
    }
    let client = json!([
        {"name": "t", "input_schema": {"type": "object"}},
        {"type": "custom", "name": "u", "input_schema": {"type": "object"}},
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"type": "computer_20250124", "name": "computer"},
        {"type": "memory_20250818", "name": "memory"},
    ]);
    assert!(run(Api::Anthropic, Kind::Messages, anthropic(client)).is_ok());
    let mcp = json!({"model": "m", "max_tokens": 5, "messages": [], "mcp_servers": [{"type": "url", "url": "https://x"}]});
    assert_eq!(
        run(Api::Anthropic, Kind::Messages, mcp),
        Err(Reason::HostedTool)
    );
    for tool in [
        json!({"type": "web_search"}),
        json!({"type": "file_search"}),
        json!({"type": "mcp"}),
        json!({"type": "code_interpreter"}),
        json!({"type": "image_generation"}),
        json!({"type": "local_shell"}),
        json!({"name": "untyped"}),
    ] {
        let body = json!({"model": "m", "input": "hi", "tools": [tool.clone()]});
        assert_eq!(
            run(Api::OpenAi, Kind::Responses, body),
            Err(Reason::HostedTool),
            "{tool}"
        );
    }
    let client = json!([{"type": "function", "name": "f"}, {"type": "custom", "name": "c"}]);
    assert!(
        run(
            Api::OpenAi,
            Kind::Responses,
            json!({"model": "m", "input": "hi", "tools": client})
        )
        .is_ok()
    );
    // Codex groups some of its function tools in a namespace: each is
    // checked; a namespace nests no further, and only Responses has them.
    let grouped = |inner: Value| json!({"model": "m", "input": "hi", "tools": [{"type": "namespace", "name": "ns", "tools": inner}]});
    let functions = json!([{"type": "function", "name": "f"}, {"type": "function", "name": "g"}]);
    assert!(run(Api::OpenAi, Kind::Responses, grouped(functions.clone())).is_ok());
    for inner in [
        json!([{"type": "function", "name": "f"}, {"type": "web_search"}]),
        json!([{"type": "namespace", "name": "deeper", "tools": []}]),
    ] {
        assert_eq!(
            run(Api::OpenAi, Kind::Responses, grouped(inner.clone())),
            Err(Reason::HostedTool),
            "{inner}"
        );
    }
    let chat = json!({"model": "m", "messages": [], "tools": [{"type": "namespace", "name": "ns", "tools": functions}]});
    assert_eq!(
        run(Api::OpenAi, Kind::ChatCompletions, chat),
        Err(Reason::HostedTool)
    );
    let search = json!({"model": "m", "messages": [], "web_search_options": {}});
    assert_eq!(
        run(Api::OpenAi, Kind::ChatCompletions, search),
        Err(Reason::HostedTool)
    );
    let chat_tool = json!({"model": "m", "messages": [], "tools": [{"type": "web_search"}]});
    assert_eq!(
        run(Api::OpenAiCompatible, Kind::ChatCompletions, chat_tool),
        Err(Reason::HostedTool)
    );
}

#[test]
fn input_the_body_does_not_hold_is_unbounded() {
    for (key, value) in [
        ("conversation", json!("conv_1")),
        ("prompt", json!({"id": "pmpt_1"})),
        ("background", json!(true)),
        ("previous_response_id", json!("resp_unknown")),
    ] {
        let mut body = json!({"model": "m", "input": "hi"});
        body[key] = value;
        assert_eq!(
            run(Api::OpenAi, Kind::Responses, body),
            Err(Reason::InputUnbounded),
            "{key}"
        );
    }
    let url_image = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x.example/a.png"}}]}]});
    assert_eq!(
        run(Api::Anthropic, Kind::Messages, url_image),
        Err(Reason::InputUnbounded)
    );
    let background_off =
        json!({"model": "m", "input": "hi", "background": false, "conversation": null});
    assert!(run(Api::OpenAi, Kind::Responses, background_off).is_ok());
}

#[test]
fn a_seen_previous_response_adds_its_tokens() {
    let without = run(
        Api::OpenAi,
        Kind::Responses,
        json!({"model": "m", "input": "hi"}),
    )
    .unwrap();
    let body = json!({"model": "m", "input": "hi", "previous_response_id": "resp_seen"});
    let with = run(Api::OpenAi, Kind::Responses, body).unwrap();
    // The forwarded body is the longer: the gate wrote max_output_tokens in.
    assert_eq!(with.input_tokens_bound, with.body.len() as u64 + 500);
    assert!(with.worst_case_usd > without.worst_case_usd);
}

#[test]
fn audio_and_too_many_choices_are_unsupported() {
    for extra in [
        json!({"audio": {"voice": "alloy"}}),
        json!({"modalities": ["text", "audio"]}),
        json!({"n": 129}),
    ] {
        let mut body = json!({"model": "m", "messages": []});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        assert_eq!(
            run(Api::OpenAi, Kind::ChatCompletions, body),
            Err(Reason::Unsupported),
            "{extra}"
        );
    }
}

#[test]
fn output_maximum_is_set_or_lowered_never_raised() {
    let none = run(
        Api::Anthropic,
        Kind::Messages,
        json!({"model": "m", "messages": []}),
    )
    .unwrap();
    assert_eq!(forwarded(&none)["max_tokens"], 1000);
    assert_eq!(none.output_tokens_bound, 1000);
    assert_eq!(none.lowered_from, Some(None));
    let big = json!({"model": "m", "max_tokens": 128000, "messages": [], "thinking": {"type": "enabled", "budget_tokens": 5000}});
    let big = run(Api::Anthropic, Kind::Messages, big).unwrap();
    assert_eq!(forwarded(&big)["max_tokens"], 1000);
    assert_eq!(forwarded(&big)["thinking"]["budget_tokens"], 999);
    assert_eq!(big.lowered_from, Some(Some(128000)));
    let small = run(
        Api::Anthropic,
        Kind::Messages,
        json!({"model": "m", "max_tokens": 10, "messages": []}),
    )
    .unwrap();
    assert_eq!(forwarded(&small)["max_tokens"], 10);
    assert_eq!(small.output_tokens_bound, 10);
    assert_eq!(small.lowered_from, None);
    let responses = run(
        Api::OpenAi,
        Kind::Responses,
        json!({"model": "m", "input": "x", "max_output_tokens": 5000}),
    )
    .unwrap();
    assert_eq!(forwarded(&responses)["max_output_tokens"], 1000);
    let chat = run(
        Api::OpenAi,
        Kind::ChatCompletions,
        json!({"model": "m", "messages": [], "n": 3}),
    )
    .unwrap();
    assert_eq!(forwarded(&chat)["max_completion_tokens"], 1000);
    assert_eq!(chat.output_tokens_bound, 3000);
    let both =
        json!({"model": "m", "messages": [], "max_tokens": 50, "max_completion_tokens": 5000});
    let both = run(Api::OpenAi, Kind::ChatCompletions, both).unwrap();
    assert_eq!(forwarded(&both)["max_completion_tokens"], 1000);
    assert_eq!(forwarded(&both)["max_tokens"], 50);
    assert_eq!(both.output_tokens_bound, 1000);
    let compatible = run(
        Api::OpenAiCompatible,
        Kind::ChatCompletions,
        json!({"model": "m", "messages": []}),
    )
    .unwrap();
    assert_eq!(forwarded(&compatible)["max_tokens"], 1000);
    for bad in [json!(-1), json!(1.5), json!("10")] {
        let body = json!({"model": "m", "messages": [], "max_tokens": bad});
        assert_eq!(
            run(Api::Anthropic, Kind::Messages, body),
            Err(Reason::BodyUnreadable)
        );
    }
    let count = run(
        Api::Anthropic,
        Kind::CountTokens,
        json!({"model": "m", "messages": []}),
    )
    .unwrap();
    assert_eq!(count.output_tokens_bound, 0);
    assert!(forwarded(&count).get("max_tokens").is_none());
}

#[test]
fn streamed_chat_asks_for_usage() {
    for options in [
        None,
        Some(json!(null)),
        Some(json!({"include_usage": false})),
    ] {
        let mut body = json!({"model": "m", "messages": [], "stream": true});
        if let Some(options) = options {
            body["stream_options"] = options;
        }
        let inspected = run(Api::OpenAi, Kind::ChatCompletions, body).unwrap();
        assert!(inspected.stream);
        assert_eq!(
            forwarded(&inspected)["stream_options"]["include_usage"],
            true
        );
    }
}

#[test]
fn worst_case_prices_the_bounds() {
    let body = json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hello"}]});
    let len = serde_json::to_vec(&body).unwrap().len() as u64;
    let inspected = run(Api::Anthropic, Kind::Messages, body).unwrap();
    assert_eq!(inspected.input_tokens_bound, len);
    // Input at the cache-write price (3.75), the highest; output at 15.
    let expected =
        Decimal::from(len) * Decimal::new(375, 2) / Decimal::from(1_000_000) + Decimal::new(15, 4);
    assert_eq!(inspected.worst_case_usd, expected);
    let image = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}]}]});
    assert!(
        run(Api::Anthropic, Kind::Messages, image)
            .unwrap()
            .input_tokens_bound
            > crate::IMAGE_TOKENS
    );
}

#[test]
fn refusals_hold_no_prompt_and_no_key() {
    let secret = "the-prompt-says-this";
    let body = json!({"model": "m", "input": secret, "conversation": "c"});
    let refusal = inspect(
        &provider(Api::OpenAi),
        Kind::Responses,
        &serde_json::to_vec(&body).unwrap(),
        &|_| None,
    )
    .unwrap_err();
    let shown = format!("{refusal:?}");
    assert!(!shown.contains(secret) && !shown.contains("sk-test-secret"));
    assert!(!format!("{:?}", provider(Api::OpenAi)).contains("sk-test-secret"));
}

fn kinds() -> impl Strategy<Value = (Api, Kind)> {
    prop_oneof![
        Just((Api::Anthropic, Kind::Messages)),
        Just((Api::Anthropic, Kind::CountTokens)),
        Just((Api::OpenAi, Kind::Responses)),
        Just((Api::OpenAi, Kind::ChatCompletions)),
        Just((Api::OpenAiCompatible, Kind::ChatCompletions)),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u32>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just("m"),
            Just("image"),
            Just("base64"),
            Just("url"),
            Just("function"),
            Just("web_search"),
            Just("x")
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        let keys = prop_oneof![
            Just("model"),
            Just("type"),
            Just("source"),
            Just("max_tokens"),
            Just("max_output_tokens"),
            Just("max_completion_tokens"),
            Just("n"),
            Just("tools"),
            Just("stream"),
            Just("content"),
            Just("messages"),
            Just("thinking"),
            Just("budget_tokens"),
            Just("stream_options"),
            Just("image_url"),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys.prop_map(str::to_owned), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Whatever the body: no panic; a call let through names a declared
    /// model, asks for no more output than the bound the reservation
    /// priced and no more than the provider's ceiling, and its input bound
    /// covers the body forwarded.
    #[test]
    fn nothing_gets_past_its_bounds((api, kind) in kinds(), mut body in json_value(), model in any::<bool>()) {
        if model && let Value::Object(object) = &mut body {
            object.insert("model".to_owned(), json!("m"));
        }
        let bytes = serde_json::to_vec(&body).unwrap();
        let p = provider(api);
        if let Ok(inspected) = inspect(&p, kind, &bytes, &|_| None) {
            let sent = forwarded(&inspected);
            prop_assert_eq!(&sent["model"], "m");
            prop_assert!(inspected.input_tokens_bound >= inspected.body.len() as u64);
            prop_assert!(inspected.worst_case_usd >= Decimal::ZERO);
            // Only Chat Completions has `n`: the others' APIs refuse it.
            let choices = match kind {
                Kind::ChatCompletions => sent.get("n").and_then(Value::as_u64).unwrap_or(1).max(1),
                _ => 1,
            };
            let fields: &[&str] = match kind {
                Kind::Messages => &["max_tokens"],
                Kind::Responses => &["max_output_tokens"],
                Kind::ChatCompletions => &["max_tokens", "max_completion_tokens"],
                _ => &[],
            };
            for field in fields {
                if let Some(max) = sent.get(field).and_then(Value::as_u64) {
                    prop_assert!(max <= 1000);
                    prop_assert!(max * choices <= inspected.output_tokens_bound);
                }
            }
            // What is forwarded inspects the same again (a fixed point).
            let again = inspect(&p, kind, &inspected.body, &|_| None);
            prop_assert!(again.is_ok());
        }
    }
}
