//! Starting the provider and the gates on threads of their own, and the
//! rounds: every path of one kind of call timed in turn, with the CPU
//! time each round took.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path as FsPath, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use constle_llm_gate::{Gate, Key, Prices, Provider};
use constle_spend::LedgerConfig;
use constle_testkit::bench::{Process, process_cpu, threads_cpu};
use rust_decimal::Decimal;
use tokio::net::UnixListener;

use crate::client::{Connection, Target, Timing};
use crate::meter::LedgerMeter;
use crate::scenario::{Api, MODEL, Scenario};
use crate::upstream::Pace;

/// The command line.
pub struct Config {
    pub rounds: usize,
    pub round: Duration,
    pub warmup: Duration,
    pub concurrency: usize,
    pub tokens: u64,
    /// The provider's wait before each token but the first.
    pub interval: Duration,
    /// The provider's wait before the first token (a JSON answer), as a
    /// model's before it starts answering.
    pub first: Duration,
    /// Each connection's wait between its calls, as an agent's between
    /// model turns (the previous call's settlement has time to finish).
    pub pause: Duration,
}

/// The ways a call can go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// To the provider over TCP.
    Direct,
    /// Through a gate with no meter.
    Gate,
    /// Through a gate charging the spend ledger.
    Ledger,
    /// Through a gate charging the ledger and writing the audit log.
    Audited,
    /// Through a gate charging a Redis ledger and writing the audit log.
    Redis,
}

impl Path {
    pub const ALL: [Path; 5] = [
        Path::Direct,
        Path::Gate,
        Path::Ledger,
        Path::Audited,
        Path::Redis,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Path::Direct => "direct (TCP)",
            Path::Gate => "gate, unmetered",
            Path::Ledger => "gate + ledger",
            Path::Audited => "gate + ledger + audit log",
            Path::Redis => "gate + Redis ledger + audit",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Gate => "gate",
            Path::Ledger => "gate_ledger",
            Path::Audited => "gate_ledger_audit",
            Path::Redis => "gate_redis_audit",
        }
    }
}

/// Where each path's calls go.
pub struct Targets {
    provider: SocketAddr,
    gates: HashMap<(Api, Path), PathBuf>,
}

impl Targets {
    fn of(&self, api: Api, path: Path) -> Target {
        match self.gates.get(&(api, path)) {
            Some(socket) => Target::Unix(socket.clone()),
            None => Target::Tcp(self.provider),
        }
    }
}

/// The gate's threads: its runtime's (blocking ones included) and the
/// audit writer's.
fn gate_cpu() -> Duration {
    threads_cpu(Process::Current, |name| {
        name == "bench-gate" || name == "constle-audit"
    })
}

/// Runs `start` on a thread named `name`, on a current-thread runtime
/// that lives as long as the process, and returns what it made.
fn on_thread<T: Send + 'static>(
    name: &str,
    start: impl FnOnce(&tokio::runtime::Runtime) -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread_name = name.to_owned();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name(thread_name)
                // Blocking threads (the ledger's writes) live through the
                // rounds, so their CPU time is read, not lost with them.
                .thread_keep_alive(Duration::from_secs(86_400))
                .build()
                .expect("a runtime");
            tx.send(start(&runtime)).expect("the main thread");
            runtime.block_on(std::future::pending::<()>());
        })
        .expect("a thread");
    rx.recv().expect("a started thread")
}

/// The provider, on thread `bench-upstream`.
pub fn start_upstream(pace: Pace) -> SocketAddr {
    on_thread("bench-upstream", move |runtime| {
        crate::upstream::start(runtime, pace)
    })
}

/// The gates, on thread `bench-gate`, with their ledgers and logs in
/// `dir`, and one ledger in the Redis server at `redis`.
pub fn start_gates(dir: &FsPath, redis: String, provider: SocketAddr) -> Targets {
    let dir = dir.to_owned();
    let gates = on_thread("bench-gate", move |runtime| {
        runtime.block_on(serve_gates(&dir, redis, provider))
    });
    Targets { provider, gates }
}

