//! The gate's pure policy step, without any I/O: what it costs per message
//! beside the HTTP work measured by the `gate` bench.
//!
//! - `inspect/tools_call`: [`inspect`] on a typical ungated `tools/call`
//!   body (the agent-to-server step of every call);
//! - `filter_server_message/tools_call_result`: the server's small
//!   `tools/call` result (the server-to-agent step of every call);
//! - `filter_tools_list/50_tools` and `filter_server_message/50_tools`: a
//!   `tools/list` result of 50 tools with descriptions and input schemas,
//!   10 of them declared.
//!
//! The policy comes from an Agentfile parsed by [`constle_manifest`], as in
//! `constle run`. Run with `cargo bench -p constle-mcp-gate --bench policy`.

#![forbid(unsafe_code)]
#![allow(
    clippy::expect_used,
    reason = "a benchmark that cannot set up must stop"
)]

use std::hint::black_box;
use std::path::Path;

use constle_mcp_gate::{
    Inspection, Revision, ServerPolicy, filter_server_message, filter_tools_list, inspect,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;

/// The approver key the Agentfile needs once a tool is gated (the W3C
/// did:key example); nothing is put to an approver here.
const APPROVER: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

const TOOLS: usize = 50;
const DECLARED: usize = 10;

fn policy() -> ServerPolicy {
    let declared: Vec<String> = (0..DECLARED).map(tool).collect();
    let agentfile = format!(
        "name: bench\n\
         sandbox:\n  command: [agent]\n\
         mcp:\n  servers:\n    - id: accounting\n      url: http://127.0.0.1:8080/mcp\n      tools: [{}]\n\
         human_gates:\n  enabled: true\n  require_approval_for: [{}]\n  approver_pubkey: {APPROVER}\n",
        declared.join(", "),
        tool(1)
    );
    let manifest =
        constle_manifest::parse_str(&agentfile, Path::new("/bench/agent.yaml"), &|_| None)
            .expect("the bench Agentfile")
            .manifest;
    let server = manifest.mcp.server("accounting").expect("the server");
    ServerPolicy::new(server, &manifest.human_gates)
}

/// Tool `i`; the first [`DECLARED`] are declared, every fifth of the list
/// is.
fn tool(i: usize) -> String {
    format!("tool_{i:02}")
}

fn tools_list() -> Vec<u8> {
    let tools: Vec<_> = (0..TOOLS)
        .map(|i| {
            // Interleave declared and undeclared tools.
            let n = if i % 5 == 0 { i / 5 } else { DECLARED + i };
            json!({
                "name": tool(n),
                "description": format!("Does thing number {n} to the accounting system and returns a short report."),
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "month": {"type": "string", "description": "YYYY-MM"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100}
                    },
                    "required": ["month"]
                }
            })
        })
        .collect();
    json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": tools, "nextCursor": "page-2"}})
        .to_string()
        .into_bytes()
}

fn bench(c: &mut Criterion) {
    let policy = policy();
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1234567,"method":"tools/call","params":{{"name":"{}","arguments":{{"month":"2025-01"}}}}}}"#,
        tool(0)
    )
    .into_bytes();
    let result =
        br#"{"jsonrpc":"2.0","id":1234567,"result":{"content":[{"type":"text","text":"ok"}]}}"#;
    let list = tools_list();

    let mut group = c.benchmark_group("inspect");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tools_call", |b| {
        b.iter(|| {
            let inspection = inspect(
                &policy,
                black_box(&call),
                Some("application/json"),
                Some(Revision::V2025_06_18),
            );
            assert!(matches!(inspection, Inspection::Forward(_)));
            inspection
        })
    });
    group.finish();

    let mut group = c.benchmark_group("filter_server_message");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tools_call_result", |b| {
        b.iter(|| filter_server_message(&policy, black_box(result), |_| false))
    });
    group.bench_function("50_tools", |b| {
        b.iter(|| filter_server_message(&policy, black_box(&list), |_| true))
    });
    group.finish();

    let mut group = c.benchmark_group("filter_tools_list");
    group.throughput(Throughput::Elements(1));
    group.bench_function("50_tools", |b| {
        b.iter(|| filter_tools_list(&policy, black_box(&list)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
