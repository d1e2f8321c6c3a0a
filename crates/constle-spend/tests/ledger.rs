//! The ledger's rules, each checked against the embedded store and against a
//! real `redis-server` (skipped without one unless `CONSTLE_E2E=require`),
//! and what each store does when it cannot be read or written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Backend, agent, at, day_cap, month_cap, run_cap, usd};
use constle_identity::{Name, SigningIdentity};
use constle_spend::{
    AmountError, Cap, Caps, Ledger, LedgerConfig, LedgerError, LedgerKey, RunMeter, SpendError,
    Totals,
};
use rust_decimal::Decimal;

/// 2026-04-01T10:00:00Z, a Wednesday in the middle of a month.
const NOON: &str = "2026-04-01T10:00:00Z";

both_stores!(
    caps_refuse_exactly_at_the_boundary,
    the_first_cap_passed_is_named,
    day_and_month_roll_over_at_utc_midnight,
    totals_persist_across_open,
    hundred_concurrent_calls_in_one_run_forward_exactly_ten,
    hundred_concurrent_runs_forward_exactly_ten,
    several_ledgers_share_the_caps_atomically,
    invalid_amounts_are_refused_and_not_charged,
    totals_are_exact_past_double_precision,
    a_total_never_wraps,
    the_newest_run_is_the_last_run,
);

async fn open(backend: &Backend, key: &LedgerKey) -> Ledger {
    Ledger::open(&backend.config(), key.clone()).await.unwrap()
}

fn refused(result: Result<Totals, SpendError>) -> (Cap, Decimal, Decimal, Totals) {
    match result {
        Err(SpendError::Refused {
            cap,
            limit,
            amount,
            totals,
        }) => (cap, limit, amount, totals),
        other => panic!("expected a cap refusal, got {other:?}"),
    }
}

async fn caps_refuse_exactly_at_the_boundary(backend: Backend) {
    for (cap, caps) in [
        (Cap::PerRun, run_cap("1.00")),
        (Cap::PerDay, day_cap("1.00")),
        (Cap::PerMonth, month_cap("1.00")),
    ] {
        let ledger = open(&backend, &agent(cap.field().replace('_', "-").as_str())).await;
        let run = ledger.start_run(caps);
        for _ in 0..3 {
            run.reserve(usd("0.25"), common::tools(), at(NOON))
                .await
                .unwrap();
        }
        // One unit (1e-10 USD) over the cap: refused, naming the cap.
        let (named, limit, amount, before) = refused(
            run.reserve(usd("0.2500000001"), common::tools(), at(NOON))
                .await,
        );
        assert_eq!((named, limit, amount), (cap, usd("1"), usd("0.2500000001")));
        assert_eq!(cap.total(&before), usd("0.75"), "{cap:?}: {before:?}");
        let message = SpendError::Refused {
            cap: named,
            limit,
            amount,
            totals: before,
        }
        .to_string();
        assert!(message.contains(cap.field()), "{message}");
        // Exactly the cap: allowed.
        let after = run
            .reserve(usd("0.25"), common::tools(), at(NOON))
            .await
            .unwrap();
        assert_eq!(
            after,
            Totals {
                run: usd("1"),
                day: usd("1"),
                month: usd("1")
            }
        );
        let (named, ..) = refused(
            run.reserve(usd("0.0000000001"), common::tools(), at(NOON))
                .await,
        );
        assert_eq!(named, cap);
        // Zero still fits at the cap.
        run.reserve(Decimal::ZERO, common::tools(), at(NOON))
            .await
            .unwrap();
        assert_eq!(run.run_total(), usd("1"));
        let stored = ledger.stored(at(NOON)).await.unwrap();
        assert_eq!((stored.day, stored.month), (usd("1"), usd("1")), "{cap:?}");
    }
}

