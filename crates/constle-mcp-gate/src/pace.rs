//! How fast the records of refused requests may reach the audit log: an
//! agent that floods a gate with requests it knows are refused must not
//! choose how fast the log grows. None is dropped; each waits its turn.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Refusals recorded at once before any waits: more than an agent that is
/// not flooding ever gets.
pub const REFUSALS_BURST: u32 = 100;

/// Refusals recorded a second, at most, past the burst.
pub const REFUSALS_PER_SECOND: u32 = 20;

/// When each refusal may be recorded: a generic cell rate algorithm, so
/// `burst` go at once and then one each `1 / rate` s, each in the order
/// it asked.
#[derive(Debug)]
pub struct Pace {
    interval: Duration,
    /// How far ahead of the clock a turn may be and still go now.
    tolerance: Duration,
    /// The turn the next refusal would have at the steady rate.
    next: Mutex<Option<Instant>>,
}

impl Pace {
    /// The pace of the records of requests a gate refuses itself.
    pub fn for_refusals() -> Pace {
        Pace::new(REFUSALS_BURST, REFUSALS_PER_SECOND)
    }

    /// `burst` at once, then `rate` a second.
    pub fn new(burst: u32, rate: u32) -> Pace {
        let interval = Duration::from_secs(1) / rate.max(1);
        Pace {
            interval,
            tolerance: interval * burst.saturating_sub(1),
            next: Mutex::new(None),
        }
    }

    /// When the caller's turn comes.
    pub fn turn(&self) -> Instant {
        let now = Instant::now();
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        let due = next.map_or(now, |next| next.max(now));
        *next = Some(due + self.interval);
        due.checked_sub(self.tolerance)
            .map_or(now, |turn| turn.max(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_at_once_then_one_each_interval() {
        let pace = Pace::new(3, 10);
        let start = Instant::now();
        let turns: Vec<Duration> = (0..6).map(|_| pace.turn() - start).collect();
        let ms = |n| Duration::from_millis(n);
        // Turns are computed from a clock read each time: allow for it.
        for (turn, expected) in turns.iter().zip([0, 0, 0, 100, 200, 300]) {
            assert!(
                *turn >= ms(expected) && *turn < ms(expected + 50),
                "{turns:?}"
            );
        }
    }
}
