//! Accepted envelopes per second and latency percentiles, beside baselines
//! measured in the same run, printed as a table (`bench/a2a.sh`).
//!
//! - `verify_strict (raw)`: one Ed25519 `verify_strict` of a message the
//!   size of the benchmark's signed message: the floor of any listener.
//! - `parse + verify`: [`Envelope::from_slice`] and [`Envelope::verify`]
//!   (strict JSON, RFC 8785, `verify_strict`), no I/O.
//! - `append + fdatasync (raw)`: the least a durable record costs.
//! - `embedded, 1 sender` / `8 senders`: signed envelopes POSTed over
//!   loopback HTTP to a listener with the embedded store, one at a time or
//!   from 8 concurrent connections; every one accepted (202).
//! - `SET NX PX (raw)`: one bare Redis round trip over the same Unix socket.
//! - `redis, 1 sender` / `8 senders`: as above with the Redis store.
//!
//! Envelopes are signed before timing starts. Redis is a private
//! `redis-server` from `constle_testkit` (skipped when not installed).
//! Percentiles as `constle_testkit::bench` defines them (nearest rank).
//! `--quick` runs fewer iterations.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark that cannot set up must stop, and prints its table"
)]

use std::io::Write as _;
use std::time::{Duration, Instant};

use constle_a2a::{
    Envelope, Inbox, Listener, ListenerConfig, MAX_ENVELOPE_BYTES, PeerUrl, ReplayStore,
    sign_envelope,
};
use constle_identity::SigningIdentity;
use constle_testkit::bench::Samples;
use constle_testkit::{RedisServer, find_tool};
use jiff::Timestamp;
use serde_json::json;

const SENDERS: usize = 8;

struct Row {
    label: &'static str,
    group: &'static str,
    baseline: bool,
    per_second: f64,
    p50: Duration,
    p99: Duration,
}

fn row(
    label: &'static str,
    group: &'static str,
    baseline: bool,
    total: Duration,
    latencies: Vec<Duration>,
) -> Row {
    let latencies = Samples::new(latencies);
    Row {
        label,
        group,
        baseline,
        per_second: latencies.len() as f64 / total.as_secs_f64(),
        p50: latencies.median().unwrap(),
        p99: latencies.percentile(99.0).unwrap(),
    }
}

fn timed(n: usize, mut f: impl FnMut(usize)) -> (Duration, Vec<Duration>) {
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        f(i);
        latencies.push(t.elapsed());
    }
    (start.elapsed(), latencies)
}

fn body() -> serde_json::Value {
    json!({"text": "a message of ordinary size for an agent to send to another agent", "n": 42})
}

fn envelopes(from: &SigningIdentity, to: &SigningIdentity, n: usize) -> Vec<Vec<u8>> {
    let now = Timestamp::now();
    (0..n)
        .map(|_| {
            sign_envelope(from, to.did(), body(), now)
                .unwrap()
                .to_bytes()
        })
        .collect()
}

/// Starts a listener; a task drains its inbox.
async fn listener(store: ReplayStore, alice: &SigningIdentity, bob: &SigningIdentity) -> PeerUrl {
    let inbox = Inbox::default();
    let drain = inbox.clone();
    tokio::spawn(async move {
        loop {
            drain.wait().await;
        }
    });
    let config = ListenerConfig::new(bob.did().clone(), [alice.did().clone()], store, inbox);
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = PeerUrl::parse(&format!("http://{}", tcp.local_addr().unwrap())).unwrap();
    tokio::spawn(Listener::new(config).serve(tcp));
    url
}

async fn post_all(client: &reqwest::Client, url: &str, bodies: Vec<Vec<u8>>) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(bodies.len());
    for body in bodies {
        let t = Instant::now();
        let status = client.post(url).body(body).send().await.unwrap().status();
        latencies.push(t.elapsed());
        assert_eq!(status.as_u16(), 202, "every benchmark envelope is accepted");
    }
    latencies
}

