//! The numbers of each path, against direct: a table per kind of call, and
//! one JSON line of all of them.

use std::fmt::Write as _;
use std::time::Duration;

use constle_testkit::bench::Samples;
use serde_json::{Value, json};

use crate::client::Timing;
use crate::measure::{Config, Path, Round, Rounds};
use crate::scenario::Scenario;

/// The aims (issue 24).
const AIM_FIRST_TOKEN_P50_MS: f64 = 1.0;
const AIM_STREAM_RATE: f64 = 0.95;

/// One path's numbers over all its rounds.
struct Summary {
    path: Path,
    calls: usize,
    /// Time to first token, p50 and p99, ms.
    first: (f64, f64),
    /// Time to the last byte, p50 and p99, ms.
    last: (f64, f64),
    /// Per round, the p50 of the time to first token, ms.
    round_first_p50: Vec<f64>,
    /// A stream's tokens per second from its first token to its last
    /// byte, p50.
    rate: Option<f64>,
    /// CPU time per call, µs: the whole process, and the gate's threads.
    cpu_us: f64,
    gate_cpu_us: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn p50_p99(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    let samples = Samples::new(values);
    (
        samples.median().unwrap_or(f64::NAN),
        samples.percentile(99.0).unwrap_or(f64::NAN),
    )
}

fn summary(config: &Config, scenario: Scenario, path: Path, rounds: &[Round]) -> Summary {
    let timings: Vec<Timing> = rounds.iter().flat_map(|r| r.timings.clone()).collect();
    let calls = timings.len();
    let per_call = |cpu: Duration| cpu.as_secs_f64() * 1e6 / calls.max(1) as f64;
    let rate = scenario.stream.then(|| {
        let rates = timings.iter().map(|t| {
            let passing = (t.total - t.first_token).max(Duration::from_micros(1));
            config.tokens as f64 / passing.as_secs_f64()
        });
        Samples::new(rates).median().unwrap_or(f64::NAN)
    });
    Summary {
        path,
        calls,
        first: p50_p99(timings.iter().map(|t| ms(t.first_token))),
        last: p50_p99(timings.iter().map(|t| ms(t.total))),
        round_first_p50: rounds
            .iter()
            .map(|r| p50_p99(r.timings.iter().map(|t| ms(t.first_token))).0)
            .collect(),
        rate,
        cpu_us: per_call(rounds.iter().map(|r| r.cpu).sum()),
        gate_cpu_us: per_call(rounds.iter().map(|r| r.gate_cpu).sum()),
    }
}

fn summaries(config: &Config, scenario: Scenario, rounds: &[(Path, Vec<Round>)]) -> Vec<Summary> {
    rounds
        .iter()
        .map(|(path, rounds)| summary(config, scenario, *path, rounds))
        .collect()
}

/// The range over rounds of a path's per-round p50 less direct's.
fn round_range(summary: &Summary, direct: &Summary) -> (f64, f64) {
    let deltas: Vec<f64> = summary
        .round_first_p50
        .iter()
        .zip(&direct.round_first_p50)
        .map(|(a, b)| a - b)
        .collect();
    let low = deltas.iter().copied().fold(f64::INFINITY, f64::min);
    let high = deltas.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (low, high)
}

/// The table of one kind of call.
pub fn table(config: &Config, scenario: Scenario, rounds: &[(Path, Vec<Round>)]) -> String {
    let summaries = summaries(config, scenario, rounds);
    let direct = &summaries[0];
    let mut out = String::new();
    let first = if scenario.stream {
        "first token"
    } else {
        "answer (= last byte)"
    };
    let _ = writeln!(
        out,
        "\n{} ({} tokens {:?} apart after {:?}, {} in flight {:?} apart, {} rounds of {:?}): {first}",
        scenario.label(),
        config.tokens,
        config.interval,
        config.first,
        config.concurrency,
        config.pause,
        config.rounds,
        config.round
    );
    let _ = writeln!(
        out,
        "{:<26} {:>6} {:>8} {:>8} {:>8} {:>8} {:>15} {:>9} {:>9} {:>11} {:>6} {:>8} {:>8}",
        "path",
        "calls",
        "p50 ms",
        "p99 ms",
        "+p50",
        "+p99",
        "+p50 rounds",
        "last p50",
        "last p99",
        "tokens/s",
        "ratio",
        "CPU µs",
        "gate µs"
    );
    for s in &summaries {
        let (low, high) = round_range(s, direct);
        let (rate, ratio) = match (s.rate, direct.rate) {
            (Some(rate), Some(base)) => (format!("{rate:.0}"), format!("{:.2}", rate / base)),
            _ => ("-".to_owned(), "-".to_owned()),
        };
        let _ = writeln!(
            out,
            "{:<26} {:>6} {:>8.3} {:>8.3} {:>+8.3} {:>+8.3} {:>15} {:>9.3} {:>9.3} {:>11} {:>6} {:>8.1} {:>8.1}",
            s.path.label(),
            s.calls,
            s.first.0,
            s.first.1,
            s.first.0 - direct.first.0,
            s.first.1 - direct.first.1,
            format!("{low:+.3}..{high:+.3}"),
            s.last.0,
            s.last.1,
            rate,
            ratio,
            s.cpu_us,
            s.gate_cpu_us
        );
    }
    let _ = write!(out, "{}", aims(scenario, &summaries));
    out
}

/// Whether each gate path met the aims.
fn aims(scenario: Scenario, summaries: &[Summary]) -> String {
    let direct = &summaries[0];
    let mut out = String::new();
    for s in &summaries[1..] {
        let added = s.first.0 - direct.first.0;
        let met = |ok: bool| if ok { "met" } else { "MISSED" };
        let _ = write!(
            out,
            "  {}: +{added:.3} ms to the {} at p50 (aim {AIM_FIRST_TOKEN_P50_MS} ms: {})",
            s.path.label(),
            if scenario.stream {
                "first token"
            } else {
                "answer"
            },
            met(added <= AIM_FIRST_TOKEN_P50_MS)
        );
        if let (Some(rate), Some(base)) = (s.rate, direct.rate) {
            let ratio = rate / base;
            let _ = write!(
                out,
                "; tokens/s {ratio:.2} of direct (aim {AIM_STREAM_RATE}: {})",
                met(ratio >= AIM_STREAM_RATE)
            );
        }
        out.push('\n');
    }
    out
}

/// Every table's numbers, as one JSON line.
pub fn json(config: &Config, tables: &[(Scenario, Rounds)]) -> String {
    let tables: Vec<Value> = tables
        .iter()
        .map(|(scenario, rounds)| {
            let paths: Vec<Value> = summaries(config, *scenario, rounds)
                .iter()
                .map(|s| {
                    json!({"path": s.path.key(), "calls": s.calls,
                        "first_token_ms": {"p50": s.first.0, "p99": s.first.1},
                        "last_byte_ms": {"p50": s.last.0, "p99": s.last.1},
                        "tokens_per_s_p50": s.rate,
                        "cpu_us_per_call": s.cpu_us, "gate_cpu_us_per_call": s.gate_cpu_us})
                })
                .collect();
            json!({"call": scenario.label(), "paths": paths})
        })
        .collect();
    json!({"bench": "llm_gate", "tokens": config.tokens,
        "token_interval_us": config.interval.as_micros() as u64,
        "first_token_ms": config.first.as_millis() as u64,
        "pause_ms": config.pause.as_millis() as u64,
        "concurrency": config.concurrency, "rounds": config.rounds,
        "round_s": config.round.as_secs_f64(), "tables": tables})
    .to_string()
}
