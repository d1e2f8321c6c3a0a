//! The embedded store's state file: what it holds, and the rules a charge,
//! a settlement, a loss and a restore apply to it. No I/O here.
//!
//! Version 1, with fields added since: `released_days`, `released_months`,
//! `source_days` and `source_months` are absent from a file written before
//! them (and read as empty), and absent while empty.

use std::collections::BTreeMap;

use jiff::Timestamp;
use jiff::civil::Date;
use rust_decimal::Decimal;

use crate::amount::{Delta, Outcome, Tally, Units};
use crate::period::Month;
use crate::record::{Charge, RunRecord, Settlement, Stored};
use crate::source::{Source, SourceTotals, by_source};

pub(super) const VERSION: u32 = 1;
/// Days and months kept in the state file, the current one included.
const PERIODS_KEPT: i32 = 3;

/// The state file.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct State {
    pub(super) version: u32,
    /// The totals the caps count.
    days: BTreeMap<Date, Units>,
    months: BTreeMap<Month, Units>,
    last_run: Option<LastRun>,
    /// What settlements have released from each total, which only grows:
    /// a total plus its releases never falls, and that is how a charge lost
    /// (the file reset or put back) is told from one released.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    released_days: BTreeMap<Date, Units>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    released_months: BTreeMap<Month, Units>,
    /// The totals per source, shown, never compared with a cap.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    source_days: BTreeMap<Date, BySource>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    source_months: BTreeMap<Month, BySource>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LastRun {
    id: String,
    started_at: Timestamp,
    total: Units,
}

/// One period's totals per source, nested so that no name needs escaping.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BySource {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    mcp: BTreeMap<String, Units>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    llm: BTreeMap<String, BTreeMap<String, Units>>,
}

