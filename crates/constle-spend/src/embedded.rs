//! The embedded store: `<dir>/<key>/state.json`, replaced atomically under
//! an exclusive lock on `<dir>/<key>/lock`.
//!
//! Safe across processes: every charge takes an exclusive `flock` on the
//! lock file (never renamed, so every process locks the same inode) and
//! holds it across read, check and write. The lock file is opened afresh
//! for each charge, so two charges in one process exclude each other too
//! (a `flock` belongs to an open file description, not to a process).
//!
//! Crash-safe: the new state goes to `state.json.tmp`, is fsynced, renamed
//! over `state.json`, and the directory is fsynced; a charge is acknowledged
//! only after that. `kill -9` at any instant leaves the old state (the
//! charge was never acknowledged) or the new one (it was, or was about to
//! be), never a mix. A torn temp file is simply overwritten by the next
//! charge. A missing state file is an agent with no charges yet; one that
//! cannot be parsed is an error, never a reset.
//!
//! Never lower: charges are final, so no total ever falls (only days and
//! months too old to matter are dropped). A store keeps the state it last
//! read or wrote, and a charge that finds a lower one (the file deleted,
//! reset, or put back from an older copy while the ledger was open) is
//! refused as damage ([`LedgerError::Damaged`]): the higher totals are
//! written back first, so the next charge counts them.
//!
//! Each UTC day and month has its own total; the state keeps the last three
//! days and months (a clock stepped back across midnight still finds
//! yesterday's total) and drops older ones.

use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use constle_store::LockFailure;
use constle_store::replace::replace_via;
use jiff::Timestamp;
use jiff::civil::Date;

use crate::amount::{Outcome, Tally, Units};
use crate::period::Month;
use crate::record::{Charge, RunRecord, Stored};
use crate::{LedgerError, LedgerKey};

const STATE: &str = "state.json";
const TEMP: &str = "state.json.tmp";
const LOCK: &str = "lock";
const VERSION: u32 = 1;
/// Days and months kept in the state file, the current one included.
const PERIODS_KEPT: i32 = 3;
/// How long a charge waits for another process's lock. A charge holds it
/// for one small write and two fsyncs; only a stopped process or a stalled
/// disk holds it this long.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The state file.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    version: u32,
    days: BTreeMap<Date, Units>,
    months: BTreeMap<Month, Units>,
    last_run: Option<LastRun>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LastRun {
    id: String,
    started_at: Timestamp,
    total: Units,
}

impl State {
    fn empty() -> State {
        State {
            version: VERSION,
            days: BTreeMap::new(),
            months: BTreeMap::new(),
            last_run: None,
        }
    }

    fn stored(&self, day: Date, month: Month) -> Stored {
        Stored {
            day: self
                .days
                .get(&day)
                .copied()
                .unwrap_or_default()
                .to_decimal(),
            month: self
                .months
                .get(&month)
                .copied()
                .unwrap_or_default()
                .to_decimal(),
            last_run: self.last_run.as_ref().map(|run| RunRecord {
                id: run.id.clone(),
                started_at: run.started_at,
                total: run.total.to_decimal(),
            }),
        }
    }

    /// Decides `charge` and, when it is made, records it in the state.
    fn apply(&mut self, charge: &Charge) -> Outcome {
        let before = Tally {
            run: charge.run_total,
            day: self.days.get(&charge.day).copied().unwrap_or_default(),
            month: self.months.get(&charge.month).copied().unwrap_or_default(),
        };
        let outcome = before.charge(charge.amount, &charge.limits);
        if let Outcome::Charged(after) = outcome {
            self.days.insert(charge.day, after.day);
            self.months.insert(charge.month, after.month);
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
            let first_day = charge
                .day
                .checked_sub(jiff::Span::new().days(PERIODS_KEPT - 1))
                .unwrap_or(Date::MIN);
            let first_month = charge.month.months_before(PERIODS_KEPT - 1);
            self.days.retain(|day, _| *day >= first_day);
            self.months.retain(|month, _| *month >= first_month);
        }
        outcome
    }

    /// The first total `self` holds that `found` has lost, described; days
    /// and months older than any state keeps do not count.
    fn lost_in(&self, found: &State) -> Option<String> {
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
        fallen(&self.days, &found.days, day_kept)
            .or_else(|| fallen(&self.months, &found.months, month_kept))
    }