async fn the_first_cap_passed_is_named(backend: Backend) {
    let ledger = open(&backend, &agent("several-caps")).await;
    let caps = Caps {
        per_run: Some(usd("5")),
        per_day: Some(usd("3")),
        per_month: Some(usd("4")),
    };
    let run = ledger.start_run(caps.clone());
    run.reserve(usd("3"), common::tools(), at(NOON))
        .await
        .unwrap();
    // Day (3) and month (4) are both passed by 1.5; the day is checked first.
    assert_eq!(
        refused(run.reserve(usd("1.5"), common::tools(), at(NOON)).await).0,
        Cap::PerDay
    );
    // Tomorrow the day is fresh, but the month is not.
    let tomorrow = at("2026-04-02T10:00:00Z");
    assert_eq!(
        refused(run.reserve(usd("1.5"), common::tools(), tomorrow).await).0,
        Cap::PerMonth
    );
    // Run (5) and month are both passed by 2.5 on a fresh day; run first.
    run.reserve(usd("1"), common::tools(), tomorrow)
        .await
        .unwrap();
    assert_eq!(
        refused(run.reserve(usd("2.5"), common::tools(), tomorrow).await).0,
        Cap::PerRun
    );
}

async fn day_and_month_roll_over_at_utc_midnight(backend: Backend) {
    let ledger = open(&backend, &agent("midnight")).await;
    let caps = Caps {
        per_run: None,
        per_day: Some(usd("1")),
        per_month: Some(usd("2.5")),
    };
    let run = ledger.start_run(caps);
    let last_instant = at("2026-04-30T23:59:59.999999999Z");
    run.reserve(usd("1"), common::tools(), at("2026-04-29T12:00:00Z"))
        .await
        .unwrap();
    run.reserve(usd("1"), common::tools(), last_instant)
        .await
        .unwrap();
    assert_eq!(
        refused(run.reserve(usd("0.5"), common::tools(), last_instant).await).0,
        Cap::PerDay
    );
    // 21:30 at UTC-02:00 is still April 30th in UTC... and 22:00 is May 1st.
    let evening = at("2026-04-30T21:30:00-02:00");
    assert_eq!(
        refused(run.reserve(usd("0.5"), common::tools(), evening).await).0,
        Cap::PerDay
    );
    let first_instant = at("2026-04-30T22:00:00-02:00");
    assert_eq!(first_instant, at("2026-05-01T00:00:00Z"));
    // A new day and a new month: only this charge counts.
    let totals = run
        .reserve(usd("1"), common::tools(), first_instant)
        .await
        .unwrap();
    assert_eq!(
        totals,
        Totals {
            run: usd("3"),
            day: usd("1"),
            month: usd("1")
        }
    );
    let april = ledger.stored(last_instant).await.unwrap();
    assert_eq!((april.day, april.month), (usd("1"), usd("2")));
    let may = ledger.stored(first_instant).await.unwrap();
    assert_eq!((may.day, may.month), (usd("1"), usd("1")));
    // A day with no charge reads as zero, its month as what it holds.
    let later = ledger.stored(at("2026-05-20T00:00:00Z")).await.unwrap();
    assert_eq!((later.day, later.month), (usd("0"), usd("1")));
}

async fn totals_persist_across_open(backend: Backend) {
    let key = agent("persistent");
    let caps = day_cap("10");
    let started = at("2026-04-01T09:00:00Z");
    let first_id = {
        let ledger = open(&backend, &key).await;
        let run = ledger.start_run_at(caps.clone(), started);
        run.reserve(usd("4.5"), common::tools(), at(NOON))
            .await
            .unwrap();
        run.reserve(usd("0.0000000001"), common::tools(), at(NOON))
            .await
            .unwrap();
        run.id().to_owned()
    };
    let ledger = open(&backend, &key).await;
    let stored = ledger.stored(at(NOON)).await.unwrap();
    assert_eq!(stored.day, usd("4.5000000001"));
    assert_eq!(stored.month, usd("4.5000000001"));
    let last = stored.last_run.unwrap();
    assert_eq!(last.id, first_id);
    assert_eq!(last.started_at, started);
    assert_eq!(last.total, usd("4.5000000001"));
    // A new run starts at zero, but the day cap counts the earlier run.
    let run = ledger.start_run(caps);
    assert_ne!(run.id(), first_id);
    assert_eq!(run.run_total(), Decimal::ZERO);
    let (cap, _, _, before) = refused(run.reserve(usd("5.5"), common::tools(), at(NOON)).await);
    assert_eq!(
        (cap, before.run, before.day),
        (Cap::PerDay, usd("0"), usd("4.5000000001"))
    );
    run.reserve(usd("5.4999999999"), common::tools(), at(NOON))
        .await
        .unwrap();
    assert_eq!(ledger.stored(at(NOON)).await.unwrap().day, usd("10"));
}

