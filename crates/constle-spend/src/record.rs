//! What the ledger and its two stores exchange: one charge, and what a
//! store holds for a day and month.

use jiff::Timestamp;
use rust_decimal::Decimal;

use crate::amount::{Limits, Units};
use crate::period::Month;

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
}
