//! [`Ledger`] (one agent's stored totals), [`RunMeter`] (one run's charges
//! against them) and [`Hold`] (a charge still to be settled).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use jiff::Timestamp;
use rust_decimal::Decimal;

use crate::amount::{Delta, Limits, Outcome, Units};
use crate::period::{Month, utc_day};
use crate::record::{Charge, Settlement, Stored};
use crate::source::Source;
use crate::{Caps, LedgerError, LedgerKey, SpendError, Totals, embedded, redis_store};

/// Where the day and month totals are kept.
#[derive(Clone, PartialEq, Eq)]
pub enum LedgerConfig {
    /// The embedded store: one directory per key under `dir`, normally
    /// `$CONSTLE_HOME/ledger`.
    Embedded {
        /// The ledger directory.
        dir: PathBuf,
    },
    /// A Redis server shared by several machines: `redis://`, `rediss://`
    /// (TLS), `redis+unix://` or `unix://`, as the `redis` crate reads them.
    Redis {
        /// The URL; it may hold a password, so it is never shown whole.
        url: String,
    },
}

impl fmt::Debug for LedgerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerConfig::Embedded { dir } => f.debug_struct("Embedded").field("dir", dir).finish(),
            LedgerConfig::Redis { url } => f
                .debug_struct("Redis")
                .field("url", &constle_store::redis::redacted(url))
                .finish(),
        }
    }
}

enum Store {
    Embedded(embedded::Store),
    Redis(redis_store::Store),
}

impl Store {
    async fn charge(&self, charge: Charge) -> Result<Outcome, LedgerError> {
        match self {
            Store::Embedded(store) => store.charge(charge).await,
            Store::Redis(store) => store.charge(charge).await,
        }
    }

    async fn settle(&self, settlement: Settlement) -> Result<(Units, Units), LedgerError> {
        match self {
            Store::Embedded(store) => store.settle(settlement).await,
            Store::Redis(store) => store.settle(settlement).await,
        }
    }

    async fn stored(&self, day: jiff::civil::Date, month: Month) -> Result<Stored, LedgerError> {
        match self {
            Store::Embedded(store) => store.stored(day, month).await,
            Store::Redis(store) => store.stored(day, month).await,
        }
    }
}

/// One agent's stored totals, in the embedded store or in Redis. Cheap to
/// clone; clones share the connection.
#[derive(Clone)]
pub struct Ledger {
    key: LedgerKey,
    store: Arc<Store>,
}

impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = match &*self.store {
            Store::Embedded(store) => format!("embedded {}", store.dir().display()),
            Store::Redis(store) => format!("redis {}", store.url()),
        };
        f.debug_struct("Ledger")
            .field("key", &self.key)
            .field("store", &store)
            .finish()
    }
}

impl Ledger {
    /// Opens `key`'s totals: for the embedded store, creates its directory
    /// (0700) and checks that its state can be read; for Redis, connects and
    /// checks that the server answers. Needs a Tokio runtime with time (and,
    /// for Redis, I/O) enabled.
    pub async fn open(config: &LedgerConfig, key: LedgerKey) -> Result<Ledger, LedgerError> {
        let store = match config {
            LedgerConfig::Embedded { dir } => {
                Store::Embedded(embedded::Store::open(dir, &key).await?)
            }
            LedgerConfig::Redis { url } => Store::Redis(redis_store::Store::open(url, &key).await?),
        };
        Ok(Ledger {
            key,
            store: Arc::new(store),
        })
    }

    /// Whose totals these are.
    pub fn key(&self) -> &LedgerKey {
        &self.key
    }

    /// A new run's meter: its own in-memory run total (starts at 0), a fresh
    /// run id, started now.
    pub fn start_run(&self, caps: Caps) -> RunMeter {
        self.start_run_at(caps, Timestamp::now())
    }

    /// [`start_run`](Ledger::start_run) with the start time given, for tests
    /// and tools that replay a run.
    pub fn start_run_at(&self, caps: Caps, started_at: Timestamp) -> RunMeter {
        RunMeter {
            ledger: self.clone(),
            limits: Limits::new(&caps),
            caps,
            id: new_run_id(),
            started_at,
            turn: tokio::sync::Mutex::new(()),
            run_total: AtomicI64::new(0),
        }
    }

    /// Stored totals for `now`'s UTC day and month, and the last run's id,
    /// start and total.
    pub async fn stored(&self, now: Timestamp) -> Result<Stored, LedgerError> {
        let day = utc_day(now);
        self.store.stored(day, Month::of(day)).await
    }
}

/// 128 random bits, hex: unique without coordination between machines.
fn new_run_id() -> String {
    let mut bytes = [0_u8; 16];
    // Without the OS's randomness the id still has to differ between runs
    // that start at once; the time and process id make it so.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = Timestamp::now().as_nanosecond().to_le_bytes();
        bytes.copy_from_slice(&nanos);
        bytes[12..].copy_from_slice(&std::process::id().to_le_bytes());
    }
    hex::encode(bytes)
}

/// One run's charges. Share it (in an `Arc`) between all the calls of the
/// run: they are reserved one at a time, so together they cannot pass the
/// run cap.
pub struct RunMeter {
    ledger: Ledger,
    caps: Caps,
    limits: Limits,
    id: String,
    started_at: Timestamp,
    /// Held across check and charge, so the run total cannot change between.
    turn: tokio::sync::Mutex<()>,
    /// In units; written only while `turn` is held.
    run_total: AtomicI64,
}

impl fmt::Debug for RunMeter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunMeter")
            .field("ledger", &self.ledger)
            .field("id", &self.id)
            .field("started_at", &self.started_at)
            .field("caps", &self.caps)
            .field("run_total", &self.run_total())
            .finish()
    }
}

