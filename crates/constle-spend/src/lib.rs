//! The durable spend ledger: what an agent's priced tool and model calls
//! have cost, per run, per UTC day and per UTC month, checked against the
//! Agentfile's `max_per_run_usd`, `max_per_day_usd` and `max_per_month_usd`.
//!
//! The MCP gate asks a [`RunMeter`] to [`reserve`](RunMeter::reserve) a
//! call's price before it forwards the call. The reservation is atomic: it
//! is refused if any total plus the price would pass its cap (equal to the
//! cap is allowed), and otherwise the day and month totals are durably
//! increased before `reserve` returns. So 100 concurrent calls against a cap
//! that allows 10 forward exactly 10, across runs, processes and (with Redis)
//! machines.
//!
//! **A charge is final.** A [`reserve`](RunMeter::reserve) is never
//! released: a call is charged when it is forwarded, whatever the server
//! then does, because the server may have acted (and billed) even if its
//! answer never arrives. Counting such a call is the conservative error;
//! forgetting it could let an agent pass its cap.
//!
//! **Hold, then settle.** A model call's cost is known only after it: the
//! LLM gate [`hold`](RunMeter::hold)s the worst case (the same atomic check
//! and durable increase as `reserve`) and then
//! [`settle`](RunMeter::settle)s to the usage the provider reports, which
//! moves the run, day and month totals by the difference: down to release
//! what was held beyond the cost, up (past a cap, if it must) when the cost
//! was higher, because the provider has billed it. A [`Hold`] never settled
//! stays charged in full.
//!
//! **Per source.** Every charge names its [`Source`] (an MCP server, or a
//! provider's model); day and month totals are kept per source beside the
//! totals the caps count ([`Stored::by_source`]). A part of the spend with
//! caps of its own (model calls under `llm.spending`) is charged a second
//! time to a ledger of its own, keyed by [`LedgerKey::scoped`].
//!
//! **Where totals live** ([`LedgerConfig`]), keyed by [`LedgerKey`] (the
//! agent's DID, or its name when it has none):
//!
//! - *Embedded* (default): one directory per key under
//!   `$CONSTLE_HOME/ledger/`, a small JSON state file replaced atomically
//!   (temp file, fsync, rename, fsync of the directory) under an exclusive
//!   `flock`. Several runs of one agent on one machine share it safely, and a
//!   `kill -9` at any instant leaves the old or the new state, never half.
//! - *Redis* (`spending.ledger: redis://…`): the day and month totals in
//!   Redis, checked and increased by one Lua script, so runs of one agent on
//!   several machines share the caps. How durable that is depends on the
//!   server's persistence settings (`appendonly yes` with
//!   `appendfsync always` to keep every acknowledged charge).
//!
//! The run total is kept in memory by the [`RunMeter`]: a run lives in one
//! process. Calls of one run are reserved one at a time, so they cannot
//! overshoot the run cap together either.
//!
//! **Fail closed.** A ledger that cannot be read or written, a state file
//! that cannot be parsed (it is never reset to zero), a lock or a Redis
//! answer that does not come in time: each is a [`LedgerError`], and the
//! caller refuses the call. An error can leave a charge recorded that the
//! caller was told failed (Redis applied it, the answer was lost); it can
//! never lose one that the caller was told succeeded.
//!
//! Money is [`Decimal`], counted by the stores in exact units of 10⁻¹⁰ USD
//! (the Agentfile allows at most 10 decimal places). Days and months are UTC
//! calendar dates of the `now` the caller passes.
//!
//! ```
//! use constle_identity::Name;
//! use constle_spend::{Cap, Caps, Ledger, LedgerConfig, LedgerKey, Source, SpendError};
//! use rust_decimal::Decimal;
//!
//! # let home = tempfile::tempdir()?;
//! # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! # runtime.block_on(async {
//! let config = LedgerConfig::Embedded { dir: home.path().join("ledger") };
//! let key = LedgerKey::for_name(&Name::new("research-bot")?);
//! let ledger = Ledger::open(&config, key).await?;
//! let run = ledger.start_run(Caps {
//!     per_day: Some(Decimal::new(100, 2)), // 1.00 USD
//!     ..Caps::default()
//! });
//! let now = jiff::Timestamp::now();
//! let tools = Source::Mcp { server: "accounting".into() };
//! let totals = run.reserve(Decimal::new(75, 2), tools.clone(), now).await?;
//! assert_eq!(totals.day, Decimal::new(75, 2));
//! match run.reserve(Decimal::new(50, 2), tools, now).await {
//!     Err(SpendError::Refused { cap: Cap::PerDay, .. }) => {} // not forwarded
//!     other => panic!("{other:?}"),
//! }
//! // A model call: hold the worst case, settle to the reported cost.
//! let model = Source::Llm { provider: "anthropic".into(), model: "claude-sonnet-4-5".into() };
//! let hold = run.hold(Decimal::new(20, 2), model, now).await?;
//! assert_eq!(hold.totals().day, Decimal::new(95, 2));
//! let totals = run.settle(hold, Decimal::new(5, 2)).await?;
//! assert_eq!(totals.day, Decimal::new(80, 2));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod amount;
mod embedded;
mod key;
mod ledger;
mod period;
mod record;
mod redis_store;
mod refusal;
mod source;

