//! The ledger across processes: several runs of one agent at once, and runs
//! killed with `kill -9` at random instants, against the embedded store and
//! a real `redis-server`.
//!
//! This test binary has its own `main` (`harness = false`): started as
//! `<this exe> worker …` it is one run charging the ledger, printing `ok`
//! after each `reserve` that returned a charge (so the test knows exactly
//! which charges were acknowledged). Otherwise it runs the tests through
//! `libtest-mimic` (same flags and output as `cargo test`).

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics and stderr.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use common::{Backend, agent, at, usd};
use constle_spend::{Caps, Ledger, LedgerConfig, SpendError};
use libtest_mimic::{Arguments, Completion, Failed, Trial};

const WORKER: &str = "worker";
/// Every worker charges this much per call, so totals count calls.
const AMOUNT: &str = "0.01";
/// The instant every charge is made at: no midnight in the middle of a test.
const NOW: &str = "2026-04-01T10:00:00Z";
/// A worker asked to charge until killed stops after this many, so a test
/// that fails to kill it still ends.
const UNTIL_KILLED: u32 = 100_000;

type TestResult = Result<(), Failed>;
type StoreTest = fn(&mut Backend) -> TestResult;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == WORKER) {
        std::process::exit(worker(&args[2..]));
    }
    let cases: [(&str, StoreTest); 3] = [
        ("processes_never_pass_a_cap", processes_never_pass_a_cap),
        (
            "processes_never_lose_a_charge",
            processes_never_lose_a_charge,
        ),
        ("kill_9_at_random_points", kill_9_at_random_points),
    ];
    let mut trials = Vec::new();
    for (name, test) in cases {
        trials.push(Trial::test(format!("embedded::{name}"), move || {
            test(&mut Backend::embedded())
        }));
        let name = format!("redis::{name}");
        trials.push(Trial::ignorable_test(
            name.clone(),
            move || match Backend::redis(&name) {
                Some(mut backend) => test(&mut backend).map(|()| Completion::Completed),
                None => Ok(Completion::ignored_with("skipped: no redis-server")),
            },
        ));
    }
    libtest_mimic::run(&Arguments::from_args(), trials).exit();
}

// ---------------------------------------------------------------------------
// The worker

/// `worker embedded:<dir>|redis:<url> <agent> <calls> <day cap or ->`:
/// opens the ledger, prints `ready`, then makes `calls` reservations of
/// [`AMOUNT`], printing `ok` or `refused` for each. Any other error is
/// printed and ends the worker with status 2.
fn worker(args: &[String]) -> i32 {
    let [store, name, calls, cap] = args else {
        eprintln!("usage: {WORKER} STORE AGENT CALLS DAY_CAP");
        return 2;
    };
    let config = match store.split_once(':') {
        Some(("embedded", dir)) => LedgerConfig::Embedded { dir: dir.into() },
        Some(("redis", url)) => LedgerConfig::Redis { url: url.into() },
        _ => return 2,
    };
    let caps = Caps {
        per_day: (cap != "-").then(|| usd(cap)),
        ..Caps::default()
    };
    let calls: u32 = calls.parse().unwrap();
    // The gate's kind of runtime.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut out = std::io::stdout().lock();
        let ledger = match Ledger::open(&config, agent(name)).await {
            Ok(ledger) => ledger,
            Err(err) => {
                let _ = writeln!(out, "error {err}");
                return 2;
            }
        };
        let run = ledger.start_run(caps);
        let _ = writeln!(out, "ready");
        let _ = out.flush();
        for _ in 0..calls {
            let line = match run.reserve(usd(AMOUNT), common::tools(), at(NOW)).await {
                Ok(_) => "ok".to_owned(),
                Err(SpendError::Refused { .. }) => "refused".to_owned(),
                Err(err) => format!("error {err}"),
            };
            // Unbuffered in effect: the line is in the pipe before the next
            // charge begins, so a kill loses at most the one in flight.
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
            if line.starts_with("error") {
                return 2;
            }
        }
        0
    })
}

fn store_arg(backend: &Backend) -> String {
    match backend.config() {
        LedgerConfig::Embedded { dir } => format!("embedded:{}", dir.display()),
        LedgerConfig::Redis { url } => format!("redis:{url}"),
    }
}

