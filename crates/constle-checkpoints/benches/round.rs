//! A checkpoint round's cost, from `Checkpointer::round` being called to
//! its cosignatures checked: reading the head, building the tree from the
//! log's files, signing, two witnesses (real `constle-witness` servers on
//! loopback, in this process) asked at once and their answers verified, the
//! latest checkpoint written. The baseline, in the same run, is the same
//! round without witnesses. Each round follows 10 new entries, as a run's
//! would; measured at two log sizes (the first round reads the whole log,
//! each later one only what was appended since). CPU time is the whole process's (witnesses
//! included), per round; percentiles and CPU time as `constle_testkit::bench`
//! defines them. Each round's entries are appended as a run's are.
//!
//! Then, on the 100 000-entry log with what its rounds recorded, `audit
//! verify`'s work with the witnesses' cosignatures checked (every day file
//! verified, the tree built with the recorded cosignatures, all of them
//! held against it) against plain verification of the day files, in the
//! same run: the clock and the CPU time, median of 5. Run with
//! `bench/checkpoints.sh`.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    clippy::cast_precision_loss,
    missing_docs,
    reason = "a benchmark that cannot set up must stop, and prints its table"
)]

use std::num::NonZeroUsize;
use std::path::Path;
use std::time::{Duration, Instant};

use constle_audit::{TrustAnchors, Verdict, verify_file};
use constle_checkpoints::{Trigger, Witness};
use constle_testkit::bench::{Samples, process_cpu};
use constle_tlog::{CoverageVerdict, LogTree, WitnessKey, check_coverage, day_files};

#[path = "../tests/support/mod.rs"]
mod support;

use support::{agent, agent_key, append, checkpointer, config, log_key, record, witness};

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(101);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "| log entries | witnesses | rounds | p50 ms | p99 ms | max ms | CPU ms/round | p50 vs no witness |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut verify_rows = Vec::new();
    for entries in [1_000, 100_000] {
        let home = tempfile::tempdir().unwrap();
        let logs = home.path().join("logs");
        append(&logs, entries);
        let witnesses = runtime.block_on(async {
            vec![
                witness(1, &home.path().join("w1")).await,
                witness(2, &home.path().join("w2")).await,
            ]
        });
        let keys: Vec<WitnessKey> = witnesses.iter().map(|w| w.key.clone()).collect();
        let base = runtime.block_on(measure(&logs, Vec::new(), rounds));
        let with = runtime.block_on(measure(&logs, witnesses, rounds));
        if entries == 100_000 {
            verify_rows.push(verify_table(&logs, &keys));
        }
        for (n, row) in [(0, &base), (2, &with)] {
            println!(
                "| {entries} | {n} | {rounds} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}x |",
                row.p(50.0),
                row.p(99.0),
                row.p(100.0),
                row.cpu_ms,
                row.p(50.0) / base.p(50.0)
            );
        }
    }
    println!();
    for row in verify_rows {
        print!("{row}");
    }
}

/// `audit verify` of the log with and without the witnesses' check.
fn verify_table(logs: &Path, keys: &[WitnessKey]) -> String {
    let anchors = TrustAnchors {
        agent: Some(agent()),
        agent_did: Some(agent_key().did().clone()),
        approver: None,
        approvers: None,
        terminal_approves: false,
        pinned: true,
    };
    let days: Vec<_> = day_files(logs, &agent())
        .unwrap()
        .iter()
        .map(|d| d.path())
        .collect();
    let plain = || {
        for day in &days {
            assert!(matches!(
                verify_file(day, &anchors).unwrap(),
                Verdict::Verified(_)
            ));
        }
    };
    let quorum = NonZeroUsize::new(keys.len()).unwrap();
    let witnessed = || {
        plain();
        let log = LogTree::from_log_dir(logs, &agent()).unwrap();
        let verdict = check_coverage(
            &log.tree,
            log_key().origin(),
            keys,
            quorum,
            &log.recorded.cosigned,
        );
        assert!(matches!(verdict, CoverageVerdict::Covered(_)));
    };
    let (plain_ms, plain_cpu) = median_of_5(plain);
    let (with_ms, with_cpu) = median_of_5(witnessed);
    let entries = LogTree::from_log_dir(logs, &agent()).unwrap().tree.len();
    format!(
        "| audit verify, {entries} entries | ms | CPU ms | vs plain (clock) | vs plain (CPU) |\n|---|---:|---:|---:|---:|\n| plain | {plain_ms:.0} | {plain_cpu:.0} | 1.00x | 1.00x |\n| with the witnesses' cosignatures | {with_ms:.0} | {with_cpu:.0} | {:.2}x | {:.2}x |\n",
        with_ms / plain_ms,
        with_cpu / plain_cpu
    )
}

/// The median clock and CPU time of five runs of `work`, in ms.
fn median_of_5(work: impl Fn()) -> (f64, f64) {
    let mut clock = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..5 {
        let (cpu0, t0) = (process_cpu(), Instant::now());
        work();
        clock.push(t0.elapsed().as_secs_f64() * 1e3);
        cpu.push((process_cpu() - cpu0).as_secs_f64() * 1e3);
    }
    (
        Samples::new(clock).median().unwrap(),
        Samples::new(cpu).median().unwrap(),
    )
}

struct Row {
    ms: Samples<f64>,
    cpu_ms: f64,
}

impl Row {
    fn p(&self, p: f64) -> f64 {
        self.ms.percentile(p).unwrap()
    }
}

async fn measure(logs: &Path, witnesses: Vec<Witness>, rounds: usize) -> Row {
    let n = witnesses.len();
    let mut c = checkpointer(logs, config(witnesses, n, false));
    let mut ms = Vec::with_capacity(rounds);
    let mut cpu = Duration::ZERO;
    for _ in 0..rounds {
        append(logs, 10);
        let (cpu0, t0) = (process_cpu(), Instant::now());
        let round = c.round(Trigger::Interval).await.unwrap();
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
        cpu += process_cpu() - cpu0;
        assert_eq!(round.cosigned, n, "{:?}", round.warnings);
        record(logs, round.events);
    }
    Row {
        ms: Samples::new(ms),
        cpu_ms: cpu.as_secs_f64() * 1e3 / rounds as f64,
    }
}