/// `n` envelopes from `senders` concurrent connections.
async fn accepted(
    url: &PeerUrl,
    bodies: Vec<Vec<u8>>,
    senders: usize,
) -> (Duration, Vec<Duration>) {
    let target = url.messages_url().to_string();
    let mut chunks: Vec<Vec<Vec<u8>>> = (0..senders).map(|_| Vec::new()).collect();
    for (i, body) in bodies.into_iter().enumerate() {
        chunks[i % senders].push(body);
    }
    // Warm the connections up.
    let clients: Vec<reqwest::Client> = (0..senders)
        .map(|_| reqwest::Client::builder().no_proxy().build().unwrap())
        .collect();
    let start = Instant::now();
    let tasks: Vec<_> = chunks
        .into_iter()
        .zip(clients)
        .map(|(chunk, client)| {
            let target = target.clone();
            tokio::spawn(async move { post_all(&client, &target, chunk).await })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    (start.elapsed(), latencies)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let scale = if quick { 5 } else { 1 };
    let alice = SigningIdentity::generate();
    let bob = SigningIdentity::generate();
    let redis =
        find_tool("redis-server").map(|_| RedisServer::start().expect("redis-server starts"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();

    // Verification, no I/O.
    let n = 20_000 / scale;
    let sample = sign_envelope(&alice, bob.did(), body(), Timestamp::now()).unwrap();
    let message = {
        let mut m = b"constle-a2a-v1\n".to_vec();
        m.extend(sample.to_bytes());
        m
    };
    let signature = alice.sign(&message);
    let (total, lat) = timed(n, |_| alice.did().verify(&message, &signature).unwrap());
    rows.push(row("verify_strict (raw)", "verify", true, total, lat));
    let wire = sample.to_bytes();
    let now = Timestamp::now();
    let (total, lat) = timed(n, |_| {
        Envelope::from_slice(&wire, MAX_ENVELOPE_BYTES)
            .unwrap()
            .verify(bob.did(), |d| d == alice.did(), now)
            .unwrap();
    });
    rows.push(row("parse + verify (no I/O)", "verify", false, total, lat));

    // Embedded.
    let home = tempfile::tempdir().unwrap();
    let n = 2_000 / scale;
    let raw = home.path().join("raw");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&raw)
        .unwrap();
    let (total, lat) = timed(n, |i| {
        file.write_all(format!("1775000000 {} {i:032x}\n", alice.did()).as_bytes())
            .unwrap();
        file.sync_data().unwrap();
    });
    rows.push(row(
        "append + fdatasync (raw)",
        "embedded",
        true,
        total,
        lat,
    ));
    let url = runtime.block_on(async {
        listener(
            ReplayStore::embedded(home.path(), bob.did()).await.unwrap(),
            &alice,
            &bob,
        )
        .await
    });
    let (total, lat) = runtime.block_on(accepted(&url, envelopes(&alice, &bob, n), 1));
    rows.push(row("embedded, 1 sender", "embedded", false, total, lat));
    let (total, lat) = runtime.block_on(accepted(&url, envelopes(&alice, &bob, n * 2), SENDERS));
    rows.push(row("embedded, 8 senders", "embedded", false, total, lat));

    // Redis.
    if let Some(redis) = &redis {
        let n = 5_000 / scale;
        let (total, lat) = runtime.block_on(async {
            let client = redis::Client::open(redis.url()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let mut latencies = Vec::with_capacity(n);
            let start = Instant::now();
            for i in 0..n {
                let t = Instant::now();
                let _: Option<String> = redis::cmd("SET")
                    .arg(format!("bench:raw:{i}"))
                    .arg("1")
                    .arg("NX")
                    .arg("PX")
                    .arg(360_000)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                latencies.push(t.elapsed());
            }
            (start.elapsed(), latencies)
        });
        rows.push(row("SET NX PX (raw)", "redis", true, total, lat));
        let url = runtime.block_on(async {
            listener(
                ReplayStore::redis(&redis.url(), bob.did()).await.unwrap(),
                &alice,
                &bob,
            )
            .await
        });
        let (total, lat) = runtime.block_on(accepted(&url, envelopes(&alice, &bob, n), 1));
        rows.push(row("redis, 1 sender", "redis", false, total, lat));
        let (total, lat) =
            runtime.block_on(accepted(&url, envelopes(&alice, &bob, n * 2), SENDERS));
        rows.push(row("redis, 8 senders", "redis", false, total, lat));
    } else {
        println!("(redis-server is not installed: Redis rows skipped)");
    }

    println!(
        "{:<28} {:>12} {:>10} {:>10}  ratio",
        "measurement", "per second", "p50", "p99"
    );
    for r in &rows {
        let base = rows
            .iter()
            .find(|b| b.group == r.group && b.baseline)
            .map(|b| b.per_second);
        let ratio = match (r.baseline, base) {
            (true, _) => "baseline".to_owned(),
            (false, Some(base)) => format!(
                "{:.2}x the time of the {} baseline",
                base / r.per_second,
                r.group
            ),
            (false, None) => String::new(),
        };
        println!(
            "{:<28} {:>12.0} {:>10} {:>10}  {ratio}",
            r.label,
            r.per_second,
            format!("{:.1?}", r.p50),
            format!("{:.1?}", r.p99),
        );
    }
}
