//! Answers a second, in process: the resolver's own cost of one UDP query,
//! before any socket.
//!
//! - `allowed/a`: an `A` query for an allowed name that already has its
//!   placeholder (every lookup after the first).
//! - `refused/a`: an `A` query for a name not in `allowed_hosts`.
//! - `refused/txt`: a `TXT` query with a long random-looking first label,
//!   the shape of a tunnelling attempt.
//! - `*_cpu`: the same work timed by the process's CPU time instead of the
//!   clock, which other programs on a shared machine disturb far less.

#![allow(
    clippy::expect_used,
    reason = "a benchmark that cannot set up must stop"
)]

use std::hint::black_box;

use constle_dns::{Resolver, Transport};
use constle_egress::EgressPolicy;
use constle_manifest::Hostname;
use constle_testkit::bench::process_cpu_of;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hickory_proto::op::Message;
use hickory_proto::op::Query;
use hickory_proto::rr::{Name, RecordType};

fn query(name: &str, qtype: RecordType) -> Vec<u8> {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).expect("name"), qtype));
    message.to_vec().expect("encode")
}

/// One query answered, its decision taken and its reply kept.
fn answer(resolver: &mut Resolver, query: &[u8]) {
    let answer = resolver.answer(black_box(query), Transport::Udp);
    black_box(answer.reply_after(|decision| {
        black_box(decision);
    }));
}

fn bench(c: &mut Criterion) {
    let policy = EgressPolicy::restricted([Hostname::new("api.example.com").expect("host")]);
    let mut resolver = Resolver::new(Some(&policy));
    let mut group = c.benchmark_group("answer");
    group.throughput(Throughput::Elements(1));
    let tunnel = format!("{}.example.com.", "q".repeat(63));
    for (id, bytes) in [
        ("allowed/a", query("api.example.com.", RecordType::A)),
        ("refused/a", query("other.example.com.", RecordType::A)),
        ("refused/txt", query(&tunnel, RecordType::TXT)),
    ] {
        group.bench_function(id, |b| b.iter(|| answer(&mut resolver, &bytes)));
        group.bench_function(format!("{id}_cpu"), |b| {
            b.iter_custom(|iters| process_cpu_of(iters, || answer(&mut resolver, &bytes)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