use std::path::PathBuf;
use std::time::Duration;

use constle_store::RedisFailure;
use rust_decimal::Decimal;

pub use amount::AmountError;
pub use key::{LedgerKey, Scope};
pub use ledger::{Hold, Ledger, LedgerConfig, RunMeter};
pub use record::{RunRecord, Stored};
pub use refusal::{Failure, Refusal, usd};
pub use source::{Source, SourceTotals};

/// An agent's spend caps, in USD. `None` is no cap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// `max_per_run_usd`.
    pub per_run: Option<Decimal>,
    /// `max_per_day_usd`, per UTC day.
    pub per_day: Option<Decimal>,
    /// `max_per_month_usd`, per UTC month.
    pub per_month: Option<Decimal>,
}

/// One of the three caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// `max_per_run_usd`.
    PerRun,
    /// `max_per_day_usd`.
    PerDay,
    /// `max_per_month_usd`.
    PerMonth,
}

impl Cap {
    /// In the order a charge is checked against them.
    pub const ALL: [Cap; 3] = [Cap::PerRun, Cap::PerDay, Cap::PerMonth];

    /// The Agentfile field under `spending` that sets this cap.
    pub fn field(self) -> &'static str {
        match self {
            Cap::PerRun => "max_per_run_usd",
            Cap::PerDay => "max_per_day_usd",
            Cap::PerMonth => "max_per_month_usd",
        }
    }

    /// This cap's limit in `caps`.
    pub fn limit(self, caps: &Caps) -> Option<Decimal> {
        match self {
            Cap::PerRun => caps.per_run,
            Cap::PerDay => caps.per_day,
            Cap::PerMonth => caps.per_month,
        }
    }

    /// The total this cap limits, in `totals`.
    pub fn total(self, totals: &Totals) -> Decimal {
        match self {
            Cap::PerRun => totals.run,
            Cap::PerDay => totals.day,
            Cap::PerMonth => totals.month,
        }
    }
}

/// What has been spent: this run, today and this month (UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Totals {
    /// This run.
    pub run: Decimal,
    /// The UTC day, across all runs keyed alike.
    pub day: Decimal,
    /// The UTC month, across all runs keyed alike.
    pub month: Decimal,
}

/// Why a charge was not made. In every case the call must not be forwarded.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpendError {
    /// The charge would pass `cap`; nothing was charged.
    #[error(
        "spend cap {} ({limit} USD) would be passed: {} USD spent + {amount} USD for this call",
        .cap.field(),
        .cap.total(.totals)
    )]
    Refused {
        /// The first cap (run, day, month) that would be passed.
        cap: Cap,
        /// Its limit.
        limit: Decimal,
        /// The amount refused.
        amount: Decimal,
        /// The totals before (unchanged).
        totals: Totals,
    },
    /// The ledger could not be read or written in time; nothing may have
    /// been charged, or the charge may be recorded without the caller
    /// knowing (never the other way round).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The amount cannot be charged (negative, finer than 10⁻¹⁰ USD, or too
    /// large); nothing was charged.
    #[error(transparent)]
    Amount(#[from] AmountError),
    /// A total with no cap would pass the largest amount the ledger holds
    /// (about 922 million USD); nothing was charged.
    #[error(
        "the {} total would pass the largest amount the ledger holds: {} USD spent + {amount} USD",
        total_name(*.total),
        .total.total(.totals)
    )]
    TotalTooLarge {
        /// Which total.
        total: Cap,
        /// The amount refused.
        amount: Decimal,
        /// The totals before (unchanged).
        totals: Totals,
    },
}

