//! Hold and settle, totals per source and the scoped ledger, each checked
//! against the embedded store and against a real `redis-server` (skipped
//! without one unless `CONSTLE_E2E=require`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{Backend, agent, at, day_cap, tools, usd};
use constle_spend::{
    Cap, Caps, Hold, Ledger, LedgerConfig, LedgerError, LedgerKey, Scope, Source, SourceTotals,
    SpendError, Totals,
};
use proptest::prelude::*;
use rust_decimal::Decimal;

/// 2026-04-01T10:00:00Z, a Wednesday in the middle of a month.
const NOON: &str = "2026-04-01T10:00:00Z";

both_stores!(
    a_settlement_below_the_hold_releases_the_difference,
    a_settlement_above_the_hold_adds_the_excess_past_the_caps,
    a_settlement_after_midnight_moves_the_holds_own_day_and_month,
    a_dropped_hold_stays_charged,
    a_hold_is_settled_only_by_its_own_run,
    totals_are_kept_per_source,
    the_scoped_ledger_is_kept_apart,
);

async fn open(backend: &Backend, key: &LedgerKey) -> Ledger {
    Ledger::open(&backend.config(), key.clone()).await.unwrap()
}

fn model(name: &str) -> Source {
    Source::Llm {
        provider: "anthropic".to_owned(),
        model: name.to_owned(),
    }
}

fn totals(run: &str, day: &str, month: &str) -> Totals {
    Totals {
        run: usd(run),
        day: usd(day),
        month: usd(month),
    }
}

fn refused_cap<T: std::fmt::Debug>(result: Result<T, SpendError>) -> Cap {
    match result {
        Err(SpendError::Refused { cap, .. }) => cap,
        other => panic!("expected a cap refusal, got {other:?}"),
    }
}

async fn a_settlement_below_the_hold_releases_the_difference(backend: Backend) {
    let ledger = open(&backend, &agent("release")).await;
    let run = ledger.start_run(Caps {
        per_run: Some(usd("1")),
        per_day: Some(usd("1")),
        per_month: Some(usd("1")),
    });
    let hold = run.hold(usd("1"), model("m"), at(NOON)).await.unwrap();
    assert_eq!(hold.amount(), usd("1"));
    assert_eq!(hold.totals(), totals("1", "1", "1"));
    // While held, the worst case counts against the caps.
    assert_eq!(
        refused_cap(run.hold(usd("0.01"), model("m"), at(NOON)).await),
        Cap::PerRun
    );
    let after = run.settle(hold, usd("0.30")).await.unwrap();
    assert_eq!(after, totals("0.3", "0.3", "0.3"));
    assert_eq!(run.run_total(), usd("0.3"));
    let stored = ledger.stored(at(NOON)).await.unwrap();
    assert_eq!((stored.day, stored.month), (usd("0.3"), usd("0.3")));
    assert_eq!(stored.last_run.unwrap().total, usd("0.3"));
    // What was released is room again, exactly.
    assert_eq!(
        refused_cap(run.hold(usd("0.7000000001"), model("m"), at(NOON)).await),
        Cap::PerRun
    );
    let hold = run.hold(usd("0.7"), model("m"), at(NOON)).await.unwrap();
    assert_eq!(hold.totals(), totals("1", "1", "1"));
    // A cost finer than the ledger counts is rounded up, never down.
    let after = run.settle(hold, usd("0.00000000001")).await.unwrap();
    assert_eq!(
        after,
        totals("0.3000000001", "0.3000000001", "0.3000000001")
    );
}