impl RunMeter {
    /// Atomically: refuses if run + `amount`, day + `amount` or month +
    /// `amount` would pass its cap (equal to the cap is allowed; the first
    /// of run, day, month that would be passed is named); otherwise durably
    /// adds `amount` to the stored day and month totals and `source`'s (on
    /// disk or in Redis before this returns) and to the run total, and
    /// records this run as the last run. Returns the totals after the
    /// charge.
    ///
    /// The charge is final: there is no release. Call this just before the
    /// call is forwarded. On [`SpendError::Ledger`] the call must be refused;
    /// the charge may or may not have been recorded.
    pub async fn reserve(
        &self,
        amount: Decimal,
        source: Source,
        now: Timestamp,
    ) -> Result<Totals, SpendError> {
        // A hold never settled stays charged in full: that is a final charge.
        Ok(self.hold(amount, source, now).await?.totals)
    }

    /// Exactly [`reserve`](RunMeter::reserve) (the same atomic cap check,
    /// the same durable increase), returning a [`Hold`] to
    /// [`settle`](RunMeter::settle) once the actual cost is known: hold the
    /// worst case before the call is forwarded, settle to what the provider
    /// reports after.
    ///
    /// `amount` must be exact to 10⁻¹⁰ USD ([`SpendError::Amount`]
    /// otherwise): round a worst case up before holding it.
    pub async fn hold(
        &self,
        amount: Decimal,
        source: Source,
        now: Timestamp,
    ) -> Result<Hold, SpendError> {
        let units = Units::from_decimal(amount)?;
        let _turn = self.turn.lock().await;
        let day = utc_day(now);
        let charge = Charge {
            amount: units,
            run_total: self.run_units(),
            limits: self.limits,
            day,
            month: Month::of(day),
            run_id: self.id.clone(),
            started_at: self.started_at,
            source: source.clone(),
        };
        match self.ledger.store.charge(charge).await? {
            Outcome::Charged(after) => {
                self.run_total.store(after.run.raw(), Ordering::Release);
                Ok(Hold {
                    units,
                    day,
                    source,
                    run_id: self.id.clone(),
                    totals: after.totals(),
                })
            }
            Outcome::Refused { cap, limit, before } => Err(SpendError::Refused {
                cap,
                limit,
                amount,
                totals: before.totals(),
            }),
            Outcome::Overflow { total, before } => Err(SpendError::TotalTooLarge {
                total,
                amount,
                totals: before.totals(),
            }),
        }
    }

    /// Durably moves the run total and the hold's own day and month totals
    /// (and its source's) by `actual - held`, even when the day or month
    /// has ended since: below the hold releases the difference; above it
    /// adds the excess without a cap check (the provider has billed it, so
    /// the ledger records it, and later calls are refused). No total goes
    /// below zero or past the largest the ledger holds. `actual` is rounded
    /// up to 10⁻¹⁰ USD; a negative `actual` (a caller's bug) is taken as
    /// the hold, which releases nothing. Returns the totals after.
    ///
    /// On an error the hold stays charged in full (the embedded store wrote
    /// nothing; Redis may or may not have applied the settlement), and an
    /// excess counts against this run's cap all the same.
    pub async fn settle(&self, hold: Hold, actual: Decimal) -> Result<Totals, LedgerError> {
        if hold.run_id != self.id {
            return Err(LedgerError::NotThisRun {
                hold: hold.run_id,
                run: self.id.clone(),
            });
        }
        let actual = Units::rounded_up(actual).unwrap_or(hold.units);
        let delta = Delta::between(hold.units, actual);
        let _turn = self.turn.lock().await;
        let before = self.run_units();
        let run_total = delta.apply(before);
        let settlement = Settlement {
            delta,
            day: hold.day,
            month: Month::of(hold.day),
            source: hold.source,
            run_id: hold.run_id,
            run_total,
        };
        let settled = self.ledger.store.settle(settlement).await;
        // Failed or not, the run's own total never forgets an excess.
        let kept = if settled.is_ok() {
            run_total
        } else {
            before.max(run_total)
        };
        self.run_total.store(kept.raw(), Ordering::Release);
        let (day, month) = settled?;
        Ok(Totals {
            run: run_total.to_decimal(),
            day: day.to_decimal(),
            month: month.to_decimal(),
        })
    }

    fn run_units(&self) -> Units {
        Units::from_raw(self.run_total.load(Ordering::Acquire)).unwrap_or(Units::MAX)
    }

    /// What this run has been charged so far.
    pub fn run_total(&self) -> Decimal {
        self.run_units().to_decimal()
    }

    /// The caps this run is held to.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// This run's id, as recorded for the last run.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// When this run started.
    pub fn started_at(&self) -> Timestamp {
        self.started_at
    }

    /// The ledger this run is charged to.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }
}

/// A charge made by [`RunMeter::hold`], to be settled by
/// [`RunMeter::settle`] on the same meter once the actual cost is known.
///
/// Dropped unsettled, it stays charged in full: the conservative error (a
/// call whose cost never became known is counted at its worst case).
#[must_use = "a hold never settled stays charged in full"]
#[derive(Debug)]
pub struct Hold {
    units: Units,
    day: jiff::civil::Date,
    source: Source,
    run_id: String,
    totals: Totals,
}

impl Hold {
    /// The amount held.
    pub fn amount(&self) -> Decimal {
        self.units.to_decimal()
    }

    /// The UTC day it was charged to (and so its month): a settlement
    /// moves that day's and month's totals, whenever it comes.
    pub fn day(&self) -> jiff::civil::Date {
        self.day
    }

    /// What it pays for.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The totals right after it was charged.
    pub fn totals(&self) -> Totals {
        self.totals
    }
}