fn total_name(cap: Cap) -> &'static str {
    match cap {
        Cap::PerRun => "run",
        Cap::PerDay => "day",
        Cap::PerMonth => "month",
    }
}

/// Why the ledger could not be read or written. Priced calls are refused
/// while it cannot be.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// A file or directory of the embedded store could not be used.
    #[error("spend ledger {path}: {message}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed and what the operating system said.
        message: String,
    },
    /// The embedded state file is not what this version writes. It is
    /// never reset (that would forget charges): fix or move it aside.
    #[error(
        "spend ledger state {path} cannot be read ({reason}); it is left as it is: fix it or move it aside, which forgets its totals"
    )]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The embedded state holds less than this ledger had read or written:
    /// it was deleted, reset or put back from an older copy while the
    /// ledger was open. Charges are final, so the higher totals are
    /// written back and the charge at hand is refused.
    #[error(
        "spend ledger state {path} lost charges while in use ({lost}); {}",
        match .not_restored {
            None => "the totals were written back; this call was refused".to_owned(),
            Some(err) => format!("they could not be written back ({err}); refusing priced calls until they are"),
        }
    )]
    Damaged {
        /// The state file.
        path: PathBuf,
        /// The first total that fell.
        lost: String,
        /// Why the totals could not be written back, if they could not.
        not_restored: Option<String>,
    },
    /// Another process held the embedded store's lock for too long (a run
    /// that is stopped, or a very slow disk).
    #[error("spend ledger {path} stayed locked by another process for {waited:?}")]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long this call waited.
        waited: Duration,
    },
    /// The `spending.ledger` URL is not one the Redis client accepts.
    #[error("spend ledger {url} is not a usable Redis URL: {message}")]
    BadUrl {
        /// The URL, without credentials.
        url: String,
        /// What the client said.
        message: String,
    },
    /// Redis failed or refused the command.
    #[error("spend ledger {url}: {message}")]
    Redis {
        /// The URL, without credentials.
        url: String,
        /// What failed.
        message: String,
    },
    /// Redis did not answer in time.
    #[error("spend ledger {url} did not answer within {after:?}")]
    Timeout {
        /// The URL, without credentials.
        url: String,
        /// The bound.
        after: Duration,
    },
    /// A value stored in Redis is not what this crate writes.
    #[error(
        "spend ledger {url}: key {key} holds {found:?}, not a total this ledger wrote; it is left as it is"
    )]
    RedisCorrupt {
        /// The URL, without credentials.
        url: String,
        /// The Redis key.
        key: String,
        /// What it holds (shortened).
        found: String,
    },
    /// A hold was given to the meter of another run to settle (a caller's
    /// bug); nothing was settled, and the hold stays charged in full.
    #[error("hold of run {hold} settled on run {run}; a hold is settled by the run that made it")]
    NotThisRun {
        /// The run that made the hold.
        hold: String,
        /// The run asked to settle it.
        run: String,
    },
}

impl From<RedisFailure> for LedgerError {
    fn from(failure: RedisFailure) -> Self {
        match failure {
            RedisFailure::BadUrl { url, message } => LedgerError::BadUrl { url, message },
            RedisFailure::Redis { url, message } => LedgerError::Redis { url, message },
            RedisFailure::Timeout { url, after } => LedgerError::Timeout { url, after },
            other => LedgerError::Redis {
                url: other.url().to_owned(),
                message: other.to_string(),
            },
        }
    }
}