impl BySource {
    fn total_mut(&mut self, source: &Source) -> &mut Units {
        match source {
            Source::Mcp { server } => self.mcp.entry(server.clone()).or_default(),
            Source::Llm { provider, model } => self
                .llm
                .entry(provider.clone())
                .or_default()
                .entry(model.clone())
                .or_default(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = (Source, Units)> + '_ {
        let mcp = self.mcp.iter().map(|(server, units)| {
            let server = server.clone();
            (Source::Mcp { server }, *units)
        });
        let llm = self.llm.iter().flat_map(|(provider, models)| {
            models.iter().map(|(model, units)| {
                let (provider, model) = (provider.clone(), model.clone());
                (Source::Llm { provider, model }, *units)
            })
        });
        mcp.chain(llm)
    }

    fn decimals(&self) -> BTreeMap<Source, Decimal> {
        self.iter()
            .map(|(source, units)| (source, units.to_decimal()))
            .collect()
    }

    fn merge(&mut self, other: &BySource) {
        for (source, units) in other.iter() {
            let total = self.total_mut(&source);
            *total = (*total).max(units);
        }
    }
}

impl State {
    pub(super) fn empty() -> State {
        State {
            version: VERSION,
            days: BTreeMap::new(),
            months: BTreeMap::new(),
            last_run: None,
            released_days: BTreeMap::new(),
            released_months: BTreeMap::new(),
            source_days: BTreeMap::new(),
            source_months: BTreeMap::new(),
        }
    }

    pub(super) fn stored(&self, day: Date, month: Month) -> Stored {
        let total = |units: Option<&Units>| units.copied().unwrap_or_default().to_decimal();
        let totals = SourceTotals {
            day: total(self.days.get(&day)),
            month: total(self.months.get(&month)),
        };
        let sources = |by: Option<&BySource>| by.map(BySource::decimals).unwrap_or_default();
        let (by_source, unattributed) = by_source(
            sources(self.source_days.get(&day)),
            sources(self.source_months.get(&month)),
            totals,
        );
        Stored {
            day: totals.day,
            month: totals.month,
            last_run: self.last_run.as_ref().map(|run| RunRecord {
                id: run.id.clone(),
                started_at: run.started_at,
                total: run.total.to_decimal(),
            }),
            by_source,
            unattributed,
        }
    }

    /// Decides `charge` and, when it is made, records it in the state.
    pub(super) fn apply(&mut self, charge: &Charge) -> Outcome {
        let before = Tally {
            run: charge.run_total,
            day: self.days.get(&charge.day).copied().unwrap_or_default(),
            month: self.months.get(&charge.month).copied().unwrap_or_default(),
        };
        let outcome = before.charge(charge.amount, &charge.limits);
        if let Outcome::Charged(after) = outcome {
            self.days.insert(charge.day, after.day);
            self.months.insert(charge.month, after.month);
            let add = |units: &mut Units| *units = units.saturating_add(charge.amount);
            add(self.source_day(charge.day, &charge.source));
            add(self.source_month(charge.month, &charge.source));
            // With several runs at once, the newest one is "the last run".
            if self
                .last_run
                .as_ref()
                .is_none_or(|last| last.started_at <= charge.started_at)
            {
                self.last_run = Some(LastRun {
                    id: charge.run_id.clone(),
                    started_at: charge.started_at,
                    total: after.run,
                });
            }
            self.prune(charge.day, charge.month);
        }
        outcome
    }

    /// Moves the settled hold's day and month totals (and its source's) by
    /// its delta, and the last run's total when the hold is of that run.
    /// Returns the day's and month's totals after.
    pub(super) fn settle(&mut self, settlement: &Settlement) -> (Units, Units) {
        let delta = settlement.delta;
        let day = settle_total(
            &mut self.days,
            &mut self.released_days,
            settlement.day,
            delta,
        );
        let month = settle_total(
            &mut self.months,
            &mut self.released_months,
            settlement.month,
            delta,
        );
        let source_day = self.source_day(settlement.day, &settlement.source);
        *source_day = delta.apply(*source_day);
        let source_month = self.source_month(settlement.month, &settlement.source);
        *source_month = delta.apply(*source_month);
        if let Some(last) = self
            .last_run
            .as_mut()
            .filter(|last| last.id == settlement.run_id)
        {
            last.total = settlement.run_total;
        }
        (day, month)
    }

    fn source_day(&mut self, day: Date, source: &Source) -> &mut Units {
        self.source_days.entry(day).or_default().total_mut(source)
    }

    fn source_month(&mut self, month: Month, source: &Source) -> &mut Units {
        self.source_months
            .entry(month)
            .or_default()
            .total_mut(source)
    }

    /// Drops the days and months too old to matter on `day`.
    fn prune(&mut self, day: Date, month: Month) {
        let first_day = day
            .checked_sub(jiff::Span::new().days(PERIODS_KEPT - 1))
            .unwrap_or(Date::MIN);
        let first_month = month.months_before(PERIODS_KEPT - 1);
        self.days.retain(|day, _| *day >= first_day);
        self.released_days.retain(|day, _| *day >= first_day);
        self.source_days.retain(|day, _| *day >= first_day);
        self.months.retain(|month, _| *month >= first_month);
        self.released_months
            .retain(|month, _| *month >= first_month);
        self.source_months.retain(|month, _| *month >= first_month);
    }

    /// The first total `self` holds that `found` has lost, described; days
    /// and months older than any state keeps do not count. A total that a
    /// settlement released is not lost: what is compared is each total
    /// plus what was released from it, which never falls.
    pub(super) fn lost_in(&self, found: &State) -> Option<String> {
        let latest_day = found.days.keys().next_back().copied();
        let day_kept = |day: &Date| {
            latest_day.is_none_or(|latest| {
                latest
                    .checked_sub(jiff::Span::new().days(PERIODS_KEPT - 1))
                    .is_ok_and(|first| *day >= first)
            })
        };
        let latest_month = found.months.keys().next_back().copied();
        let month_kept = |month: &Month| {
            latest_month.is_none_or(|latest| *month >= latest.months_before(PERIODS_KEPT - 1))
        };
        fallen(
            &gross(&self.days, &self.released_days),
            &gross(&found.days, &found.released_days),
            day_kept,
        )
        .or_else(|| {
            fallen(
                &gross(&self.months, &self.released_months),
                &gross(&found.months, &found.released_months),
                month_kept,
            )
        })
    }

    /// Raises `self` to what `other` holds that `self` does not (see
    /// [`merge_totals`]), and keeps the newer last run.
    pub(super) fn merge(&mut self, other: &State) {
        merge_totals(
            (&mut self.days, &mut self.released_days),
            (&other.days, &other.released_days),
        );
        merge_totals(
            (&mut self.months, &mut self.released_months),
            (&other.months, &other.released_months),
        );
        for (day, sources) in &other.source_days {
            self.source_days.entry(*day).or_default().merge(sources);
        }
        for (month, sources) in &other.source_months {
            self.source_months.entry(*month).or_default().merge(sources);
        }
        let newer = match (&self.last_run, &other.last_run) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(mine), Some(theirs)) => {
                (theirs.started_at, theirs.total) > (mine.started_at, mine.total)
            }
        };
        if newer {
            self.last_run.clone_from(&other.last_run);
        }
    }
}

/// Moves one period's total by `delta`, counting what it releases.
fn settle_total<K: Ord + Copy>(
    totals: &mut BTreeMap<K, Units>,
    released: &mut BTreeMap<K, Units>,
    period: K,
    delta: Delta,
) -> Units {
    let total = totals.entry(period).or_default();
    let before = *total;
    *total = delta.apply(before);
    let after = *total;
    if after < before {
        let count = released.entry(period).or_default();
        *count = count.saturating_add(before.saturating_sub(after));
    }
    after
}