/// Starts `calls` reservations of `amount` at once and counts the ones
/// allowed; any error but a cap refusal fails the test.
async fn race(meters: Vec<Arc<RunMeter>>, calls: usize, amount: Decimal) -> usize {
    let tasks: Vec<_> = (0..calls)
        .map(|i| {
            let meter = Arc::clone(&meters[i % meters.len()]);
            tokio::spawn(async move { meter.reserve(amount, common::tools(), at(NOON)).await })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => allowed += 1,
            Err(SpendError::Refused { .. }) => {}
            Err(err) => panic!("{err}"),
        }
    }
    allowed
}

async fn hundred_concurrent_calls_in_one_run_forward_exactly_ten(backend: Backend) {
    let ledger = open(&backend, &agent("one-run")).await;
    let run = Arc::new(ledger.start_run(run_cap("1")));
    assert_eq!(race(vec![Arc::clone(&run)], 100, usd("0.1")).await, 10);
    assert_eq!(run.run_total(), usd("1"));
    assert_eq!(ledger.stored(at(NOON)).await.unwrap().day, usd("1"));
}

async fn hundred_concurrent_runs_forward_exactly_ten(backend: Backend) {
    let ledger = open(&backend, &agent("many-runs")).await;
    let runs = (0..100)
        .map(|_| Arc::new(ledger.start_run(day_cap("1"))))
        .collect();
    assert_eq!(race(runs, 100, usd("0.1")).await, 10);
    assert_eq!(ledger.stored(at(NOON)).await.unwrap().day, usd("1"));
}

/// Separately opened ledgers: separate lock-file descriptions for the
/// embedded store, separate connections ("machines") for Redis.
async fn several_ledgers_share_the_caps_atomically(backend: Backend) {
    let key = agent("shared");
    let mut runs = Vec::new();
    for _ in 0..4 {
        let ledger = open(&backend, &key).await;
        runs.push(Arc::new(ledger.start_run(month_cap("1"))));
    }
    assert_eq!(race(runs.clone(), 100, usd("0.1")).await, 10);
    let total: Decimal = runs.iter().map(|r| r.run_total()).sum();
    assert_eq!(total, usd("1"));
    for run in &runs {
        let stored = run.ledger().stored(at(NOON)).await.unwrap();
        assert_eq!((stored.day, stored.month), (usd("1"), usd("1")));
    }
}

async fn invalid_amounts_are_refused_and_not_charged(backend: Backend) {
    let ledger = open(&backend, &agent("amounts")).await;
    let run = ledger.start_run(Caps::default());
    for (amount, expected) in [
        ("-0.01", "Negative"),
        ("0.00000000001", "TooPrecise"),
        ("922337203.6854775808", "TooLarge"),
    ] {
        match run.reserve(usd(amount), common::tools(), at(NOON)).await {
            Err(SpendError::Amount(err)) => {
                let kind = match err {
                    AmountError::Negative { .. } => "Negative",
                    AmountError::TooPrecise { .. } => "TooPrecise",
                    AmountError::TooLarge { .. } => "TooLarge",
                    _ => "other",
                };
                assert_eq!(kind, expected, "{amount}: {err}");
            }
            other => panic!("{amount}: {other:?}"),
        }
    }
    let stored = ledger.stored(at(NOON)).await.unwrap();
    assert_eq!((stored.day, stored.last_run), (Decimal::ZERO, None));
}

/// Redis's Lua numbers are doubles; totals past 2^53 units (about 900 000
/// USD) must still add and compare exactly.
async fn totals_are_exact_past_double_precision(backend: Backend) {
    let ledger = open(&backend, &agent("big")).await;
    let run = ledger.start_run(day_cap("1800000.0000000003"));
    run.reserve(usd("900000.0000000001"), common::tools(), at(NOON))
        .await
        .unwrap();
    let totals = run
        .reserve(usd("900000.0000000001"), common::tools(), at(NOON))
        .await
        .unwrap();
    assert_eq!(totals.day, usd("1800000.0000000002"));
    let (cap, ..) = refused(
        run.reserve(usd("0.0000000002"), common::tools(), at(NOON))
            .await,
    );
    assert_eq!(cap, Cap::PerDay);
    let totals = run
        .reserve(usd("0.0000000001"), common::tools(), at(NOON))
        .await
        .unwrap();
    assert_eq!(totals.day, usd("1800000.0000000003"));
}

