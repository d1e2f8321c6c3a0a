//! Each rule of the gate, and attempts to get past it.

use constle_manifest::{
    HttpUrl, HumanGates, McpServer, McpTransport, MethodName, Pricing, ServerId, ToolName,
};
use serde_json::{Value, json};

use crate::*;

const JSON: Option<&str> = Some("application/json");

fn server(tools: &[&str]) -> McpServer {
    McpServer {
        id: ServerId::new("accounting").unwrap(),
        transport: McpTransport::Url {
            url: HttpUrl::new("https://mcp.accounting.internal").unwrap(),
            headers: Vec::new(),
        },
        tools: tools.iter().map(|t| ToolName::new(t).unwrap()).collect(),
        pricing: Pricing::default(),
        allow_methods: Vec::new(),
    }
}

fn gates(enabled: bool, names: &[&str]) -> HumanGates {
    HumanGates {
        enabled,
        require_approval_for: names.iter().map(|t| ToolName::new(t).unwrap()).collect(),
        ..HumanGates::default()
    }
}

fn policy() -> ServerPolicy {
    ServerPolicy::new(
        &server(&["list_invoices", "pay_invoice", "Pay_Invoice"]),
        &gates(true, &["pay_invoice"]),
    )
}

fn forward(policy: &ServerPolicy, body: &str) -> Forward {
    match inspect(policy, body.as_bytes(), JSON, None) {
        Inspection::Forward(forward) => {
            assert_eq!(forward.bytes(), body.as_bytes());
            forward
        }
        Inspection::Refuse(refusal) => panic!("refused {body}: {}", refusal.message()),
    }
}

fn refuse_with(policy: &ServerPolicy, body: &[u8], content_type: Option<&str>) -> (Refusal, Value) {
    match inspect(policy, body, content_type, None) {
        Inspection::Refuse(refusal) => {
            let value: Value = serde_json::from_slice(refusal.body()).unwrap();
            (refusal, value)
        }
        Inspection::Forward(_) => panic!("forwarded {}", String::from_utf8_lossy(body)),
    }
}

/// Refuses `body`, checks code and reason, returns (status, error message, id).
fn refuse(body: &str, code: i64, reason: Reason) -> (u16, String, Value) {
    refuse_policy(&policy(), body, code, reason)
}

fn refuse_policy(
    policy: &ServerPolicy,
    body: &str,
    code: i64,
    reason: Reason,
) -> (u16, String, Value) {
    let (refusal, value) = refuse_with(policy, body.as_bytes(), JSON);
    assert_eq!(refusal.reason(), reason, "{body}: {}", refusal.message());
    assert_eq!(value["jsonrpc"], "2.0");
    assert_eq!(value["error"]["code"], code, "{body}");
    assert_eq!(value["error"]["data"]["reason"], reason.as_str());
    assert_eq!(value["error"]["message"], refusal.message());
    (
        refusal.status(),
        refusal.message().to_string(),
        value["id"].clone(),
    )
}

fn call(id: u64, name: &str, arguments: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":arguments}})
        .to_string()
}

/// Refuses a call of tool `name` (id 3) under `policy`: a refusal by tool
/// name is always invalid params.
fn refuse_tool(policy: &ServerPolicy, name: &str, reason: Reason) -> (u16, String, Value) {
    refuse_policy(policy, &call(3, name, json!({})), -32602, reason)
}

/// Forwards what allowing `resources/read` and `notifications/custom` lets
/// through, however `p` came to allow them.
fn forward_allowed(p: &ServerPolicy) {
    forward(
        p,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x"}}"#,
    );
    forward(p, r#"{"jsonrpc":"2.0","method":"notifications/custom"}"#);
}

#[test]
fn lifecycle_ping_and_tools_list_pass() {
    let p = policy();
    for (body, method, id) in [
        (
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
            "initialize",
            Some(RequestId::Int(0)),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "notifications/initialized",
            None,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#,
            "ping",
            Some(RequestId::String("p".into())),
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"x"}}"#,
            "tools/list",
            Some(RequestId::Int(2)),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#,
            "notifications/cancelled",
            None,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
            "notifications/progress",
            None,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#,
            "notifications/roots/list_changed",
            None,
        ),
    ] {
        let f = forward(&p, body);
        assert!(!f.is_batch());
        assert_eq!(
            f.decisions(),
            &[Decision::Pass {
                method: method.into(),
                id: id.clone()
            }]
        );
        assert_eq!(f.expects_response(), id.is_some());
    }
    let f = forward(&p, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    assert_eq!(
        f.tools_list_ids().into_iter().collect::<Vec<_>>(),
        [RequestId::Int(2)]
    );
}

