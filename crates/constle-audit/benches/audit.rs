//! Audit log throughput beside raw Ed25519, measured in the same run.
//!
//! - `raw/sign`, `raw/verify_strict`, `raw/verify_batch` (one core) and
//!   `raw/verify_batch_all_cores`: the baselines, on messages the size of a
//!   typical entry.
//! - `append/group_commit`: 1024 entries through the writer thread, waited
//!   for together; each batch is `fdatasync`ed and anchored before any of its
//!   entries is acknowledged (the documented durability policy).
//! - `verify/day_file`: verification of a 10 000-entry day file.
//! - `parse/line*`: one line read back; `write/line*`: one entry's object
//!   written in the log's spelling (JCS with unsafe characters escaped).
//!   ASCII only, and with text beyond ASCII (the slow path of strings).
//! - `*_cpu`: the same work timed by the CPU time of all the process's
//!   threads instead of the clock, so that a busy machine does not move the
//!   ratio between verification and raw batch verification.
//!
//! `bench/audit.sh` runs this and prints the ratios.

#![allow(
    clippy::expect_used,
    reason = "a benchmark that cannot set up must stop"
)]

use std::hint::black_box;

use constle_audit::{Appender, AuditLog, DayFile, Event, TrustAnchors, Verdict, verify_contents};
use constle_identity::{Name, SigningIdentity};
use constle_testkit::bench::process_cpu_of;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use ed25519_dalek::{Signature, VerifyingKey};

const BATCH: usize = 1024;
const LOG_ENTRIES: usize = 10_000;

fn event(i: usize) -> Event {
    Event::new("network_allowed")
        .and_then(|e| e.with("host", "api.groq.com"))
        .and_then(|e| e.with("port", 443))
        .and_then(|e| e.with("squid", "TCP_TUNNEL/200"))
        .and_then(|e| e.with("address", format!("203.0.113.{}", i % 256)))
        .expect("a valid event")
}

fn key() -> SigningIdentity {
    SigningIdentity::from_bytes(&[42; 32])
}

fn agent() -> Name {
    Name::new("bench-agent").expect("a valid name")
}

fn raw(c: &mut Criterion) {
    let signer = key();
    let message = vec![b'x'; 330];
    let signature = signer.sign(&message);
    let public: VerifyingKey = *signer.did().verifying_key();
    let mut group = c.benchmark_group("raw");
    group.throughput(Throughput::Elements(1));
    group.bench_function("sign", |b| b.iter(|| signer.sign(black_box(&message))));
    group.bench_function("verify_strict", |b| {
        b.iter(|| public.verify_strict(black_box(&message), &signature))
    });
    let messages: Vec<Vec<u8>> = (0..BATCH)
        .map(|i| format!("{i:0330}").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
    let signatures: Vec<Signature> = messages.iter().map(|m| signer.sign(m)).collect();
    let keys = vec![public; BATCH];
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("verify_batch", |b| {
        b.iter(|| ed25519_dalek::verify_batch(black_box(&refs), &signatures, &keys))
    });
    group.bench_function("verify_batch_all_cores", |b| {
        b.iter(|| verify_batch_all_cores(black_box(&refs), &signatures, &keys))
    });
    group.bench_function("verify_batch_all_cores_cpu", |b| {
        b.iter_custom(|iters| {
            process_cpu_of(iters, || {
                verify_batch_all_cores(black_box(&refs), &signatures, &keys);
            })
        })
    });
    group.finish();
}

/// `verify_batch` with the work split evenly over every core.
fn verify_batch_all_cores(refs: &[&[u8]], signatures: &[Signature], keys: &[VerifyingKey]) -> bool {
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let chunk = refs.len().div_ceil(workers);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..refs.len())
            .step_by(chunk)
            .map(|start| {
                let end = (start + chunk).min(refs.len());
                let (refs, signatures, keys) = (
                    &refs[start..end],
                    &signatures[start..end],
                    &keys[start..end],
                );
                scope.spawn(move || ed25519_dalek::verify_batch(refs, signatures, keys))
            })
            .collect();
        handles
            .into_iter()
            .all(|h| h.join().is_ok_and(|r| r.is_ok()))
    })
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(20);
    let dir = tempfile::tempdir().expect("a temp dir");
    let log =
        AuditLog::start(Appender::new(dir.path(), agent(), Some(key())).expect("an appender"));
    group.bench_function("group_commit", |b| {
        b.iter_batched(
            || (0..BATCH).map(event).collect::<Vec<_>>(),
            |events| {
                let pending: Vec<_> = events.into_iter().map(|e| log.submit(e)).collect();
                pending.into_iter().for_each(|p| {
                    p.wait().expect("written");
                })
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn verify(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let appender = Appender::new(dir.path(), agent(), Some(key())).expect("an appender");
    let written = appender
        .append((0..LOG_ENTRIES).map(event).collect())
        .expect("written");
    let path = written[0].path.clone();
    let bytes = std::fs::read(&path).expect("the log");
    let day = DayFile::from_path(&path);
    let anchors = TrustAnchors {
        agent: Some(agent()),
        agent_did: Some(key().did().clone()),
        approver: None,
        approvers: None,
        terminal_approves: false,
        pinned: true,
    };
    let first_line = bytes
        .split(|&b| b == b'\n')
        .next()
        .expect("a line")
        .to_vec();
    c.bench_function("parse/line", |b| {
        b.iter(|| constle_audit::parse_line(black_box(&first_line)))
    });
    let value: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&first_line).expect("a JSON object");
    c.bench_function("parse/serde_json", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&first_line)))
    });
    c.bench_function("write/line", |b| {
        b.iter(|| constle_audit::LINE_SPELLING.object(black_box(&value)))
    });
    // Text beyond ASCII takes the slow path of string writing.
    let mut text = value.clone();
    text.insert(
        "reason".into(),
        "Zahlung f\u{fc}r Rechnung \u{2116}42 \u{2014} na\u{ef}ve caf\u{e9} \u{1f600}, \u{65e5}\u{672c}\u{8a9e}".into(),
    );
    c.bench_function("write/line_non_ascii", |b| {
        b.iter(|| constle_audit::LINE_SPELLING.object(black_box(&text)))
    });
    let text_line = constle_audit::LINE_SPELLING.object(&text);
    c.bench_function("parse/line_non_ascii", |b| {
        b.iter(|| constle_audit::parse_line(black_box(&text_line)))
    });
    let mut group = c.benchmark_group("verify");
    group.throughput(Throughput::Elements(LOG_ENTRIES as u64));
    group.sample_size(10);
    let verify_once = || {
        let verdict = verify_contents(&path, day.as_ref(), black_box(&bytes), &anchors);
        assert!(matches!(verdict, Verdict::Verified(_)));
    };
    group.bench_function("day_file", |b| b.iter(verify_once));
    group.bench_function("day_file_cpu", |b| {
        b.iter_custom(|iters| process_cpu_of(iters, verify_once))
    });
    group.finish();
}

criterion_group!(benches, raw, append, verify);
criterion_main!(benches);