async fn a_total_never_wraps(backend: Backend) {
    let ledger = open(&backend, &agent("full")).await;
    let run = ledger.start_run(Caps::default());
    let most = usd("922337203.6854775807");
    run.reserve(most, common::tools(), at(NOON)).await.unwrap();
    match run
        .reserve(usd("0.0000000001"), common::tools(), at(NOON))
        .await
    {
        Err(
            err @ SpendError::TotalTooLarge {
                total: Cap::PerRun, ..
            },
        ) => {
            assert!(err.to_string().contains("largest"), "{err}");
        }
        other => panic!("{other:?}"),
    }
    // A new run has room, the day does not.
    let next = ledger.start_run(Caps::default());
    match next
        .reserve(usd("0.0000000001"), common::tools(), at(NOON))
        .await
    {
        Err(SpendError::TotalTooLarge { total, totals, .. }) => {
            assert_eq!((total, totals.day), (Cap::PerDay, most));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ledger.stored(at(NOON)).await.unwrap().day, most);
}

async fn the_newest_run_is_the_last_run(backend: Backend) {
    let ledger = open(&backend, &agent("last-run")).await;
    let older = ledger.start_run_at(Caps::default(), at("2026-04-01T08:00:00Z"));
    let newer = ledger.start_run_at(Caps::default(), at("2026-04-01T09:00:00Z"));
    newer
        .reserve(usd("1"), common::tools(), at(NOON))
        .await
        .unwrap();
    older
        .reserve(usd("2"), common::tools(), at(NOON))
        .await
        .unwrap();
    let last = ledger.stored(at(NOON)).await.unwrap().last_run.unwrap();
    assert_eq!((last.id.as_str(), last.total), (newer.id(), usd("1")));
    newer
        .reserve(usd("0.5"), common::tools(), at(NOON))
        .await
        .unwrap();
    let last = ledger.stored(at(NOON)).await.unwrap().last_run.unwrap();
    assert_eq!(last.total, usd("1.5"));
}

// ---------------------------------------------------------------------------
// Keys

#[tokio::test]
async fn keys_by_did_and_by_name_differ_and_are_path_safe() {
    let did = SigningIdentity::from_bytes(&[7; 32]).did().clone();
    let by_did = LedgerKey::for_did(&did);
    let suffix = did.to_string().strip_prefix("did:key:").unwrap().to_owned();
    assert_eq!(by_did.as_str(), format!("did-{suffix}"));
    // A name spelled like a DID key still gets a different key.
    let lookalike = LedgerKey::for_name(&Name::new(by_did.as_str()).unwrap());
    let by_name = LedgerKey::for_name(&Name::new("research-bot").unwrap());
    assert_eq!(by_name.as_str(), "name-research-bot");
    for key in [&by_did, &by_name, &lookalike] {
        let s = key.as_str();
        assert!(
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')),
            "{s}"
        );
        assert!(!s.starts_with('.') && !s.contains(".."), "{s}");
    }
    assert_ne!(by_did, lookalike);
    assert_ne!(by_did, by_name);

    // Each key has its own totals, in its own directory.
    let backend = Backend::embedded();
    for key in [&by_did, &lookalike] {
        let ledger = open(&backend, key).await;
        ledger
            .start_run(Caps::default())
            .reserve(usd("1"), common::tools(), at(NOON))
            .await
            .unwrap();
        assert_eq!(ledger.stored(at(NOON)).await.unwrap().day, usd("1"));
        let dir = backend.key_dir(key).unwrap();
        assert!(dir.join("state.json").is_file(), "{}", dir.display());
    }
}

#[tokio::test]
async fn redis_keys_are_namespaced_by_ledger_key() {
    let Some(backend) = Backend::redis("redis_keys_are_namespaced_by_ledger_key") else {
        return;
    };
    let key = agent("namespaced");
    let ledger = open(&backend, &key).await;
    ledger
        .start_run(Caps::default())
        .reserve(usd("1"), common::tools(), at(NOON))
        .await
        .unwrap();
    let LedgerConfig::Redis { url } = backend.config() else {
        unreachable!()
    };
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "constle:spend:name-namespaced:day:2026-04-01",
            "constle:spend:name-namespaced:day:2026-04-01:by_source",
            "constle:spend:name-namespaced:last_run",
            "constle:spend:name-namespaced:month:2026-04",
            "constle:spend:name-namespaced:month:2026-04:by_source",
        ]
    );
    let day: String = redis::cmd("GET")
        .arg(&keys[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(day, "10000000000");
    let by_source: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(&keys[1])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        by_source,
        [(r#"["mcp","tools"]"#.to_owned(), "10000000000".to_owned())].into()
    );
    for (key, days) in [
        (&keys[0], 3),
        (&keys[1], 3),
        (&keys[3], 70),
        (&keys[4], 70),
        (&keys[2], 70),
    ] {
        let ttl: i64 = redis::cmd("TTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            (days * 86_400 - 10..=days * 86_400).contains(&ttl),
            "{key}: {ttl}"
        );
    }
}

// ---------------------------------------------------------------------------
// Embedded store: files, corruption, failures

#[tokio::test]
async fn embedded_files_are_private() {
    let backend = Backend::embedded();
    let key = agent("private");
    let ledger = open(&backend, &key).await;
    ledger
        .start_run(Caps::default())
        .reserve(usd("1"), common::tools(), at(NOON))
        .await
        .unwrap();
    let dir = backend.key_dir(&key).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(dir.parent().unwrap()), 0o700);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["lock", "state.json"]);
    for name in names {
        assert_eq!(mode(&dir.join(&name)), 0o600, "{name}");
    }
}

