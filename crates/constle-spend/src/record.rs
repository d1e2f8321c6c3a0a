//! What the ledger and its two stores exchange: one charge, one
//! settlement, and what a store holds for a day and month.

use std::collections::BTreeMap;

use jiff::Timestamp;
use rust_decimal::Decimal;

use crate::amount::{Delta, Limits, Units};
use crate::period::Month;
use crate::source::{Source, SourceTotals};

/// A finished or running run, as the ledger last recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRecord {
    /// The run's id (from [`RunMeter::id`](crate::RunMeter::id)).
    pub id: String,
    /// When the run started.
    pub started_at: Timestamp,
    /// What it had spent at its last charge.
    pub total: Decimal,
}

/// The stored totals for one day and month, and the last run charged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The UTC day's total.
    pub day: Decimal,
    /// The UTC month's total.
    pub month: Decimal,
    /// The run that started last among those charged, if any is recorded.
    /// With several runs at once this is the newest of them.
    pub last_run: Option<RunRecord>,
    /// The day's and month's totals of each source charged this month.
    pub by_source: BTreeMap<Source, SourceTotals>,
    /// What of the day's and month's totals no source accounts for:
    /// charges recorded before totals were kept per source.
    pub unattributed: SourceTotals,
}

/// One charge, as a store sees it.
#[derive(Clone, Debug)]
pub(crate) struct Charge {
    pub(crate) amount: Units,
    /// The run's total before this charge.
    pub(crate) run_total: Units,
    pub(crate) limits: Limits,
    pub(crate) day: jiff::civil::Date,
    pub(crate) month: Month,
    pub(crate) run_id: String,
    pub(crate) started_at: Timestamp,
    pub(crate) source: Source,
}

/// One settlement of a hold, as a store sees it: the totals of the hold's
/// own day and month move by `delta`, without a cap check.
#[derive(Clone, Debug)]
pub(crate) struct Settlement {
    pub(crate) delta: Delta,
    pub(crate) day: jiff::civil::Date,
    pub(crate) month: Month,
    pub(crate) source: Source,
    /// The run, and its total after this settlement, for the last run's
    /// record when this run is the last run.
    pub(crate) run_id: String,
    pub(crate) run_total: Units,
}
