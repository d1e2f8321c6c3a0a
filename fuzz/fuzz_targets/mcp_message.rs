//! The MCP gate on arbitrary bodies: `inspect` must never panic, a body it
//! forwards must be forwarded byte for byte, every refusal must be a
//! JSON-RPC error the agent can parse, and a revision header can only make
//! it stricter. The server-side filters must not panic either.

#![no_main]

use constle_manifest::{HttpUrl, HumanGates, McpServer, McpTransport, Pricing, ServerId, ToolName};
use constle_mcp_gate::{
    Inspection, Revision, SUPPORTED_REVISIONS, ServerPolicy, filter_server_message,
    filter_tools_list, inspect,
};
use libfuzzer_sys::fuzz_target;

fn policy() -> Option<ServerPolicy> {
    let tools = ["list_invoices", "pay_invoice", "Pay_Invoice"]
        .iter()
        .map(|t| ToolName::new(t).ok())
        .collect::<Option<Vec<_>>>()?;
    let server = McpServer {
        id: ServerId::new("accounting").ok()?,
        transport: McpTransport::Url {
            url: HttpUrl::new("https://mcp.accounting.internal").ok()?,
            headers: Vec::new(),
        },
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

fn check(policy: &ServerPolicy, data: &[u8], revision: Option<Revision>) -> Inspection {
    let inspection = inspect(policy, data, Some("application/json"), revision);
    match &inspection {
        Inspection::Forward(forward) => {
            assert_eq!(forward.bytes(), data);
            assert!(!forward.decisions().is_empty());
            assert!(forward.gated().is_none() || !forward.is_batch());
            assert!(!forward.is_batch() || revision.is_none_or(Revision::allows_batches));
        }
        Inspection::Refuse(refusal) => {
            let body: serde_json::Value =
                serde_json::from_slice(refusal.body()).expect("refusal body is JSON");
            assert!(body.is_object() || body.is_array());
        }
    }
    inspection
}

fuzz_target!(|data: &[u8]| {
    let Some(policy) = policy() else { return };
    let without = check(&policy, data, None);
    for revision in SUPPORTED_REVISIONS {
        // A header never lets through what its absence refuses, nor
        // changes what is decided for what it lets through.
        if let Inspection::Forward(forward) = check(&policy, data, Some(revision)) {
            assert_eq!(Inspection::Forward(forward), without);
        }
    }
    let _ = filter_tools_list(&policy, data);
    let _ = filter_server_message(&policy, data, |_| true);
    let _ = filter_server_message(&policy, data, |_| false);
});
