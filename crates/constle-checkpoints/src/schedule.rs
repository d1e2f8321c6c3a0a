//! When a checkpoint round is due.

use std::time::{Duration, Instant};

use jiff::civil::Date;

/// Why a round happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Before the agent starts, so that a required quorum is checked first.
    RunStart,
    /// `checkpoint_every_entries` new entries.
    Entries,
    /// `checkpoint_every_seconds` with new entries.
    Interval,
    /// 00:00 UTC passed.
    DayClose,
    /// After `run_finished`.
    RunEnd,
}

impl Trigger {
    /// The `trigger` field of a `checkpoint` entry.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::RunStart => "run_start",
            Trigger::Entries => "entries",
            Trigger::Interval => "interval",
            Trigger::DayClose => "day_close",
            Trigger::RunEnd => "run_end",
        }
    }
}

/// Tracks the log's size, time and UTC day at the last round. A round's own
/// entries are counted in the size it leaves behind, so a quiet log does not
/// checkpoint its own checkpoints forever; the one exception is the day's
/// close, once per 00:00 UTC crossed, which checkpoints whatever the last
/// day ended with (a previous round's own entries included) even when the
/// run has been idle since.
///
/// The clock is the caller's: `now` and `today` are passed in, so the
/// schedule is tested with any clock, and the run asks it once a second.
#[derive(Clone, Debug)]
pub struct Schedule {
    every_entries: u64,
    every: Duration,
    covered: u64,
    at: Instant,
    day: Date,
}

impl Schedule {
    /// Starts with the log at `size` entries, `now`, on UTC day `today`.
    pub fn new(every_entries: u64, every: Duration, size: u64, now: Instant, today: Date) -> Self {
        Schedule {
            every_entries,
            every,
            covered: size,
            at: now,
            day: today,
        }
    }

    /// The round due with the log at `size` entries, if any.
    pub fn due(&self, size: u64, now: Instant, today: Date) -> Option<Trigger> {
        if today != self.day {
            return Some(Trigger::DayClose);
        }
        let new = size.saturating_sub(self.covered);
        if new == 0 {
            return None;
        }
        if new >= self.every_entries {
            return Some(Trigger::Entries);
        }
        (now.duration_since(self.at) >= self.every).then_some(Trigger::Interval)
    }

    /// Records a round that began at `now` on UTC day `today` and left the
    /// log at `size` entries. The day is the one the round began on, when
    /// it read the log: a round that straddles 00:00 UTC closes nothing.
    pub fn done(&mut self, size: u64, now: Instant, today: Date) {
        self.covered = self.covered.max(size);
        self.at = now;
        self.day = today;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Date = jiff::civil::date(2026, 12, 2);

    #[test]
    fn each_trigger_and_nothing_without_new_entries() {
        let t0 = Instant::now();
        let mut s = Schedule::new(10, Duration::from_secs(60), 5, t0, DAY);
        assert_eq!(s.due(5, t0 + Duration::from_secs(600), DAY), None);
        assert_eq!(s.due(14, t0, DAY), None);
        assert_eq!(s.due(15, t0, DAY), Some(Trigger::Entries));
        assert_eq!(
            s.due(6, t0 + Duration::from_secs(60), DAY),
            Some(Trigger::Interval)
        );
        assert_eq!(
            s.due(6, t0, DAY.tomorrow().unwrap()),
            Some(Trigger::DayClose)
        );
        s.done(8, t0, DAY);
        assert_eq!(s.due(8, t0 + Duration::from_secs(120), DAY), None);
        // A round's size never moves the schedule back.
        s.done(3, t0, DAY);
        assert_eq!(s.due(8, t0 + Duration::from_secs(120), DAY), None);
    }

    #[test]
    fn an_idle_run_closes_each_day_it_crosses_once() {
        // The clock is the test's: a run idle since its last round.
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        let mut s = Schedule::new(256, Duration::from_secs(60), 7, t0, DAY);
        assert_eq!(s.due(7, t0 + hour, DAY), None);
        let tomorrow = DAY.tomorrow().unwrap();
        assert_eq!(s.due(7, t0 + 2 * hour, tomorrow), Some(Trigger::DayClose));
        // The day_close round adds its own entries; the day is closed once.
        s.done(8, t0 + 2 * hour, tomorrow);
        assert_eq!(s.due(8, t0 + 3 * hour, tomorrow), None);
        // And the next midnight again, however quiet the day between.
        let after = tomorrow.tomorrow().unwrap();
        assert_eq!(s.due(8, t0 + 26 * hour, after), Some(Trigger::DayClose));
        // Day close wins over the other triggers due at the same tick.
        assert_eq!(s.due(300, t0 + 26 * hour, after), Some(Trigger::DayClose));
    }
}
