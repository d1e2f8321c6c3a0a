//! The embedded store: `<dir>/<key>/state.json`, replaced atomically under
//! an exclusive lock on `<dir>/<key>/lock`.
//!
//! Safe across processes: every charge and settlement takes an exclusive
//! `flock` on the lock file (never renamed, so every process locks the same
//! inode) and holds it across read, check and write. The lock file is opened afresh
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
//! Never lower: a total falls only by what a settlement releases, and the
//! state counts every release, so a total plus its releases never falls
//! (only days and months too old to matter are dropped). A store keeps the
//! state it last read or wrote, and a charge or settlement that finds a
//! lower one (the file deleted, reset, or put back from an older copy while
//! the ledger was open) is refused as damage ([`LedgerError::Damaged`]): the
//! higher totals are written back first, so the next charge counts them.
//!
//! Each UTC day and month has its own total; the state keeps the last three
//! days and months (a clock stepped back across midnight still finds
//! yesterday's total) and drops older ones.

mod state;

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use constle_store::LockFailure;
use constle_store::replace::replace_via;
use jiff::civil::Date;
use state::{State, VERSION};

use crate::amount::{Outcome, Units};
use crate::period::Month;
use crate::record::{Charge, Settlement, Stored};
use crate::{LedgerError, LedgerKey};

const STATE: &str = "state.json";
const TEMP: &str = "state.json.tmp";
const LOCK: &str = "lock";
/// How long a charge waits for another process's lock. A charge holds it
/// for one small write and two fsyncs; only a stopped process or a stalled
/// disk holds it this long.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(5);

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
        self.update(move |state| {
            let outcome = state.apply(&charge);
            (outcome, matches!(outcome, Outcome::Charged(_)))
        })
        .await
    }

    /// Applies `settlement` and returns the day's and month's totals after.
    pub(crate) async fn settle(
        &self,
        settlement: Settlement,
    ) -> Result<(Units, Units), LedgerError> {
        self.update(move |state| (state.settle(&settlement), true))
            .await
    }

    /// Under the lock: reads the state, refuses it if it lost what this
    /// store knew (writing that back), lets `change` decide and say whether
    /// the state is to be written, and writes it.
    async fn update<T: Send + 'static>(
        &self,
        change: impl FnOnce(&mut State) -> (T, bool) + Send + 'static,
    ) -> Result<T, LedgerError> {
        let known = Arc::clone(&self.known);
        self.locked(move |dir| {
            let mut known = known.lock().unwrap_or_else(PoisonError::into_inner);
            let mut state = read_state(dir)?;
            if let Some(lost) = known.lost_in(&state) {
                return Err(restore(dir, &mut known, state, lost));
            }
            let (result, changed) = change(&mut state);
            if changed {
                write_state(dir, &state)?;
            }
            *known = state;
            Ok(result)
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