#[test]
fn declared_ungated_call_passes_with_its_subject() {
    let f = forward(
        &policy(),
        &call(7, "list_invoices", json!({"month":"2026-07"})),
    );
    let Decision::Call(c) = &f.decisions()[0] else {
        panic!("{f:?}")
    };
    assert_eq!(c.server, "accounting");
    assert_eq!(c.tool, "list_invoices");
    assert_eq!(c.arguments.as_ref().unwrap()["month"], "2026-07");
    assert_eq!(c.request_id, RequestId::Int(7));
    assert!(f.gated().is_none());
    let f = forward(
        &policy(),
        r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"list_invoices"}}"#,
    );
    let Decision::Call(c) = &f.decisions()[0] else {
        panic!()
    };
    assert_eq!(c.arguments, None);
}

#[test]
fn declared_gated_call_needs_a_decision() {
    let f = forward(
        &policy(),
        &call(8, "pay_invoice", json!({"invoice_id":"INV-0042"})),
    );
    let gated = f.gated().unwrap();
    assert_eq!(
        (gated.server.as_str(), gated.tool.as_str()),
        ("accounting", "pay_invoice")
    );
    assert_eq!(gated.arguments.as_ref().unwrap()["invoice_id"], "INV-0042");
    assert!(matches!(f.decisions(), [Decision::Gated(_)]));
    // Gates off: the same call is an ordinary one.
    let off = ServerPolicy::new(&server(&["pay_invoice"]), &gates(false, &["pay_invoice"]));
    let f = forward(&off, &call(8, "pay_invoice", json!({})));
    assert!(matches!(f.decisions(), [Decision::Call(_)]));
}

#[test]
fn undeclared_tool_is_refused_by_name() {
    let (status, message, id) = refuse_tool(&policy(), "delete_all", Reason::ToolNotDeclared);
    assert_eq!(
        message,
        r#"tool "delete_all" is not declared for server "accounting""#
    );
    assert_eq!((status, id), (200, json!(3)));
    // Exact bytes: no trimming, no case folding, no Unicode look-alikes.
    for name in [
        "list_invoices ",
        "LIST_INVOICES",
        "list_invoices\u{0}",
        "list_ınvoices",
        "",
    ] {
        refuse_tool(&policy(), name, Reason::ToolNotDeclared);
    }
    // A gated name that is not declared is still undeclared.
    let p = ServerPolicy::new(&server(&["list_invoices"]), &gates(true, &["pay_invoice"]));
    refuse_tool(&p, "pay_invoice", Reason::ToolNotDeclared);
}

#[test]
fn case_variant_of_a_gated_name_is_refused_even_if_declared() {
    let (status, message, _) = refuse_tool(&policy(), "Pay_Invoice", Reason::ToolCaseVariant);
    assert!(message.contains("only in letter case"), "{message}");
    assert_eq!(status, 200);
}

#[test]
fn tools_call_as_notification_is_refused() {
    let body = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"list_invoices","arguments":{}}}"#;
    let (status, _, id) = refuse(body, -32600, Reason::CallAsNotification);
    assert_eq!((status, id), (400, Value::Null));
}

#[test]
fn malformed_tools_call_params_are_refused() {
    for params in [
        json!({"name": 1}),
        json!({"name": null}),
        json!({"name": ["pay_invoice"]}),
        json!({"arguments": {}}),
        json!({"name": "list_invoices", "arguments": []}),
        json!({"name": "list_invoices", "arguments": "x"}),
        json!({"name": "list_invoices", "arguments": null}),
    ] {
        let body =
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":params}).to_string();
        refuse(&body, -32602, Reason::InvalidParams);
    }
    refuse(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
        -32602,
        Reason::InvalidParams,
    );
    refuse(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["pay_invoice"]}"#,
        -32602,
        Reason::InvalidParams,
    );
}