async fn serve_gates(
    dir: &FsPath,
    redis: String,
    provider: SocketAddr,
) -> HashMap<(Api, Path), PathBuf> {
    let embedded = |name: &str| LedgerConfig::Embedded {
        dir: dir.join(name).join("ledger"),
    };
    let ledger = LedgerMeter::open(embedded("ledger"), None).await;
    let logs = dir.join("audited").join("logs");
    let audited = LedgerMeter::open(embedded("audited"), Some(&logs)).await;
    let logs = dir.join("redis").join("logs");
    let redis = LedgerMeter::open(LedgerConfig::Redis { url: redis }, Some(&logs)).await;
    let mut gates = HashMap::new();
    for api in [Api::Anthropic, Api::Responses] {
        let meters = [
            (Path::Gate, None),
            (Path::Ledger, Some(ledger.clone())),
            (Path::Audited, Some(audited.clone())),
            (Path::Redis, Some(redis.clone())),
        ];
        for (path, meter) in meters {
            let socket = dir.join(format!("{api:?}-{}.sock", path.key()));
            let listener = UnixListener::bind(&socket).expect("a socket");
            let gate = Gate::new(provider_for(api, provider)).expect("a gate");
            let gate = match meter {
                Some(meter) => gate.with_meter(meter),
                None => gate,
            };
            tokio::spawn(gate.serve(listener));
            gates.insert((api, path), socket);
        }
    }
    gates
}

/// The provider as an Agentfile declares it: its base, a key, one model.
fn provider_for(api: Api, addr: SocketAddr) -> Provider {
    let (api, base) = match api {
        Api::Anthropic => (constle_llm_gate::Api::Anthropic, format!("http://{addr}")),
        Api::Responses => (constle_llm_gate::Api::OpenAi, format!("http://{addr}/v1")),
    };
    let prices = Prices {
        input: Decimal::new(3, 0),
        output: Decimal::new(15, 0),
        cached_input: Decimal::new(3, 1),
        cache_write: Decimal::new(375, 2),
    };
    Provider {
        id: "bench".to_owned(),
        api,
        upstream: base.parse().expect("a base URL"),
        key: Key::new("sk-bench-key".to_owned()),
        max_output_tokens: 1_000_000,
        models: BTreeMap::from([(MODEL.to_owned(), prices)]),
    }
}

/// One path's round.
pub struct Round {
    pub timings: Vec<Timing>,
    /// The whole process's CPU time over the round.
    pub cpu: Duration,
    /// The gate threads' CPU time over the round.
    pub gate_cpu: Duration,
}

/// Every path's rounds of one kind of call.
pub type Rounds = Vec<(Path, Vec<Round>)>;

/// Every path's rounds of one kind of call, by path.
pub async fn scenario(config: &Config, scenario: Scenario, targets: &Targets) -> Rounds {
    let body = Bytes::from(scenario.body(config.tokens));
    for path in Path::ALL {
        let target = targets.of(scenario.api, path);
        round(config, config.warmup, scenario, &target, &body).await;
    }
    let mut rounds: Rounds = Path::ALL.iter().map(|&p| (p, Vec::new())).collect();
    for r in 0..config.rounds {
        let mut order: Vec<usize> = (0..rounds.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let target = targets.of(scenario.api, rounds[i].0);
            let measured = round(config, config.round, scenario, &target, &body).await;
            rounds[i].1.push(measured);
        }
    }
    rounds
}

/// Calls for `length`, `config.concurrency` at a time.
async fn round(
    config: &Config,
    length: Duration,
    scenario: Scenario,
    target: &Target,
    body: &Bytes,
) -> Round {
    let mut connections = Vec::new();
    for _ in 0..config.concurrency {
        connections.push(Connection::open(target).await);
    }
    let (cpu, gate) = (process_cpu(), gate_cpu());
    let deadline = Instant::now() + length;
    let loads = connections.iter_mut().map(|connection| async move {
        let mut timings = Vec::new();
        while Instant::now() < deadline {
            timings.push(connection.call(scenario, body, config.tokens).await);
            if !config.pause.is_zero() {
                tokio::time::sleep(config.pause).await;
            }
        }
        timings
    });
    let timings = futures_util::future::join_all(loads).await;
    Round {
        timings: timings.into_iter().flatten().collect(),
        cpu: process_cpu() - cpu,
        gate_cpu: gate_cpu().saturating_sub(gate),
    }
}