    /// Raises every total of `self` to `other`'s where that is higher, and
    /// keeps the newer last run.
    fn merge(&mut self, other: &State) {
        for (day, units) in &other.days {
            let total = self.days.entry(*day).or_default();
            *total = (*total).max(*units);
        }
        for (month, units) in &other.months {
            let total = self.months.entry(*month).or_default();
            *total = (*total).max(*units);
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

fn io_error<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(io::Error) -> LedgerError + 'a {
    move |err| LedgerError::Io {
        path: path.to_owned(),
        message: format!("{what}: {err}"),
    }
}

/// One key's directory in the embedded store.
pub(crate) struct Store {
    dir: PathBuf,
    /// The state this store last read or wrote, which no later state may
    /// be below.
    known: Arc<Mutex<State>>,
}

impl Store {
    /// Creates `root/<key>` (0700) if needed and checks its state can be
    /// read.
    pub(crate) async fn open(root: &Path, key: &LedgerKey) -> Result<Store, LedgerError> {
        let dir = root.join(key.as_str());
        let created = dir.clone();
        let root = root.to_owned();
        let state = blocking(&dir, move || {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&created)
                .map_err(io_error(&created, "create directory"))?;
            // The new directory entries must survive a crash as surely as
            // the state file written into them.
            for dir in [root.parent(), Some(root.as_path())].into_iter().flatten() {
                if !dir.as_os_str().is_empty() {
                    sync_dir(dir)?;
                }
            }
            open_lock(&created.join(LOCK))?;
            read_state(&created)
        })
        .await?;
        Ok(Store {
            dir,
            known: Arc::new(Mutex::new(state)),
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) async fn charge(&self, charge: Charge) -> Result<Outcome, LedgerError> {
        let known = Arc::clone(&self.known);
        self.locked(move |dir| {
            let mut known = known.lock().unwrap_or_else(PoisonError::into_inner);
            let mut state = read_state(dir)?;
            if let Some(lost) = known.lost_in(&state) {
                return Err(restore(dir, &mut known, state, lost));
            }
            let outcome = state.apply(&charge);
            if let Outcome::Charged(_) = outcome {
                write_state(dir, &state)?;
            }
            *known = state;
            Ok(outcome)
        })
        .await
    }

    /// Reads without the lock: the state file is only ever replaced by a
    /// rename, so a reader sees one whole state or the other.
    pub(crate) async fn stored(&self, day: Date, month: Month) -> Result<Stored, LedgerError> {
        let dir = self.dir.clone();
        blocking(&self.dir, move || Ok(read_state(&dir)?.stored(day, month))).await
    }

    /// Runs `work` on a blocking thread while holding the key's lock,
    /// giving up after [`LOCK_WAIT`] without ever running it late: a charge
    /// that the caller was told failed must not be written afterwards.
    async fn locked<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Path) -> Result<T, LedgerError> + Send + 'static,
    ) -> Result<T, LedgerError> {
        let dir = self.dir.clone();
        let lock_path = dir.join(LOCK);
        constle_store::lock::locked(LOCK_WAIT, move |claim| {
            let lock = open_lock(&lock_path)?;
            let _held = claim.lock(&lock).map_err(io_error(&lock_path, "lock"))?;
            work(&dir)
        })
        .await
        .map_err(|failure| match failure {
            LockFailure::TimedOut => LedgerError::LockTimeout {
                path: self.dir.join(LOCK),
                waited: LOCK_WAIT,
            },
            LockFailure::Stopped(err) => stopped(&self.dir, &err),
            LockFailure::Job(err) => err,
        })
    }
}

async fn blocking<T: Send + 'static>(
    dir: &Path,
    work: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, LedgerError> {
    // The gate runs on a current-thread runtime: file I/O and fsyncs must
    // not stall it.
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| stopped(dir, &err))?
}

fn stopped(path: &Path, err: &tokio::task::JoinError) -> LedgerError {
    LedgerError::Io {
        path: path.to_owned(),
        message: format!("the ledger's worker thread stopped: {err}"),
    }
}

/// Writes back what `found` lost of `known`, and returns the damage.
fn restore(dir: &Path, known: &mut State, mut found: State, lost: String) -> LedgerError {
    found.merge(known);
    let restored = write_state(dir, &found);
    *known = found;
    LedgerError::Damaged {
        path: dir.join(STATE),
        lost,
        not_restored: restored.err().map(|err| err.to_string()),
    }
}

fn open_lock(path: &Path) -> Result<File, LedgerError> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error(path, "open lock file"))
}

fn read_state(dir: &Path) -> Result<State, LedgerError> {
    let path = dir.join(STATE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(State::empty()),
        Err(err) => return Err(io_error(&path, "read")(err)),
    };
    let corrupt = |reason: String| LedgerError::Corrupt {
        path: path.clone(),
        reason,
    };
    let state: State = serde_json::from_slice(&bytes).map_err(|err| corrupt(err.to_string()))?;
    if state.version != VERSION {
        return Err(corrupt(format!(
            "version {} (this constle reads version {VERSION})",
            state.version
        )));
    }
    Ok(state)
}

fn write_state(dir: &Path, state: &State) -> Result<(), LedgerError> {
    let path = dir.join(STATE);
    let mut bytes = serde_json::to_vec_pretty(state).map_err(|err| LedgerError::Io {
        path: path.clone(),
        message: format!("encode: {err}"),
    })?;
    bytes.push(b'\n');
    replace_via(&path, TEMP, &bytes, 0o600).map_err(|err| {
        let (step, path, source) = err.into_parts();
        io_error(&path, step)(source)
    })?;
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), LedgerError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir, "fsync directory"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Caps;
    use crate::amount::Limits;

    fn charge(day: Date, units: i64, started_at: &str) -> Charge {
        Charge {
            amount: Units::from_raw(units).unwrap(),
            run_total: Units::ZERO,
            limits: Limits::new(&Caps::default()),
            day,
            month: Month::of(day),
            run_id: started_at.to_owned(),
            started_at: started_at.parse().unwrap(),
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
