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

/// Tracks the log's size and time at the last round. A round's own entries
/// are counted in the size it leaves behind, so a quiet log does not
/// checkpoint its own checkpoints forever.
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
        let new = size.saturating_sub(self.covered);
        if new == 0 {
            return None;
        }
        if today != self.day {
            return Some(Trigger::DayClose);
        }
        if new >= self.every_entries {
            return Some(Trigger::Entries);
        }
        (now.duration_since(self.at) >= self.every).then_some(Trigger::Interval)
    }

    /// Records a round that left the log at `size` entries.
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
        assert_eq!(
            s.due(5, t0 + Duration::from_secs(600), DAY.tomorrow().unwrap()),
            None
        );
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
}
