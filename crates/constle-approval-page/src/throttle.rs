//! Sign-in throttling: a few failed sign-ins are free; after them, every
//! further attempt for the same user name, or from the same address, must
//! wait, twice as long after each failure, up to [`MAX_DELAY`]. Failures
//! are forgotten [`FORGET_AFTER`] the last one, and a successful sign-in
//! clears its user's, so nobody is ever locked out for good: at worst the
//! operator waits [`MAX_DELAY`] for the next try (a restart clears all).
//!
//! Every attempt counts as a failure *before* its password is checked and
//! is taken back if it matches, so a burst of concurrent guesses cannot
//! all slip through one free slot. A refused attempt checks no password
//! at all: the answer (429, `Retry-After`) says nothing about it.
//!
//! Memory is bounded: at most [`MAX_TRACKED`] user names and as many
//! addresses are remembered; past that, the least recently failed is
//! forgotten first.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Failed sign-ins for one user name before attempts must wait.
pub const FREE_PER_USER: u32 = 5;
/// Failed sign-ins from one address before attempts must wait (higher:
/// several people may sign in from behind one proxy).
pub const FREE_PER_ADDRESS: u32 = 20;
/// The wait after the first failure past the free ones; it doubles with
/// each further failure.
pub const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest wait.
pub const MAX_DELAY: Duration = Duration::from_secs(300);
/// Failures are forgotten this long after the last one.
pub const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);
/// The most user names (and the most addresses) remembered.
pub const MAX_TRACKED: usize = 4096;

/// The user name an attempt is counted under: no approver's is longer than
/// [`MAX_USER_BYTES`](crate::auth::MAX_USER_BYTES), so a longer one (which
/// cannot sign in) is cut there and memory stays bounded.
pub fn counted_as(user: &str) -> &str {
    let mut end = user.len().min(crate::auth::MAX_USER_BYTES);
    while !user.is_char_boundary(end) {
        end -= 1;
    }
    &user[..end]
}

/// How long an attempt made after `failures` failures must wait after the
/// last one, with `free` failures allowed.
fn delay(failures: u32, free: u32) -> Duration {
    match failures.checked_sub(free) {
        None => Duration::ZERO,
        Some(past) => FIRST_DELAY
            .checked_mul(2_u32.saturating_pow(past))
            .map_or(MAX_DELAY, |delay| delay.min(MAX_DELAY)),
    }
}

#[derive(Clone, Copy)]
struct Record {
    failures: u32,
    last: Instant,
}

/// Failures by one kind of key (user names, or addresses).
struct Limiter<K> {
    free: u32,
    records: HashMap<K, Record>,
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    fn new(free: u32) -> Limiter<K> {
        Limiter {
            free,
            records: HashMap::new(),
        }
    }

    /// `key`'s record, unless it is forgotten by `now`.
    fn record(&self, key: &K, now: Instant) -> Option<Record> {
        let record = *self.records.get(key)?;
        (now.saturating_duration_since(record.last) < FORGET_AFTER).then_some(record)
    }

    /// How long `key` must still wait at `now`; zero when it may try.
    fn wait(&self, key: &K, now: Instant) -> Duration {
        self.record(key, now).map_or(Duration::ZERO, |record| {
            (record.last + delay(record.failures, self.free)).saturating_duration_since(now)
        })
    }

    /// Counts a failure for `key` at `now`; returns its failures.
    fn fail(&mut self, key: K, now: Instant) -> u32 {
        let failures = self.record(&key, now).map_or(0, |r| r.failures) + 1;
        if !self.records.contains_key(&key) && self.records.len() >= MAX_TRACKED {
            self.make_room(now);
        }
        self.records.insert(
            key,
            Record {
                failures,
                last: now,
            },
        );
        failures
    }

    /// Takes back one failure of `key` (an attempt that succeeded).
    fn take_back(&mut self, key: &K) {
        if let Some(record) = self.records.get_mut(key) {
            record.failures = record.failures.saturating_sub(1);
        }
    }

    fn forget(&mut self, key: &K) {
        self.records.remove(key);
    }

    /// Drops forgotten records, or else the one that failed longest ago.
    fn make_room(&mut self, now: Instant) {
        self.records
            .retain(|_, record| now.saturating_duration_since(record.last) < FORGET_AFTER);
        if self.records.len() >= MAX_TRACKED {
            let oldest = self
                .records
                .iter()
                .min_by_key(|(_, record)| record.last)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                self.records.remove(&oldest);
            }
        }
    }
}

struct Limiters {
    users: Limiter<String>,
    addresses: Limiter<IpAddr>,
}

/// The failures counted so far, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// For this user name.
    pub user: u32,
    /// From this address.
    pub address: u32,
}

/// Sign-in attempts by user name and by address. Shared by every request.
pub struct Throttle(Mutex<Limiters>);

impl Default for Throttle {
    fn default() -> Throttle {
        Throttle(Mutex::new(Limiters {
            users: Limiter::new(FREE_PER_USER),
            addresses: Limiter::new(FREE_PER_ADDRESS),
        }))
    }
}