#[tokio::test]
async fn a_corrupt_state_file_is_an_error_never_a_reset() {
    let backend = Backend::embedded();
    let key = agent("corrupt");
    let ledger = open(&backend, &key).await;
    let run = ledger.start_run(Caps::default());
    run.reserve(usd("3"), common::tools(), at(NOON))
        .await
        .unwrap();
    let state = backend.key_dir(&key).unwrap().join("state.json");
    let good = std::fs::read_to_string(&state).unwrap();
    let broken = [
        good[..good.len() / 2].to_owned(),
        String::new(),
        good.replace("\"version\": 1", "\"version\": 2"),
        good.replace("\"3\"", "\"-3\""),
        good.replace("\"3\"", "3"),
        good.replace("\"days\"", "\"dayz\""),
        good.replace("2026-04-01", "2026-4-1"),
    ];
    for bad in broken {
        assert_ne!(bad, good);
        std::fs::write(&state, &bad).unwrap();
        let is_corrupt = |err: &LedgerError| matches!(err, LedgerError::Corrupt { .. });
        match run.reserve(usd("1"), common::tools(), at(NOON)).await {
            Err(SpendError::Ledger(err)) => assert!(is_corrupt(&err), "{err}"),
            other => panic!("{bad:?}: {other:?}"),
        }
        let err = ledger.stored(at(NOON)).await.unwrap_err();
        assert!(is_corrupt(&err), "{err}");
        let err = Ledger::open(&backend.config(), key.clone())
            .await
            .unwrap_err();
        assert!(
            is_corrupt(&err) && err.to_string().contains("move it aside"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(&state).unwrap(),
            bad,
            "left as it was"
        );
    }
    assert_eq!(run.run_total(), usd("3"));
}

/// Something done to the state file while a run charges, given the state
/// as it was one charge earlier.
type Loss = fn(&std::path::Path, &str);

/// None of these may lower a total the ledger has counted.
const LOSSES: [(&str, Loss); 3] = [
    ("deleted", |state, _| std::fs::remove_file(state).unwrap()),
    ("reset to an empty state", |state, _| {
        let empty = r#"{"version":1,"days":{},"months":{},"last_run":null}"#;
        std::fs::write(state, empty).unwrap();
    }),
    ("put back from an older copy", |state, older| {
        std::fs::write(state, older).unwrap()
    }),
];

#[tokio::test]
async fn a_state_that_lost_charges_under_a_running_ledger_is_refused_and_restored() {
    for (what, lose) in LOSSES {
        let backend = Backend::embedded();
        let key = agent("losing");
        let ledger = open(&backend, &key).await;
        let run = ledger.start_run(day_cap("5"));
        run.reserve(usd("1"), common::tools(), at(NOON))
            .await
            .unwrap();
        let state = backend.key_dir(&key).unwrap().join("state.json");
        let older = std::fs::read_to_string(&state).unwrap();
        run.reserve(usd("3"), common::tools(), at(NOON))
            .await
            .unwrap();
        lose(&state, &older);
        match run.reserve(usd("1"), common::tools(), at(NOON)).await {
            Err(SpendError::Ledger(err)) => {
                let text = err.to_string();
                assert!(text.contains("written back"), "{what}: {text}");
            }
            other => panic!("{what}: {other:?}"),
        }
        // The day's 4 USD were written back: 1 more fits, 2 do not.
        assert_eq!(
            ledger.stored(at(NOON)).await.unwrap().day,
            usd("4"),
            "{what}"
        );
        let (cap, ..) = refused(run.reserve(usd("2"), common::tools(), at(NOON)).await);
        assert_eq!(cap, Cap::PerDay, "{what}");
        assert_eq!(
            run.reserve(usd("1"), common::tools(), at(NOON))
                .await
                .unwrap()
                .day,
            usd("5")
        );
    }
}

#[tokio::test]
async fn an_unwritable_ledger_is_an_error() {
    let backend = Backend::embedded();
    // The ledger directory cannot be created: its parent is a file.
    let file = tempfile::NamedTempFile::new().unwrap();
    let config = LedgerConfig::Embedded {
        dir: file.path().join("ledger"),
    };
    let err = Ledger::open(&config, agent("nowhere")).await.unwrap_err();
    assert!(matches!(err, LedgerError::Io { .. }), "{err}");

    // The state cannot be replaced (works as root too, unlike a chmod).
    let key = agent("unwritable");
    let ledger = open(&backend, &key).await;
    let run = ledger.start_run(Caps::default());
    run.reserve(usd("1"), common::tools(), at(NOON))
        .await
        .unwrap();
    let dir = backend.key_dir(&key).unwrap();
    std::fs::create_dir(dir.join("state.json.tmp")).unwrap();
    match run.reserve(usd("1"), common::tools(), at(NOON)).await {
        Err(SpendError::Ledger(LedgerError::Io { path, .. })) => {
            assert!(path.ends_with("state.json.tmp"), "{}", path.display());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(run.run_total(), usd("1"));
    assert_eq!(ledger.stored(at(NOON)).await.unwrap().day, usd("1"));
    std::fs::remove_dir(dir.join("state.json.tmp")).unwrap();
    assert_eq!(
        run.reserve(usd("1"), common::tools(), at(NOON))
            .await
            .unwrap()
            .day,
        usd("2")
    );
}

/// A process that holds the lock and never lets go (stopped, say) makes
/// charges fail after the bound, and a charge given up on is never written
/// later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_too_long_fails_closed_and_is_not_charged_later() {
    let backend = Backend::embedded();
    let key = agent("locked");
    let ledger = open(&backend, &key).await;
    let run = ledger.start_run(Caps::default());
    run.reserve(usd("1"), common::tools(), at(NOON))
        .await
        .unwrap();
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(backend.key_dir(&key).unwrap().join("lock"))
        .unwrap();
    lock.lock().unwrap();
    let started = Instant::now();
    let result = run.reserve(usd("1"), common::tools(), at(NOON)).await;
    let waited = started.elapsed();
    assert!(
        matches!(
            result,
            Err(SpendError::Ledger(LedgerError::LockTimeout { .. }))
        ),
        "{result:?}"
    );
    assert!(
        (Duration::from_secs(4)..Duration::from_secs(8)).contains(&waited),
        "{waited:?}"
    );
    drop(lock);
    // Give the abandoned worker time to take the lock and give up.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(ledger.stored(at(NOON)).await.unwrap().day, usd("1"));
    assert_eq!(
        run.reserve(usd("1"), common::tools(), at(NOON))
            .await
            .unwrap()
            .day,
        usd("2")
    );
}

// ---------------------------------------------------------------------------
// Redis: failures

fn is_ledger_error<T: std::fmt::Debug>(result: &Result<T, SpendError>) -> bool {
    matches!(result, Err(SpendError::Ledger(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_fails_closed_within_the_bound() {
    let Some(mut backend) = Backend::redis("redis_killed_fails_closed_within_the_bound") else {
        return;
    };
    let key = agent("killed");
    let ledger = open(&backend, &key).await;
    let run = ledger.start_run(day_cap("100"));
    run.reserve(usd("1"), common::tools(), at(NOON))
        .await
        .unwrap();
    backend.server().unwrap().kill().unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        let result = run.reserve(usd("1"), common::tools(), at(NOON)).await;
        assert!(is_ledger_error(&result), "{result:?}");
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "{:?}",
            started.elapsed()
        );
    }
    let started = Instant::now();
    let err = ledger.stored(at(NOON)).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(2500), "{err}");
    let err = Ledger::open(&backend.config(), key).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "{err}");
    assert_eq!(run.run_total(), usd("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_not_answering_fails_closed_within_the_bound() {
    let Some(backend) = Backend::redis("redis_not_answering_fails_closed_within_the_bound") else {
        return;
    };
    let ledger = open(&backend, &agent("frozen")).await;
    let run = ledger.start_run(day_cap("100"));
    run.reserve(usd("1"), common::tools(), at(NOON))
        .await
        .unwrap();
    let Backend::Redis(server) = &backend else {
        unreachable!()
    };
    server.stop().unwrap();
    let started = Instant::now();
    let result = run.reserve(usd("1"), common::tools(), at(NOON)).await;
    let waited = started.elapsed();
    server.resume().unwrap();
    match result {
        Err(SpendError::Ledger(LedgerError::Timeout { after, .. })) => {
            assert_eq!(after, Duration::from_secs(2));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        (Duration::from_millis(1900)..Duration::from_millis(2500)).contains(&waited),
        "{waited:?}"
    );
    // Once it answers again, so does the ledger. The call that timed out may
    // have been charged after all (the server ran it once thawed): counted,
    // never lost.
    let mut totals = None;
    for _ in 0..50 {
        if let Ok(t) = run.reserve(usd("1"), common::tools(), at(NOON)).await {
            totals = Some(t);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let totals = totals.expect("the ledger works again after the server resumes");
    assert_eq!(totals.run, usd("2"));
    assert!([usd("2"), usd("3")].contains(&totals.day), "{totals:?}");
}

#[tokio::test]
async fn redis_values_not_written_by_the_ledger_are_errors() {
    let Some(backend) = Backend::redis("redis_values_not_written_by_the_ledger_are_errors") else {
        return;
    };
    let LedgerConfig::Redis { url } = backend.config() else {
        unreachable!()
    };
    let ledger = open(&backend, &agent("tampered")).await;
    let run = ledger.start_run(Caps::default());
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for bad in ["abc", "-5", "007", "1.5", ""] {
        let key = "constle:spend:name-tampered:day:2026-04-01";
        let () = redis::cmd("SET")
            .arg(key)
            .arg(bad)
            .query_async(&mut conn)
            .await
            .unwrap();
        match run.reserve(usd("1"), common::tools(), at(NOON)).await {
            Err(SpendError::Ledger(err @ LedgerError::RedisCorrupt { .. })) => {
                assert!(err.to_string().contains(key), "{err}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
        let value: String = redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(value, bad, "left as it was");
        // Nothing else was written either: the script checks before it writes.
        let month: Option<String> = redis::cmd("GET")
            .arg("constle:spend:name-tampered:month:2026-04")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(month, None);
        assert!(ledger.stored(at(NOON)).await.is_err());
    }
}

#[tokio::test]
async fn bad_redis_urls_are_errors() {
    for url in ["http://example.com", "redis://", "not a url"] {
        let config = LedgerConfig::Redis {
            url: url.to_owned(),
        };
        let err = Ledger::open(&config, agent("bad-url")).await.unwrap_err();
        assert!(matches!(err, LedgerError::BadUrl { .. }), "{url}: {err}");
    }
    // Well formed but nothing listens: an error, quickly, without the password.
    let dir = tempfile::tempdir().unwrap();
    for url in [
        format!("redis+unix://{}/none.sock", dir.path().display()),
        format!("unix://{}/none.sock?pass=hunter2", dir.path().display()),
    ] {
        let config = LedgerConfig::Redis { url: url.clone() };
        let err = Ledger::open(&config, agent("bad-url")).await.unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(!format!("{config:?}").contains("hunter2"));
    }
    // TLS is understood (a crypto provider is there); nothing listens on
    // loopback port 1, so this is a connection error, not a panic.
    let config = LedgerConfig::Redis {
        url: "rediss://:hunter2@127.0.0.1:1/0".to_owned(),
    };
    let started = Instant::now();
    let err = Ledger::open(&config, agent("tls")).await.unwrap_err();
    assert!(
        matches!(err, LedgerError::Redis { .. } | LedgerError::Timeout { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("rediss://:***@127.0.0.1:1/0"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn ledgers_and_meters_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<Ledger>();
    shareable::<RunMeter>();
    shareable::<SpendError>();
}
