//! The tree of a 100 000-entry log beside plain verification of it,
//! measured in the same run.
//!
//! - `tlog/verify_file`: `constle_audit::verify_file` of the day file (what
//!   `constle audit verify` does for it), the baseline.
//! - `tlog/from_log_dir`: reading the agent's day files and building the
//!   tree of all lines, with the root.
//! - `tlog/push_100k`: the tree alone, from lines already in memory.
//! - `tlog/proofs_1k`: 1 000 inclusion proofs and 1 000 consistency proofs
//!   against the full tree, made and verified.

#![allow(
    clippy::expect_used,
    missing_docs,
    reason = "a benchmark that cannot set up must stop"
)]

use std::hint::black_box;

use constle_audit::{Appender, Event, TrustAnchors, Verdict, verify_file};
use constle_identity::{Name, SigningIdentity};
use constle_tlog::{LogTree, verify_consistency, verify_inclusion};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const ENTRIES: usize = 100_000;

fn event(i: usize) -> Event {
    Event::new("network_allowed")
        .and_then(|e| e.with("host", "api.groq.com"))
        .and_then(|e| e.with("port", 443))
        .and_then(|e| e.with("squid", "TCP_TUNNEL/200"))
        .and_then(|e| e.with("address", format!("203.0.113.{}", i % 256)))
        .expect("a valid event")
}

fn tree(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let agent = Name::new("bench-agent").expect("a name");
    let key = SigningIdentity::from_bytes(&[42; 32]);
    let did = key.did().clone();
    let appender = Appender::new(dir.path(), agent.clone(), Some(key)).expect("an appender");
    let written = appender
        .append((0..ENTRIES).map(event).collect())
        .expect("written");
    drop(appender);
    let path = written[0].path.clone();
    let bytes = std::fs::read(&path).expect("the log");
    let lines: Vec<&[u8]> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), ENTRIES);
    let anchors = TrustAnchors {
        agent: Some(agent.clone()),
        agent_did: Some(did),
        approver: None,
        approvers: None,
        terminal_approves: false,
        pinned: true,
    };

    let mut group = c.benchmark_group("tlog");
    group.throughput(Throughput::Elements(ENTRIES as u64));
    group.sample_size(10);
    group.bench_function("verify_file", |b| {
        b.iter(|| {
            let verdict = verify_file(black_box(&path), &anchors).expect("read");
            assert!(matches!(verdict, Verdict::Verified(_)));
        })
    });
    group.bench_function("from_log_dir", |b| {
        b.iter(|| {
            let read = LogTree::from_log_dir(black_box(dir.path()), &agent).expect("the tree");
            black_box(read.tree.root())
        })
    });
    group.bench_function("push_100k", |b| {
        b.iter(|| {
            let mut tree = LogTree::new();
            for line in &lines {
                tree.push(black_box(line));
            }
            black_box(tree.root())
        })
    });
    let mut full = LogTree::new();
    for line in &lines {
        full.push(line);
    }
    let head = full.head();
    group.throughput(Throughput::Elements(1000));
    group.bench_function("proofs_1k", |b| {
        b.iter(|| {
            for k in 0..1000u64 {
                let index = (k * 99_991) % ENTRIES as u64;
                let proof = full.inclusion_proof(index, head.size).expect("a proof");
                verify_inclusion(lines[index as usize], &head, &proof).expect("verifies");
                let old = full.head_at(index + 1).expect("a head");
                let proof = full
                    .consistency_proof(old.size, head.size)
                    .expect("a proof");
                verify_consistency(&old, &head, &proof).expect("verifies");
            }
        })
    });
    group.finish();
}

criterion_group!(benches, tree);
criterion_main!(benches);