fn spawn_worker(backend: &Backend, name: &str, calls: u32, cap: Option<&str>) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([WORKER, &store_arg(backend), name, &calls.to_string()])
        .arg(cap.unwrap_or("-"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a worker printed: (`ok` lines, `refused` lines), failing on errors.
fn tally(lines: impl Iterator<Item = String>) -> Result<(u64, u64), Failed> {
    let (mut ok, mut refused) = (0, 0);
    for line in lines {
        match line.as_str() {
            "ok" => ok += 1,
            "refused" => refused += 1,
            "ready" => {}
            other => return Err(format!("worker: {other}").into()),
        }
    }
    Ok((ok, refused))
}

/// The stored day total, in calls of [`AMOUNT`].
fn stored_calls(backend: &Backend, name: &str) -> Result<u64, Failed> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stored = runtime.block_on(async {
        let ledger = Ledger::open(&backend.config(), agent(name)).await?;
        ledger.stored(at(NOW)).await
    });
    let stored = stored.map_err(|err| format!("the ledger cannot be read: {err}"))?;
    if stored.day != stored.month {
        return Err(format!("day {} and month {} differ", stored.day, stored.month).into());
    }
    let calls = stored.day / usd(AMOUNT);
    if !calls.fract().is_zero() {
        return Err(format!("stored {} is not a whole number of calls", stored.day).into());
    }
    Ok(u64::try_from(calls.mantissa()).unwrap() / 10_u64.pow(calls.scale()))
}

/// Runs `workers` workers of `calls` calls each, all at once, and returns
/// what they printed, in total.
fn run_workers(
    backend: &Backend,
    name: &str,
    workers: usize,
    calls: u32,
    cap: Option<&str>,
) -> Result<(u64, u64), Failed> {
    let children: Vec<Child> = (0..workers)
        .map(|_| spawn_worker(backend, name, calls, cap))
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for child in children {
        let output = child.wait_with_output().unwrap();
        if !output.status.success() {
            return Err(format!("worker exited {}", output.status).into());
        }
        let (o, r) = tally(
            String::from_utf8(output.stdout)
                .unwrap()
                .lines()
                .map(str::to_owned),
        )?;
        ok += o;
        refused += r;
    }
    Ok((ok, refused))
}

// ---------------------------------------------------------------------------
// Tests

/// 4 processes make 160 calls against a day cap that allows 50: exactly 50
/// are charged, and the stored total is exactly theirs.
fn processes_never_pass_a_cap(backend: &mut Backend) -> TestResult {
    let name = "capped";
    let (ok, refused) = run_workers(backend, name, 4, 40, Some("0.50"))?;
    assert_eq!((ok, refused), (50, 110));
    assert_eq!(stored_calls(backend, name)?, 50);
    Ok(())
}

/// 4 processes make 200 uncapped calls: all 200 are in the stored total (no
/// update lost to another process's write).
fn processes_never_lose_a_charge(backend: &mut Backend) -> TestResult {
    let name = "uncapped";
    let (ok, refused) = run_workers(backend, name, 4, 50, None)?;
    assert_eq!((ok, refused), (200, 0));
    assert_eq!(stored_calls(backend, name)?, 200);
    Ok(())
}

/// A worker charging as fast as it can is killed with SIGKILL at a random
/// instant, many times. Every time, the ledger still reads, and it holds
/// every charge the worker acknowledged and at most one more (the one in
/// flight).
fn kill_9_at_random_points(backend: &mut Backend) -> TestResult {
    let name = "killed";
    let iterations = match backend {
        Backend::Embedded(_) => 150,
        Backend::Redis(_) => 50,
    };
    let (mut acknowledged, mut in_flight_kept, mut before_ready) = (0, 0, 0);
    let mut stored = stored_calls(backend, name)?;
    for i in 0..iterations {
        let mut child = spawn_worker(backend, name, UNTIL_KILLED, None);
        let mut out = BufReader::new(child.stdout.take().unwrap());
        // Some kills land while the worker is still opening the ledger.
        let early = random_below(5) == 0;
        if !early {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line, "ready\n", "iteration {i}");
        }
        std::thread::sleep(Duration::from_micros(random_below(30_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        let (printed, _) = tally(lines(out))?;
        if printed == 0 && early {
            before_ready += 1;
        }
        let now = stored_calls(backend, name)?;
        let added = now - stored;
        if !(printed..=printed + 1).contains(&added) {
            return Err(format!(
                "iteration {i}: the worker acknowledged {printed} charges, the ledger added {added}"
            )
            .into());
        }
        in_flight_kept += added - printed;
        acknowledged += printed;
        stored = now;
    }
    eprintln!(
        "kill -9 ({}): {iterations} kills, {acknowledged} acknowledged charges all kept, \
         {in_flight_kept} kills with a charge in flight that was kept, \
         {before_ready} kills before the first charge",
        store_arg(backend).split(':').next().unwrap_or_default()
    );
    assert!(acknowledged > 0, "the workers never got to charge");
    Ok(())
}

fn lines(out: BufReader<ChildStdout>) -> impl Iterator<Item = String> {
    out.lines().map_while(Result::ok)
}

fn random_below(n: u64) -> u64 {
    let mut bytes = [0_u8; 8];
    getrandom::fill(&mut bytes).unwrap();
    u64::from_le_bytes(bytes) % n
}