async fn a_settlement_above_the_hold_adds_the_excess_past_the_caps(backend: Backend) {
    let ledger = open(&backend, &agent("excess")).await;
    let run = ledger.start_run(day_cap("1"));
    let hold = run.hold(usd("0.9"), model("m"), at(NOON)).await.unwrap();
    // The provider billed more than was held: the ledger records the truth.
    let after = run.settle(hold, usd("1.5")).await.unwrap();
    assert_eq!(after, totals("1.5", "1.5", "1.5"));
    assert_eq!(ledger.stored(at(NOON)).await.unwrap().day, usd("1.5"));
    // So every later charge is refused, however small, in any run.
    assert_eq!(
        refused_cap(run.reserve(usd("0.0000000001"), tools(), at(NOON)).await),
        Cap::PerDay
    );
    let other = ledger.start_run(day_cap("1"));
    assert_eq!(
        refused_cap(
            other
                .hold(Decimal::ZERO + usd("0.01"), model("m"), at(NOON))
                .await
        ),
        Cap::PerDay
    );
    // A negative cost (a caller's bug) releases nothing.
    let uncapped = ledger.start_run(Caps::default());
    let hold = uncapped
        .hold(usd("0.5"), model("m"), at(NOON))
        .await
        .unwrap();
    assert_eq!(
        uncapped.settle(hold, usd("-1")).await.unwrap().day,
        usd("2")
    );
}

async fn a_settlement_after_midnight_moves_the_holds_own_day_and_month(backend: Backend) {
    let ledger = open(&backend, &agent("midnight")).await;
    let run = ledger.start_run(Caps::default());
    let april = at("2026-04-30T23:59:59Z");
    let may = at("2026-05-01T00:00:01Z");
    let late = run.hold(usd("1"), model("m"), april).await.unwrap();
    assert_eq!(late.day(), jiff::civil::date(2026, 4, 30));
    let early = run.hold(usd("0.5"), model("m"), may).await.unwrap();
    // Settled in May, the April hold moves April's day and month only.
    let after = run.settle(late, usd("0.25")).await.unwrap();
    assert_eq!(after, totals("0.75", "0.25", "0.25"));
    let stored = ledger.stored(april).await.unwrap();
    assert_eq!((stored.day, stored.month), (usd("0.25"), usd("0.25")));
    let stored = ledger.stored(may).await.unwrap();
    assert_eq!((stored.day, stored.month), (usd("0.5"), usd("0.5")));
    // And the other way: an excess on May's hold stays in May.
    let after = run.settle(early, usd("0.75")).await.unwrap();
    assert_eq!(after, totals("1", "0.75", "0.75"));
    let stored = ledger.stored(april).await.unwrap();
    assert_eq!((stored.day, stored.month), (usd("0.25"), usd("0.25")));
    let by_source = &ledger.stored(may).await.unwrap().by_source;
    assert_eq!(by_source[&model("m")].month, usd("0.75"));
}

async fn a_dropped_hold_stays_charged(backend: Backend) {
    let ledger = open(&backend, &agent("dropped")).await;
    let run = ledger.start_run(day_cap("1"));
    let hold: Hold = run.hold(usd("0.75"), model("m"), at(NOON)).await.unwrap();
    drop(hold);
    assert_eq!(run.run_total(), usd("0.75"));
    assert_eq!(ledger.stored(at(NOON)).await.unwrap().day, usd("0.75"));
    assert_eq!(
        refused_cap(run.hold(usd("0.5"), model("m"), at(NOON)).await),
        Cap::PerDay
    );
}

