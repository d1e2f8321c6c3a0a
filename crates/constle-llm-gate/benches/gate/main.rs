//! What the model gate adds to a model call: the same client sends the
//! same call to a simulated provider directly and through the gate, and
//! the two are compared in the same run.
//!
//! Everything runs in this process, on loopback only:
//!
//! - the provider ([`upstream`]): a hyper HTTP/1.1 server on 127.0.0.1 on
//!   its own current-thread runtime (thread `bench-upstream`), answering
//!   Anthropic Messages and OpenAI Responses calls, JSON or SSE (each
//!   event its own chunk), `-t` output tokens each, usage in the final
//!   event; as fast as it can, or with `-i` a wait before each token but
//!   the first, as a model paces its output;
//! - the gates: `Gate::new(provider).serve(listener)` on a Unix socket, as
//!   `constle run` serves them, one per API and meter, all on one
//!   current-thread runtime (thread `bench-gate`, its blocking threads
//!   too). Four meters ([`meter`]): `Unmetered` (the gate alone); the
//!   spend ledger a run charges (`constle_spend`'s embedded store in a
//!   directory under Cargo's target directory, so on the disk a
//!   `$CONSTLE_HOME` is on: a durable hold before the call leaves, a
//!   durable settlement after it); that ledger with the run's audit
//!   writes (a signed, fsynced `llm_reserved` written while the call is on
//!   its way and on disk before its answer passes, an `llm_call` after;
//!   thread `constle-audit`); and the same with the ledger in Redis
//!   (`spending.ledger`, as a fleet shares it: a private `redis-server`
//!   on a Unix socket, appending and fsyncing each second, its CPU not
//!   counted);
//! - the client ([`client`]): hyper HTTP/1.1 on this thread's
//!   current-thread runtime, `-c` calls in flight, each on its own
//!   kept-alive connection, back to back or with `-p` a wait between
//!   calls, as an agent's between model turns (a call's settlement, after
//!   its last byte, then has time to finish before the next call's hold): to the provider over TCP on 127.0.0.1 (direct),
//!   or to a gate over its Unix socket. Inside a run the agent's
//!   connection also passes the sandbox's relay (127.0.0.1 TCP to the
//!   gate's socket, spliced), which `bench/gate.sh` measures for the MCP
//!   gate (about 17 µs of CPU and 0.1 ms at p50 a call on a kept-alive
//!   connection); it is not in these numbers.
//!
//! For each kind of call ([`scenario`]: Messages and Responses, JSON and
//! SSE), after a warm-up of every path, `-r` rounds: in each, every path
//! runs for `-d` seconds, direct first in even rounds and last in odd
//! ones, so that drift on a shared machine hits all paths. Per path, over
//! all rounds' calls: the time to the first token (the first chunk holding
//! a token's event; for JSON, the last byte) and to the last byte, p50 and
//! p99; their increase over direct, pooled and per round (the range);
//! the stream's tokens per second from its first token to its last byte
//! (the rate at which tokens pass: without `-i`, the most the path
//! carries), p50, and its ratio to direct; the CPU time per call of the whole
//! process (client, provider, gate and its writers), and of the gate's
//! threads alone (`bench-gate`, `constle-audit`), percentiles and CPU time
//! as `constle_testkit::bench` defines them. The aims (issue 24): the gate
//! adds at most 1 ms to the time to first token at p50; streamed tokens
//! per second through the gate at least 0.95 of direct. A JSON line with
//! the same numbers ends the output.
//!
//! `bench/llm-gate.sh` runs this in release; `-h` lists the options.

#![forbid(unsafe_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up must stop"
)]

mod client;
mod measure;
mod meter;
mod report;
mod scenario;
mod upstream;

use std::time::Duration;

use measure::Config;

const USAGE: &str = "\
usage: gate [-r ROUNDS] [-d SECONDS] [-w SECONDS] [-c CONCURRENCY] [-t TOKENS]
            [-i MICROSECONDS] [-f MILLISECONDS] [-p MILLISECONDS]
  -r ROUNDS        measured rounds of each path, alternating (default 5)
  -d SECONDS       length of one round of one path (default 2)
  -w SECONDS       warm-up of each path before the rounds (default 1)
  -c CONCURRENCY   calls in flight, each on its own connection (default 1)
  -t TOKENS        output tokens of each answer, one SSE event each (default 200)
  -i MICROSECONDS  the provider waits this long before each token but the first, as a
                   model paces its output (default: none, as fast as it can)
  -f MILLISECONDS  the provider waits this long before the first token (a JSON answer), as
                   a model takes to start answering (default: none)
  -p MILLISECONDS  each connection waits this long between its calls, as an agent
                   between model turns (default: none, back to back)";

fn config() -> Result<Config, String> {
    let mut config = Config {
        rounds: 5,
        round: Duration::from_secs(2),
        warmup: Duration::from_secs(1),
        concurrency: 1,
        tokens: 200,
        interval: Duration::ZERO,
        first: Duration::ZERO,
        pause: Duration::ZERO,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // `cargo bench` passes it to every bench target.
            "--bench" => {}
            "-r" => config.rounds = count(&arg, args.next())?,
            "-c" => config.concurrency = count(&arg, args.next())?,
            "-t" => config.tokens = count(&arg, args.next())? as u64,
            "-d" => config.round = seconds(&arg, args.next())?,
            "-w" => config.warmup = seconds(&arg, args.next())?,
            "-i" => config.interval = Duration::from_micros(count(&arg, args.next())? as u64),
            "-f" => config.first = Duration::from_millis(count(&arg, args.next())? as u64),
            "-p" => config.pause = Duration::from_millis(count(&arg, args.next())? as u64),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(config)
}

fn count(flag: &str, value: Option<String>) -> Result<usize, String> {
    value
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{flag} needs a positive whole number"))
}

fn seconds(flag: &str, value: Option<String>) -> Result<Duration, String> {
    value
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{flag} needs a number of seconds"))
}

fn main() {
    let config = match config() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("llm gate bench: {err}\n{USAGE}");
            std::process::exit(2);
        }
    };
    // On the disk the target directory is on, not a tmpfs: the ledger's
    // and the log's fsyncs cost what they cost a run.
    let dir = tempfile::Builder::new()
        .prefix("llm-gate-bench")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory");
    let provider = measure::start_upstream(upstream::Pace {
        tokens: config.tokens,
        interval: config.interval,
        first: config.first,
    });
    // Kept on this thread, which it dies with. Appending and fsyncing
    // each second, as a Redis that keeps a fleet's ledger is run.
    let redis = constle_testkit::RedisServer::start().expect("a redis-server (scripts/setup.sh)");
    redis
        .config_set("appendonly", "yes")
        .expect("an appending redis-server");
    let targets = measure::start_gates(dir.path(), redis.url(), provider);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut tables = Vec::new();
    for scenario in scenario::Scenario::ALL {
        let summaries = runtime.block_on(measure::scenario(&config, scenario, &targets));
        print!("{}", report::table(&config, scenario, &summaries));
        tables.push((scenario, summaries));
    }
    println!("{}", report::json(&config, &tables));
}
