//! The MCP gate on arbitrary bodies: `inspect` must never panic, a body it
//! forwards must be forwarded byte for byte, and every refusal must be a
//! JSON-RPC error the agent can parse. The server-side filters must not
//! panic either.

#![no_main]

use constle_manifest::{HttpUrl, HumanGates, McpServer, Pricing, ServerId, ToolName};
use constle_mcp_gate::{
    Inspection, ServerPolicy, filter_server_message, filter_tools_list, inspect,
};
use libfuzzer_sys::fuzz_target;

fn policy() -> Option<ServerPolicy> {
    let tools = ["list_invoices", "pay_invoice", "Pay_Invoice"]
        .iter()
        .map(|t| ToolName::new(t).ok())
        .collect::<Option<Vec<_>>>()?;
    let server = McpServer {
        id: ServerId::new("accounting").ok()?,
        url: HttpUrl::new("https://mcp.accounting.internal").ok()?,
        tools,
        pricing: Pricing::default(),
        allow_methods: Vec::new(),
    };
    let gates = HumanGates {
        enabled: true,
        require_approval_for: vec![ToolName::new("pay_invoice").ok()?],
        ..HumanGates::default()
    };
    Some(ServerPolicy::new(&server, &gates).allow_method("resources/read"))
}

fuzz_target!(|data: &[u8]| {
    let Some(policy) = policy() else { return };
    match inspect(&policy, data, Some("application/json")) {
        Inspection::Forward(forward) => {
            assert_eq!(forward.bytes(), data);
            assert!(!forward.decisions().is_empty());
            assert!(forward.gated().is_none() || !forward.is_batch());
        }
        Inspection::Refuse(refusal) => {
            let body: serde_json::Value =
                serde_json::from_slice(refusal.body()).expect("refusal body is JSON");
            assert!(body.is_object() || body.is_array());
        }
    }
    let _ = filter_tools_list(&policy, data);
    let _ = filter_server_message(&policy, data, |_| true);
});