async fn a_hold_is_settled_only_by_its_own_run(backend: Backend) {
    let ledger = open(&backend, &agent("foreign")).await;
    let mine = ledger.start_run(Caps::default());
    let theirs = ledger.start_run(Caps::default());
    let hold = mine.hold(usd("1"), model("m"), at(NOON)).await.unwrap();
    match theirs.settle(hold, Decimal::ZERO).await {
        Err(err @ LedgerError::NotThisRun { .. }) => {
            assert!(err.to_string().contains(mine.id()), "{err}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((mine.run_total(), theirs.run_total()), (usd("1"), usd("0")));
    assert_eq!(ledger.stored(at(NOON)).await.unwrap().day, usd("1"));
}

async fn totals_are_kept_per_source(backend: Backend) {
    let ledger = open(&backend, &agent("sources")).await;
    let run = ledger.start_run(Caps::default());
    let server = |name: &str| Source::Mcp {
        server: name.to_owned(),
    };
    run.reserve(usd("1"), server("a"), at("2026-04-02T10:00:00Z"))
        .await
        .unwrap();
    run.reserve(usd("2"), server("b"), at(NOON)).await.unwrap();
    // Names a store might mistake for another's: the same name, and one
    // with separators in it.
    let odd = Source::Llm {
        provider: "b".to_owned(),
        model: "x:y\"],[\"mcp".to_owned(),
    };
    for source in [model("m"), odd.clone()] {
        let hold = run.hold(usd("3"), source, at(NOON)).await.unwrap();
        run.settle(hold, usd("0.5")).await.unwrap();
    }
    let stored = ledger.stored(at(NOON)).await.unwrap();
    let spent = |day: &str, month: &str| SourceTotals {
        day: usd(day),
        month: usd(month),
    };
    let expected = BTreeMap::from([
        (server("a"), spent("0", "1")),
        (server("b"), spent("2", "2")),
        (model("m"), spent("0.5", "0.5")),
        (odd, spent("0.5", "0.5")),
    ]);
    assert_eq!(stored.by_source, expected);
    assert_eq!(stored.unattributed, spent("0", "0"));
    assert_eq!((stored.day, stored.month), (usd("3"), usd("4")));
}

async fn the_scoped_ledger_is_kept_apart(backend: Backend) {
    let key = agent("scoped");
    let scoped = key.scoped(Scope::Llm);
    assert_eq!(scoped.as_str(), "llm-name-scoped");
    let shared = open(&backend, &key).await;
    let models_only = open(&backend, &scoped).await;
    let run = shared.start_run(day_cap("10"));
    let model_run = models_only.start_run(day_cap("1"));
    run.reserve(usd("5"), tools(), at(NOON)).await.unwrap();
    // A model call is charged to both, each against its own caps.
    let hold = run.hold(usd("1"), model("m"), at(NOON)).await.unwrap();
    let model_hold = model_run
        .hold(usd("1"), model("m"), at(NOON))
        .await
        .unwrap();
    assert_eq!(
        refused_cap(model_run.hold(usd("0.1"), model("m"), at(NOON)).await),
        Cap::PerDay
    );
    run.settle(hold, usd("0.5")).await.unwrap();
    model_run.settle(model_hold, usd("0.5")).await.unwrap();
    assert_eq!(shared.stored(at(NOON)).await.unwrap().day, usd("5.5"));
    let stored = models_only.stored(at(NOON)).await.unwrap();
    assert_eq!(stored.day, usd("0.5"));
    assert_eq!(stored.by_source.keys().collect::<Vec<_>>(), [&model("m")]);
    if let Some(dir) = backend.key_dir(&scoped) {
        assert!(dir.join("state.json").is_file(), "{}", dir.display());
    }
}

// ---------------------------------------------------------------------------
// Totals written before totals were kept per source

/// A state file as constle wrote it before totals per source (and
/// releases) were kept: read, counted, shown as unattributed, and kept.
#[tokio::test]
async fn an_older_state_file_is_read_and_its_totals_are_unattributed() {
    let backend = Backend::embedded();
    let key = agent("older");
    let dir = backend.key_dir(&key).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let older = r#"{
  "version": 1,
  "days": {
    "2026-04-01": "2"
  },
  "months": {
    "2026-04": "5"
  },
  "last_run": null
}
"#;
    std::fs::write(dir.join("state.json"), older).unwrap();
    let ledger = open(&backend, &key).await;
    let stored = ledger.stored(at(NOON)).await.unwrap();
    assert!(stored.by_source.is_empty());
    let unattributed = SourceTotals {
        day: usd("2"),
        month: usd("5"),
    };
    assert_eq!(stored.unattributed, unattributed);
    let run = ledger.start_run(day_cap("3"));
    assert_eq!(
        refused_cap(run.reserve(usd("1.01"), tools(), at(NOON)).await),
        Cap::PerDay
    );
    run.reserve(usd("1"), tools(), at(NOON)).await.unwrap();
    let stored = ledger.stored(at(NOON)).await.unwrap();
    assert_eq!(stored.unattributed, unattributed);
    assert_eq!(stored.by_source[&tools()].day, usd("1"));
    // Still a file that will not parse is refused, never reset.
    std::fs::write(
        dir.join("state.json"),
        older.replace("\"days\"", "\"dayz\""),
    )
    .unwrap();
    assert!(matches!(
        Ledger::open(&backend.config(), key).await,
        Err(LedgerError::Corrupt { .. })
    ));
}

/// A settlement is not a lost charge: another process that knew the higher
/// total goes on charging, and a real loss after a release is still seen.
#[tokio::test]
async fn a_release_is_not_damage_but_a_loss_after_one_still_is() {
    let backend = Backend::embedded();
    let key = agent("released");
    let (one, two) = (open(&backend, &key).await, open(&backend, &key).await);
    let (first, second) = (
        one.start_run(Caps::default()),
        two.start_run(Caps::default()),
    );
    let hold = first.hold(usd("2"), model("m"), at(NOON)).await.unwrap();
    second.reserve(usd("1"), tools(), at(NOON)).await.unwrap();
    let state = backend.key_dir(&key).unwrap().join("state.json");
    let before_release = std::fs::read_to_string(&state).unwrap();
    first.settle(hold, usd("0.5")).await.unwrap();
    // The second ledger last saw 3; it finds 1.5, released, and charges on.
    let after = second.reserve(usd("1"), tools(), at(NOON)).await.unwrap();
    assert_eq!(after.day, usd("2.5"));
    // Putting back the file from before the release loses a charge.
    std::fs::write(&state, before_release).unwrap();
    match second.reserve(usd("1"), tools(), at(NOON)).await {
        Err(SpendError::Ledger(LedgerError::Damaged { .. })) => {}
        other => panic!("{other:?}"),
    }
    // What was written back is the truth: 2 held, 0.5 kept, 1 and 1.
    assert_eq!(one.stored(at(NOON)).await.unwrap().day, usd("2.5"));
    assert_eq!(
        second
            .reserve(usd("1"), tools(), at(NOON))
            .await
            .unwrap()
            .day,
        usd("3.5")
    );
}

#[tokio::test]
async fn redis_totals_written_before_sources_are_unattributed_and_never_go_below_zero() {
    let Some(backend) = Backend::redis("redis_totals_written_before_sources_are_unattributed")
    else {
        return;
    };
    let LedgerConfig::Redis { url } = backend.config() else {
        unreachable!()
    };
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let day_key = "constle:spend:name-redis-older:day:2026-04-01";
    let () = redis::cmd("SET")
        .arg(day_key)
        .arg("20000000000")
        .query_async(&mut conn)
        .await
        .unwrap();
    let ledger = open(&backend, &agent("redis-older")).await;
    let stored = ledger.stored(at(NOON)).await.unwrap();
    assert_eq!((stored.day, stored.unattributed.day), (usd("2"), usd("2")));
    let run = ledger.start_run(Caps::default());
    let hold = run.hold(usd("1"), model("m"), at(NOON)).await.unwrap();
    // The day's total vanishes (expired, or deleted by hand) before the
    // settlement releases what was held: zero, never below.
    let () = redis::cmd("DEL")
        .arg(day_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let after = run.settle(hold, Decimal::ZERO).await.unwrap();
    assert_eq!(
        (after.run, after.day, after.month),
        (usd("0"), usd("0"), usd("0"))
    );
    let stored = ledger.stored(at(NOON)).await.unwrap();
    assert_eq!(stored.by_source[&model("m")].day, usd("0"));
    // A per-source value the ledger did not write is an error.
    let () = redis::cmd("HSET")
        .arg(format!("{day_key}:by_source"))
        .arg("not a source")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(matches!(
        ledger.stored(at(NOON)).await,
        Err(LedgerError::RedisCorrupt { .. })
    ));
}

// ---------------------------------------------------------------------------
// Concurrent holds racing the caps

/// One call: what it holds and what it then costs, in 10⁻⁴ USD.
#[derive(Clone, Debug)]
struct Call {
    held: i64,
    cost: i64,
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    let call = (1_i64..=5_000).prop_flat_map(|held| (Just(held), 0..=held));
    prop::collection::vec(call.prop_map(|(held, cost)| Call { held, cost }), 1..40)
}

/// Races `calls` over `runs` meters of separately opened ledgers: every
/// total a hold or settlement reports stays within its cap, and the totals
/// end at exactly the sum of the costs of the calls held.
async fn race(config: LedgerConfig, key: LedgerKey, runs: usize, calls: Vec<Call>) {
    let caps = Caps {
        per_run: Some(usd("0.6")),
        per_day: Some(usd("1")),
        per_month: Some(usd("1.2")),
    };
    let mut meters = Vec::new();
    for _ in 0..runs {
        let ledger = Ledger::open(&config, key.clone()).await.unwrap();
        meters.push(Arc::new(ledger.start_run(caps.clone())));
    }
    let within = |totals: &Totals| {
        assert!(totals.run <= usd("0.6"), "{totals:?}");
        assert!(totals.day <= usd("1"), "{totals:?}");
        assert!(totals.month <= usd("1.2"), "{totals:?}");
    };
    let tasks: Vec<_> = calls
        .into_iter()
        .enumerate()
        .map(|(i, call)| {
            let meter = Arc::clone(&meters[i % runs]);
            tokio::spawn(async move {
                let source = model(&format!("m{}", i % 3));
                match meter
                    .hold(Decimal::new(call.held, 4), source, at(NOON))
                    .await
                {
                    Ok(hold) => {
                        within(&hold.totals());
                        tokio::task::yield_now().await;
                        let after = meter.settle(hold, Decimal::new(call.cost, 4)).await;
                        within(&after.unwrap());
                        (i % runs, Decimal::new(call.cost, 4))
                    }
                    Err(SpendError::Refused { .. }) => (i % runs, Decimal::ZERO),
                    Err(err) => panic!("{err}"),
                }
            })
        })
        .collect();
    let mut per_run = vec![Decimal::ZERO; runs];
    for task in tasks {
        let (run, cost) = task.await.unwrap();
        per_run[run] += cost;
    }
    for (meter, cost) in meters.iter().zip(&per_run) {
        assert_eq!(meter.run_total(), *cost);
    }
    let sum: Decimal = per_run.iter().sum();
    let stored = meters[0].ledger().stored(at(NOON)).await.unwrap();
    assert_eq!((stored.day, stored.month), (sum, sum));
    let by_source: Decimal = stored.by_source.values().map(|t| t.day).sum();
    assert_eq!(by_source, sum);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn embedded_holds_racing_the_caps_never_pass_them(runs in 1_usize..4, calls in calls()) {
        let backend = Backend::embedded();
        runtime().block_on(race(backend.config(), agent("race"), runs, calls));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn redis_holds_racing_the_caps_never_pass_them(
        runs in 1_usize..4,
        calls in calls(),
        case in 0_u64..u64::MAX,
    ) {
        let Some(backend) = Backend::redis("redis_holds_racing_the_caps_never_pass_them") else {
            return Ok(());
        };
        runtime().block_on(race(backend.config(), agent(&format!("race-{case}")), runs, calls));
    }
}