#[test]
fn wrong_content_type_is_refused() {
    let body = call(1, "list_invoices", json!({}));
    for content_type in [
        None,
        Some(""),
        Some("text/plain"),
        Some("application/jsonx"),
        Some("application/json-rpc"),
        Some("text/event-stream"),
        Some("application/json; charset=latin1"),
        Some("multipart/form-data; x=application/json"),
    ] {
        let (refusal, value) = refuse_with(&policy(), body.as_bytes(), content_type);
        assert_eq!(refusal.status(), 415, "{content_type:?}");
        assert_eq!(refusal.reason(), Reason::ContentType);
        assert_eq!(value["error"]["code"], -32600);
    }
    for content_type in [
        "application/json",
        "Application/JSON; charset=UTF-8",
        "application/json;charset=\"utf-8\"",
    ] {
        assert!(matches!(
            inspect(&policy(), body.as_bytes(), Some(content_type), None),
            Inspection::Forward(_)
        ));
    }
}

#[test]
fn oversized_body_is_refused_unread() {
    let pad = "x".repeat(MAX_BODY_BYTES);
    let body = call(1, "list_invoices", json!({ "pad": pad }));
    let (refusal, value) = refuse_with(&policy(), body.as_bytes(), JSON);
    assert_eq!(
        (refusal.status(), refusal.reason()),
        (413, Reason::BodyTooLarge)
    );
    assert_eq!(value["error"]["code"], -32600);
    assert!(
        refusal
            .message()
            .contains("larger than the gate's limit of 4194304")
    );
    // Not JSON at all, still refused for its size first.
    let junk = vec![b'['; MAX_BODY_BYTES + 1];
    assert_eq!(
        refuse_with(&policy(), &junk, JSON).0.reason(),
        Reason::BodyTooLarge
    );
    // The gate keeps serving.
    forward(&policy(), &call(2, "list_invoices", json!({})));
}

#[test]
fn non_json_and_ambiguous_json_are_refused() {
    let cases: Vec<String> = vec![
        // Duplicate keys, at the top and deep inside: two readers could differ.
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_invoices","name":"pay_invoice"}}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call","params":{"name":"pay_invoice"}}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_invoices","arguments":{"a":{"b":1,"b":2}}}}"#.into(),
        // Lone surrogates.
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay_invoice\ud800"}}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_invoices","arguments":{"a":"\udc00"}}}"#.into(),
        // Extensions.
        r#"{"jsonrpc":"2.0","id":1,"method":"ping",}"#.into(),
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} // c".into(),
        "/* c */{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}".into(),
        r#"{"jsonrpc":"2.0","id":NaN,"method":"ping"}"#.into(),
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}".into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}{"jsonrpc":"2.0","id":2,"method":"ping"}"#.into(),
        "{'jsonrpc':'2.0'}".into(),
        String::new(),
        "not json".into(),
    ];
    for body in &cases {
        let (status, message, id) = refuse(body, -32700, Reason::NotJson);
        assert_eq!((status, id), (400, Value::Null), "{body}");
        assert!(message.starts_with("parse error: "), "{message}");
    }
    let (_, message, _) = refuse(&cases[0], -32700, Reason::NotJson);
    assert!(message.contains("duplicate key `name`"), "{message}");
    let invalid_utf8 = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"pay_invoice\xff\"}}";
    assert_eq!(
        refuse_with(&policy(), invalid_utf8, JSON).0.reason(),
        Reason::NotJson
    );
}

#[test]
fn deep_nesting_is_refused() {
    let deep = "[".repeat(MAX_DEPTH - 3) + "1" + &"]".repeat(MAX_DEPTH - 3);
    let ok = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"list_invoices","arguments":{{"a":{deep}}}}}}}"#
    );
    forward(&policy(), &ok);
    let deep = "[".repeat(MAX_DEPTH) + "1" + &"]".repeat(MAX_DEPTH);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"list_invoices","arguments":{{"a":{deep}}}}}}}"#
    );
    let (_, message, _) = refuse(&body, -32700, Reason::NotJson);
    assert!(
        message.contains("nesting deeper than 64 levels"),
        "{message}"
    );
    // Far deeper than serde_json's own limit: still an answer, no crash.
    let abyss = "[".repeat(100_000);
    refuse(&abyss, -32700, Reason::NotJson);
}