impl Throttle {
    fn lock(&self) -> MutexGuard<'_, Limiters> {
        // The maps stay consistent whatever panicked: carry on.
        match self.0.lock() {
            Ok(limiters) => limiters,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// An attempt to sign in as `user` from `address` at `now`: refused
    /// with the time left to wait, or allowed and counted as a failure
    /// until [`succeeded`](Throttle::succeeded) takes it back.
    ///
    /// # Errors
    ///
    /// How long the attempt must still wait.
    pub fn attempt(&self, user: &str, address: IpAddr, now: Instant) -> Result<Counted, Duration> {
        let mut limiters = self.lock();
        let user = counted_as(user).to_owned();
        let wait = limiters
            .users
            .wait(&user, now)
            .max(limiters.addresses.wait(&address, now));
        if !wait.is_zero() {
            return Err(wait);
        }
        Ok(Counted {
            user: limiters.users.fail(user, now),
            address: limiters.addresses.fail(address, now),
        })
    }

    /// The attempt's password matched: `user`'s failures are cleared and
    /// the attempt is no failure of `address`.
    pub fn succeeded(&self, user: &str, address: IpAddr) {
        let mut limiters = self.lock();
        limiters.users.forget(&counted_as(user).to_owned());
        limiters.addresses.take_back(&address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOME: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    const AWAY: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 7));

    #[test]
    fn the_wait_doubles_past_the_free_failures_up_to_the_cap() {
        for (failures, wait) in [
            (0, 0),
            (4, 0),
            (5, 1),
            (6, 2),
            (7, 4),
            (13, 256),
            (14, 300),
            (99, 300),
        ] {
            assert_eq!(
                delay(failures, FREE_PER_USER),
                Duration::from_secs(wait),
                "{failures}"
            );
        }
        assert_eq!(delay(u32::MAX, 0), MAX_DELAY);
    }

    /// `n` failed attempts at `now`, each of which must be allowed.
    fn fail(throttle: &Throttle, user: &str, address: IpAddr, n: u32, now: Instant) {
        for _ in 0..n {
            assert!(throttle.attempt(user, address, now).is_ok(), "{user}");
        }
    }

    #[test]
    fn a_user_waits_after_five_failures_from_anywhere() {
        let throttle = Throttle::default();
        let now = Instant::now();
        fail(&throttle, "admin", HOME, 3, now);
        fail(&throttle, "admin", AWAY, 2, now);
        assert_eq!(throttle.attempt("admin", HOME, now), Err(FIRST_DELAY));
        assert!(throttle.attempt("someone", HOME, now).is_ok());
        let later = now + FIRST_DELAY;
        let counted = throttle.attempt("admin", HOME, later).unwrap();
        assert_eq!(
            counted,
            Counted {
                user: 6,
                address: 5
            }
        );
        assert_eq!(throttle.attempt("admin", AWAY, later), Err(2 * FIRST_DELAY));
    }

    #[test]
    fn an_address_waits_after_twenty_failures_whatever_the_user_names() {
        let throttle = Throttle::default();
        let now = Instant::now();
        for n in 0..FREE_PER_ADDRESS {
            fail(&throttle, &format!("user{n}"), HOME, 1, now);
        }
        assert_eq!(throttle.attempt("admin", HOME, now), Err(FIRST_DELAY));
        assert!(throttle.attempt("admin", AWAY, now).is_ok());
    }

    #[test]
    fn success_clears_the_user_and_failures_are_forgotten() {
        let throttle = Throttle::default();
        let now = Instant::now();
        fail(&throttle, "admin", HOME, FREE_PER_USER - 1, now);
        // The right password: counted first, then taken back.
        throttle.attempt("admin", HOME, now).unwrap();
        throttle.succeeded("admin", HOME);
        let counted = throttle.attempt("admin", HOME, now).unwrap();
        assert_eq!(
            counted,
            Counted {
                user: 1,
                address: FREE_PER_USER
            }
        );
        fail(&throttle, "admin", HOME, FREE_PER_USER - 1, now);
        assert!(throttle.attempt("admin", HOME, now).is_err());
        let quiet = now + FORGET_AFTER;
        let counted = throttle.attempt("admin", HOME, quiet).unwrap();
        assert_eq!(
            counted,
            Counted {
                user: 1,
                address: 1
            }
        );
    }

    #[test]
    fn long_user_names_are_counted_under_their_first_64_bytes() {
        let long = "é".repeat(40);
        assert_eq!(counted_as(&long).len(), 64);
        assert_eq!(counted_as("admin"), "admin");
        let throttle = Throttle::default();
        let now = Instant::now();
        for n in 0..FREE_PER_USER {
            fail(&throttle, &format!("{long}{n}"), HOME, 1, now);
        }
        assert!(throttle.attempt(&long, AWAY, now).is_err());
    }

    #[test]
    fn memory_is_bounded_and_the_oldest_failure_goes_first() {
        let throttle = Throttle::default();
        let start = Instant::now();
        for n in 0..=MAX_TRACKED {
            let at = start + Duration::from_millis(n as u64);
            let address = IpAddr::V6(std::net::Ipv6Addr::from(n as u128));
            assert!(throttle.attempt(&format!("u{n}"), address, at).is_ok());
        }
        let limiters = throttle.lock();
        assert_eq!(limiters.users.records.len(), MAX_TRACKED);
        assert_eq!(limiters.addresses.records.len(), MAX_TRACKED);
        assert!(!limiters.users.records.contains_key("u0"));
        assert!(
            limiters
                .users
                .records
                .contains_key(&format!("u{MAX_TRACKED}"))
        );
    }
}