/// Each period's total plus what was released from it.
fn gross<K: Ord + Copy>(
    totals: &BTreeMap<K, Units>,
    released: &BTreeMap<K, Units>,
) -> BTreeMap<K, Units> {
    let mut gross = totals.clone();
    for (period, units) in released {
        let total = gross.entry(*period).or_default();
        *total = total.saturating_add(*units);
    }
    gross
}

/// Raises `mine` to `theirs` period by period. A total plus its releases
/// and the releases each only grow, so the higher of each is the later
/// one, and the total is their difference: exact when one state is an
/// older copy of the other (a file deleted, reset or put back).
fn merge_totals<K: Ord + Copy>(
    mine: (&mut BTreeMap<K, Units>, &mut BTreeMap<K, Units>),
    theirs: (&BTreeMap<K, Units>, &BTreeMap<K, Units>),
) {
    let highest = gross(mine.0, mine.1)
        .into_iter()
        .chain(gross(theirs.0, theirs.1))
        .fold(
            BTreeMap::new(),
            |mut highest: BTreeMap<K, Units>, (period, units)| {
                let entry = highest.entry(period).or_default();
                *entry = (*entry).max(units);
                highest
            },
        );
    for (period, released) in theirs.1 {
        let entry = mine.1.entry(*period).or_default();
        *entry = (*entry).max(*released);
    }
    for (period, gross) in highest {
        let released = mine.1.get(&period).copied().unwrap_or_default();
        mine.0.insert(period, gross.saturating_sub(released));
    }
}

/// The first period in `known` (and `kept`) whose total is higher than in
/// `found`, described.
fn fallen<K: Ord + std::fmt::Display>(
    known: &BTreeMap<K, Units>,
    found: &BTreeMap<K, Units>,
    kept: impl Fn(&K) -> bool,
) -> Option<String> {
    known
        .iter()
        .filter(|(period, _)| kept(period))
        .find_map(|(period, was)| {
            let now = found.get(period).copied().unwrap_or_default();
            (now < *was).then(|| format!("the total for {period} fell from {was} to {now} USD"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Caps;
    use crate::amount::Limits;
    use crate::source::Source;

    fn charge(day: Date, units: i64, started_at: &str) -> Charge {
        Charge {
            amount: Units::from_raw(units).unwrap(),
            run_total: Units::ZERO,
            limits: Limits::new(&Caps::default()),
            day,
            month: Month::of(day),
            run_id: started_at.to_owned(),
            started_at: started_at.parse().unwrap(),
            source: Source::Mcp {
                server: "s".to_owned(),
            },
        }
    }

    #[test]
    fn old_days_and_months_are_dropped_future_ones_kept() {
        let mut state = State::empty();
        for (y, m, d) in [(2026, 1, 31), (2026, 3, 30), (2026, 4, 1), (2026, 4, 2)] {
            let outcome = state.apply(&charge(
                jiff::civil::date(y, m, d),
                1,
                "2026-01-01T00:00:00Z",
            ));
            assert!(matches!(outcome, Outcome::Charged(_)));
        }
        let days: Vec<String> = state.days.keys().map(ToString::to_string).collect();
        assert_eq!(days, ["2026-04-01", "2026-04-02"]);
        let months: Vec<String> = state.months.keys().map(ToString::to_string).collect();
        assert_eq!(months, ["2026-03", "2026-04"]);
        // A clock stepped back a day charges yesterday without dropping today.
        state.apply(&charge(
            jiff::civil::date(2026, 4, 1),
            1,
            "2026-01-01T00:00:00Z",
        ));
        assert_eq!(
            state.days.get(&jiff::civil::date(2026, 4, 1)),
            Some(&Units::from_raw(2).unwrap())
        );
        assert_eq!(state.days.len(), 2);
    }

    #[test]
    fn the_newest_run_is_the_last_run() {
        let day = jiff::civil::date(2026, 4, 1);
        let mut state = State::empty();
        state.apply(&charge(day, 1, "2026-04-01T10:00:00Z"));
        state.apply(&charge(day, 1, "2026-04-01T09:00:00Z"));
        let last = state.last_run.as_ref().unwrap();
        assert_eq!(last.id, "2026-04-01T10:00:00Z");
    }

    #[test]
    fn the_state_file_round_trips_and_reads_as_decimals() {
        let day = jiff::civil::date(2026, 4, 1);
        let mut state = State::empty();
        state.apply(&charge(day, 15_000_000_000, "2026-04-01T10:00:00Z"));
        let json = serde_json::to_string(&state).unwrap();
        assert!(json.contains(r#""2026-04-01":"1.5""#), "{json}");
        assert!(json.contains(r#""2026-04":"1.5""#), "{json}");
        let back: State = serde_json::from_str(&json).unwrap();
        assert_eq!(back.days, state.days);
    }
}