#[test]
fn json_rpc_shape_is_enforced() {
    for body in [
        r#"[1]"#,
        r#""ping""#,
        r#"null"#,
        r#"{"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":2.0,"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1e3,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#,
        r#"{"jsonrpc":"2.0","method":"initialize","params":{}}"#,
        r#"{"jsonrpc":"2.0","method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":[]}"#,
        r#"{"jsonrpc":"2.0","result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}"#,
    ] {
        refuse(body, -32600, Reason::InvalidMessage);
    }
    // A known method with params of the wrong type: invalid params.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#,
    ] {
        refuse(body, -32602, Reason::InvalidParams);
    }
    // The id is echoed when it is a valid one.
    let (status, _, id) = refuse(
        r#"{"jsonrpc":"1.0","id":"k","method":"ping"}"#,
        -32600,
        Reason::InvalidMessage,
    );
    assert_eq!((status, id), (200, json!("k")));
}

#[test]
fn agent_responses_to_server_requests_pass() {
    let f = forward(&policy(), r#"{"jsonrpc":"2.0","id":5,"result":{}}"#);
    assert_eq!(
        f.decisions(),
        &[Decision::Response {
            id: RequestId::Int(5)
        }]
    );
    assert!(!f.expects_response());
    forward(
        &policy(),
        r#"{"jsonrpc":"2.0","id":"s","error":{"code":-1,"message":"no"}}"#,
    );
}

#[test]
fn other_methods_are_refused_unless_allowed() {
    for method in [
        "resources/list",
        "resources/read",
        "resources/subscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "sampling/createMessage",
        "elicitation/create",
        "tasks/get",
        "Tools/call",
        "tools/call ",
        "",
    ] {
        let body = json!({"jsonrpc":"2.0","id":9,"method":method,"params":{}}).to_string();
        let (status, message, id) = refuse(&body, -32601, Reason::MethodNotAllowed);
        assert_eq!(
            message,
            format!("method {method:?} is not allowed by the gate for server \"accounting\"")
        );
        assert_eq!((status, id), (200, json!(9)));
    }
    let (status, _, _) = refuse(
        r#"{"jsonrpc":"2.0","method":"notifications/message"}"#,
        -32601,
        Reason::MethodNotAllowed,
    );
    assert_eq!(status, 400);

    let p = policy()
        .allow_method("resources/read")
        .allow_method("notifications/custom");
    forward_allowed(&p);
    // Allowed, but still a request only with an id, a notification only without.
    for body in [
        r#"{"jsonrpc":"2.0","method":"resources/read"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"notifications/custom"}"#,
    ] {
        refuse_policy(&p, body, -32600, Reason::InvalidMessage);
    }
    // Allowing tools/call does not lift its rules.
    let p = policy().allow_method("tools/call");
    refuse_tool(&p, "delete_all", Reason::ToolNotDeclared);
}

#[test]
fn the_agentfile_allow_methods_apply_in_both_directions() {
    let mut declared = server(&["list_invoices"]);
    declared.allow_methods = ["resources/read", "notifications/custom", "roots/list"]
        .iter()
        .map(|m| MethodName::new(m).unwrap())
        .collect();
    let p = ServerPolicy::new(&declared, &gates(false, &[]));
    forward_allowed(&p);
    refuse_policy(
        &p,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#,
        -32601,
        Reason::MethodNotAllowed,
    );
    // The server may now ask the agent for its roots, and nothing else new.
    let roots = br#"{"jsonrpc":"2.0","id":"s1","method":"roots/list"}"#;
    let out = filter_server_message(&p, roots, |_| false).unwrap();
    assert!(out.to_agent.is_some() && out.to_server.is_none());
    let sampling = br#"{"jsonrpc":"2.0","id":"s2","method":"sampling/createMessage"}"#;
    let out = filter_server_message(&p, sampling, |_| false).unwrap();
    assert!(out.to_agent.is_none() && out.to_server.is_some());
    // Without the list, the same server allows none of them.
    declared.allow_methods.clear();
    let p = ServerPolicy::new(&declared, &gates(false, &[]));
    refuse_policy(
        &p,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read"}"#,
        -32601,
        Reason::MethodNotAllowed,
    );
    let out = filter_server_message(&p, roots, |_| false).unwrap();
    assert!(out.to_agent.is_none());
}

/// A batch of a tools/list and an ungated call, then `more`: nothing in it
/// that the gate refuses for what it is.
fn clean_batch(more: &[&str]) -> String {
    let call = call(2, "list_invoices", json!({}));
    let mut messages = vec![r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#, &call];
    messages.extend(more);
    format!("[{}]", messages.join(","))
}

#[test]
fn a_clean_batch_is_forwarded_whole() {
    let body = clean_batch(&[
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0}}"#,
    ]);
    let f = forward(&policy(), &body);
    assert!(f.is_batch());
    assert_eq!(f.decisions().len(), 3);
    assert!(matches!(f.decisions()[1], Decision::Call(_)));
    assert!(f.expects_response());
}

