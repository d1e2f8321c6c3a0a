//! Reservations per second, beside a bare baseline measured in the same run.
//!
//! - `embedded/baseline`: write a small file, fsync it, rename it over
//!   another, fsync the directory: the least a crash-safe replace costs.
//! - `embedded/one_run`: one run reserving one call at a time.
//! - `embedded/8_runs`: 8 runs of one agent at once, each on its own thread
//!   with its own current-thread runtime and its own `Ledger` (so its own
//!   lock-file descriptions: they contend on the `flock` exactly as 8
//!   processes would).
//! - `redis/baseline`: one `INCRBY` round trip over the same Unix socket.
//! - `redis/one_run` and `redis/8_runs`: as for the embedded store; each of
//!   the 8 has its own connection, as 8 machines would.
//!
//! Redis is a private `redis-server` from `constle_testkit` (skipped when
//! it is not installed). `bench/spend.sh` runs this and prints the table.

#![allow(
    clippy::expect_used,
    reason = "a benchmark that cannot set up must stop"
)]

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use constle_identity::Name;
use constle_spend::{Caps, Ledger, LedgerConfig, LedgerKey, Source};
use constle_testkit::{RedisServer, find_tool};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use jiff::Timestamp;
use rust_decimal::Decimal;
use tokio::runtime::Runtime;

const CONCURRENT_RUNS: usize = 8;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn key() -> LedgerKey {
    LedgerKey::for_name(&Name::new("bench-agent").expect("a valid name"))
}

/// What every charge pays for.
fn tools() -> Source {
    Source::Mcp {
        server: "bench".to_owned(),
    }
}

/// Small enough that no benchmark run comes near the largest total.
fn amount() -> Decimal {
    Decimal::new(1, 4)
}

/// One run reserving one call at a time, on the gate's kind of runtime.
fn one_run(c: &mut Criterion, group: &str, config: &LedgerConfig) {
    let runtime = runtime();
    let ledger = runtime
        .block_on(Ledger::open(config, key()))
        .expect("the ledger opens");
    let run = ledger.start_run(Caps::default());
    let mut group = c.benchmark_group(group);
    group.throughput(Throughput::Elements(1));
    group.bench_function("one_run", |b| {
        b.iter(|| {
            runtime
                .block_on(run.reserve(amount(), tools(), Timestamp::now()))
                .expect("charged")
        })
    });
    group.finish();
}

/// [`CONCURRENT_RUNS`] runs at once, each on its own thread, runtime and
/// ledger; timed from when all are ready until the last one is done.
fn concurrent_runs(c: &mut Criterion, group: &str, config: &LedgerConfig) {
    let mut group = c.benchmark_group(group);
    group.throughput(Throughput::Elements(CONCURRENT_RUNS as u64));
    group.bench_function("8_runs", |b| {
        b.iter_custom(|iters| {
            let ready = Arc::new(Barrier::new(CONCURRENT_RUNS + 1));
            let threads: Vec<_> = (0..CONCURRENT_RUNS)
                .map(|_| {
                    let ready = Arc::clone(&ready);
                    let config = config.clone();
                    std::thread::spawn(move || {
                        let runtime = runtime();
                        let ledger = runtime
                            .block_on(Ledger::open(&config, key()))
                            .expect("the ledger opens");
                        let run = ledger.start_run(Caps::default());
                        ready.wait();
                        runtime.block_on(async {
                            for _ in 0..iters {
                                run.reserve(amount(), tools(), Timestamp::now())
                                    .await
                                    .expect("charged");
                            }
                        });
                    })
                })
                .collect();
            ready.wait();
            let start = Instant::now();
            for thread in threads {
                thread.join().expect("a run finished");
            }
            start.elapsed()
        })
    });
    group.finish();
}

fn replace_durably(dir: &Path, bytes: &[u8]) {
    let temp = dir.join("state.json.tmp");
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&temp)
        .expect("temp file");
    file.write_all(bytes).expect("written");
    file.sync_all().expect("fsync");
    std::fs::rename(&temp, dir.join("state.json")).expect("renamed");
    File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("fsync dir");
}

fn embedded(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let state = br#"{"version":1,"days":{"2026-04-01":"1.5"},"months":{"2026-04":"1.5"}}"#;
    let mut group = c.benchmark_group("embedded");
    group.throughput(Throughput::Elements(1));
    group.bench_function("baseline", |b| {
        b.iter(|| replace_durably(dir.path(), state))
    });
    group.finish();
    let config = LedgerConfig::Embedded {
        dir: dir.path().join("ledger"),
    };
    one_run(c, "embedded", &config);
    concurrent_runs(c, "embedded", &config);
}

#[allow(clippy::print_stderr)]
fn redis(c: &mut Criterion) {
    if find_tool("redis-server").is_none() {
        eprintln!("skipped: the redis benchmarks need `redis-server`");
        return;
    }
    // Started on this (the main) thread, which outlives every benchmark.
    let server = RedisServer::start().expect("redis-server starts");
    let runtime = runtime();
    let mut conn = runtime
        .block_on(async {
            redis::Client::open(server.url())?
                .get_multiplexed_async_connection()
                .await
        })
        .expect("a connection");
    let mut group = c.benchmark_group("redis");
    group.throughput(Throughput::Elements(1));
    group.bench_function("baseline", |b| {
        b.iter(|| {
            runtime
                .block_on(
                    redis::cmd("INCRBY")
                        .arg("bench:baseline")
                        .arg(1_000_000)
                        .query_async::<i64>(&mut conn),
                )
                .expect("INCRBY")
        })
    });
    group.finish();
    let config = LedgerConfig::Redis { url: server.url() };
    one_run(c, "redis", &config);
    concurrent_runs(c, "redis", &config);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = embedded, redis
}
criterion_main!(benches);