#[test]
fn nothing_in_a_batch_slips_past() {
    let ok = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let bad_elements: Vec<(String, i64, Reason)> = vec![
        (
            call(2, "delete_all", json!({})),
            -32602,
            Reason::ToolNotDeclared,
        ),
        (
            call(2, "Pay_Invoice", json!({})),
            -32602,
            Reason::ToolCaseVariant,
        ),
        (
            call(2, "pay_invoice", json!({})),
            -32600,
            Reason::GatedCallInBatch,
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"resources/list"}"#.into(),
            -32601,
            Reason::MethodNotAllowed,
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":1}}"#.into(),
            -32602,
            Reason::InvalidParams,
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}"#.into(),
            -32600,
            Reason::InvalidMessage,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.into(),
            -32600,
            Reason::DuplicateId,
        ),
    ];
    for (bad, code, reason) in &bad_elements {
        for body in [format!("[{ok},{bad}]"), format!("[{bad},{ok}]")] {
            let (refusal, value) = refuse_with(&policy(), body.as_bytes(), JSON);
            assert_eq!(refusal.reason(), *reason, "{body}");
            assert_eq!(refusal.status(), 200);
            let answers = value.as_array().unwrap();
            assert_eq!(answers.len(), 2, "{body}");
            let codes: Vec<i64> = answers
                .iter()
                .map(|a| a["error"]["code"].as_i64().unwrap())
                .collect();
            assert!(codes.contains(code), "{body}: {codes:?}");
            assert!(
                answers
                    .iter()
                    .any(|a| a["error"]["data"]["reason"] == "mcp_batch_refused")
                    || *reason == Reason::DuplicateId
            );
        }
    }
    // The tools/call hidden as a notification in a batch.
    let body = format!(
        r#"[{ok},{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"pay_invoice"}}}}]"#
    );
    let (refusal, value) = refuse_with(&policy(), body.as_bytes(), JSON);
    assert_eq!(refusal.reason(), Reason::CallAsNotification);
    assert_eq!(value.as_array().unwrap().len(), 1);
    // Nested batches, non-object elements.
    for body in [
        format!("[[{ok}]]"),
        format!("[{ok},1]"),
        format!("[{ok},null]"),
    ] {
        let (refusal, _) = refuse_with(&policy(), body.as_bytes(), JSON);
        assert_eq!(refusal.reason(), Reason::InvalidMessage, "{body}");
    }
    // Only notifications: nothing to answer by id, so one error and 400.
    let body = r#"[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","method":"notifications/message"}]"#;
    let (refusal, value) = refuse_with(&policy(), body.as_bytes(), JSON);
    assert_eq!(
        (refusal.status(), refusal.reason()),
        (400, Reason::MethodNotAllowed)
    );
    assert_eq!(value["error"]["code"], -32601);
    assert!(refusal.message().starts_with("batch element 1 refused: "));
}

#[test]
fn empty_batch_is_refused() {
    let (status, message, id) = refuse("[]", -32600, Reason::EmptyBatch);
    assert_eq!(
        (status, message.as_str(), id),
        (400, "empty batch", Value::Null)
    );
    refuse(" [ ] ", -32600, Reason::EmptyBatch);
}

#[test]
fn forwarded_bytes_are_the_inspected_bytes() {
    // Whitespace, escapes and key order are kept: the gate never re-serialises.
    let body = "{ \"params\" : {\"arguments\":{\"b\":1,\"a\":\"\\u0041\"}, \"name\":\"list_invoices\"},\n\"method\":\"tools/call\",\"id\":1,\"jsonrpc\":\"2.0\"}";
    let f = forward(&policy(), body);
    let Decision::Call(c) = &f.decisions()[0] else {
        panic!()
    };
    assert_eq!(c.arguments.as_ref().unwrap()["a"], "A");
    assert_eq!(f.into_bytes(), body.as_bytes());
}

#[test]
fn tools_list_is_filtered_page_by_page() {
    let body = json!({"jsonrpc":"2.0","id":2,"result":{
        "tools":[
            {"name":"list_invoices","inputSchema":{"type":"object"}},
            {"name":"delete_all","inputSchema":{"type":"object"}},
            {"name":"PAY_INVOICE"},
            {"name":"pay_invoice"},
            {"title":"no name"},
            {"name":1},
            "junk"
        ],
        "nextCursor":"page-2"}});
    let out = filter_tools_list(&policy(), body.to_string().as_bytes()).unwrap();
    let out: Value = serde_json::from_slice(&out).unwrap();
    let names: Vec<&str> = out["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["list_invoices", "pay_invoice"]);
    assert_eq!(out["result"]["nextCursor"], "page-2");
    assert_eq!(out["id"], 2);

    let error = json!({"jsonrpc":"2.0","id":2,"error":{"code":-1,"message":"m"}});
    let out = filter_tools_list(&policy(), error.to_string().as_bytes()).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), error);

    for bad in [
        r#"{"jsonrpc":"2.0","id":2,"result":{"tools":{}}}"#,
        r#"{"jsonrpc":"2.0","id":2,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":2}"#,
        r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"list_invoices","name":"delete_all"}]}}"#,
        r#"[]"#,
    ] {
        assert!(
            filter_tools_list(&policy(), bad.as_bytes()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn server_requests_are_refused_unless_allowed() {
    let no_lists = |_: &RequestId| false;
    for method in [
        "sampling/createMessage",
        "elicitation/create",
        "roots/list",
        "tools/call",
    ] {
        let msg = json!({"jsonrpc":"2.0","id":"s1","method":method,"params":{}}).to_string();
        let out = filter_server_message(&policy(), msg.as_bytes(), no_lists).unwrap();
        assert_eq!(out.to_agent, None, "{method}");
        let answer: Value = serde_json::from_slice(&out.to_server.unwrap()).unwrap();
        assert_eq!(answer["id"], "s1");
        assert_eq!(answer["error"]["code"], -32601);
    }
    let p = policy().allow_method("sampling/createMessage");
    let msg = br#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#;
    let out = filter_server_message(&p, msg, no_lists).unwrap();
    assert!(out.to_agent.is_some() && out.to_server.is_none());
    for relayed in [
        r#"{"jsonrpc":"2.0","id":"s2","method":"ping"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#,
    ] {
        let out = filter_server_message(&policy(), relayed.as_bytes(), no_lists).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&out.to_agent.unwrap()).unwrap(),
            serde_json::from_str::<Value>(relayed).unwrap()
        );
        assert_eq!(out.to_server, None);
    }
}

#[test]
fn server_tool_lists_are_filtered_whatever_their_id_also_in_batches() {
    let msg = json!([
        {"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"delete_all"},{"name":"list_invoices"}]}},
        // An id the gate never sent, or has forgotten: filtered all the same.
        {"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"delete_all"},{"name":"pay_invoice"}]}},
        {"jsonrpc":"2.0","id":"r","method":"roots/list"},
        {"jsonrpc":"2.0","id":3,"result":{"content":[]}}
    ]);
    let mut asked = Vec::new();
    let out = filter_server_message(&policy(), msg.to_string().as_bytes(), |id| {
        asked.push(id.clone());
        *id == RequestId::Int(1)
    })
    .unwrap();
    // Asked once per response, so the caller can forget what was answered.
    assert_eq!(
        asked,
        [RequestId::Int(1), RequestId::Int(2), RequestId::Int(3)]
    );
    let to_agent: Value = serde_json::from_slice(&out.to_agent.unwrap()).unwrap();
    assert_eq!(
        to_agent[0]["result"]["tools"],
        json!([{"name":"list_invoices"}])
    );
    assert_eq!(
        to_agent[1]["result"]["tools"],
        json!([{"name":"pay_invoice"}])
    );
    assert_eq!(to_agent[2]["result"]["content"], json!([]));
    assert_eq!(to_agent.as_array().unwrap().len(), 3);
    let to_server: Value = serde_json::from_slice(&out.to_server.unwrap()).unwrap();
    assert_eq!(to_server[0]["id"], "r");
    assert!(filter_server_message(&policy(), b"{\"a\":1,\"a\":2}", |_| true).is_err());
    assert!(filter_server_message(&policy(), b"[1]", |_| true).is_err());
}

#[test]
fn anything_shaped_like_a_tool_list_is_filtered_or_not_relayed() {
    let unknown = |_: &RequestId| false;
    let filtered = |msg: Value| {
        let out = filter_server_message(&policy(), msg.to_string().as_bytes(), unknown).unwrap();
        serde_json::from_slice::<Value>(&out.to_agent.unwrap()).unwrap()
    };
    // Even dressed as a notification, or without an id.
    let out = filtered(
        json!({"jsonrpc":"2.0","method":"notifications/x","result":{"tools":[{"name":"delete_all"}]}}),
    );
    assert_eq!(out["result"]["tools"], json!([]));
    let out = filtered(json!({"jsonrpc":"2.0","result":{"tools":[{"name":"delete_all"}]}}));
    assert_eq!(out["result"]["tools"], json!([]));
    // A tool list the gate cannot filter is not relayed.
    for bad in [
        json!({"jsonrpc":"2.0","id":9,"result":{"tools":{"delete_all":{}}}}),
        json!({"jsonrpc":"2.0","id":9,"result":{"tools":null}}),
    ] {
        assert!(
            filter_server_message(&policy(), bad.to_string().as_bytes(), unknown).is_err(),
            "{bad}"
        );
    }
    // An answer to a remembered tools/list must be a tool list or an error.
    let empty = br#"{"jsonrpc":"2.0","id":9,"result":{}}"#;
    assert!(filter_server_message(&policy(), empty, |_| true).is_err());
    assert!(filter_server_message(&policy(), empty, unknown).is_ok());
    let error = br#"{"jsonrpc":"2.0","id":9,"error":{"code":-1,"message":"m"}}"#;
    assert!(filter_server_message(&policy(), error, |_| true).is_ok());
}

#[test]
fn batches_are_refused_from_2025_06_18_on() {
    let batch = clean_batch(&[]);
    for revision in [None, Some(Revision::V2025_03_26)] {
        assert!(
            matches!(
                inspect(&policy(), batch.as_bytes(), JSON, revision),
                Inspection::Forward(_)
            ),
            "{revision:?}"
        );
    }
    for revision in [
        Revision::V2025_06_18,
        Revision::V2025_11_25,
        Revision::V2026_07_28,
    ] {
        let Inspection::Refuse(refusal) =
            inspect(&policy(), batch.as_bytes(), JSON, Some(revision))
        else {
            panic!("a batch was forwarded under {revision}");
        };
        assert_eq!(
            (refusal.status(), refusal.reason()),
            (400, Reason::BatchNotAllowed)
        );
        assert!(refusal.message().contains(revision.as_str()));
        let value: Value = serde_json::from_slice(refusal.body()).unwrap();
        assert_eq!(value["id"], Value::Null);
        assert_eq!(value["error"]["code"], -32600);
        assert_eq!(value["error"]["data"]["reason"], "mcp_batch_not_allowed");
        // Single messages are what these revisions send: unaffected.
        let single = call(3, "list_invoices", json!({}));
        assert!(matches!(
            inspect(&policy(), single.as_bytes(), JSON, Some(revision)),
            Inspection::Forward(_)
        ));
        // The header never lifts a refusal.
        let bad = call(3, "delete_all", json!({}));
        assert!(matches!(
            inspect(&policy(), bad.as_bytes(), JSON, Some(revision)),
            Inspection::Refuse(_)
        ));
    }
}
