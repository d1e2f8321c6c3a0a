//! Reading a day file, its neighbours and the head anchor so that they
//! agree while a writer may be appending.
//!
//! A writer appends a batch's lines (finishing one day's file before it
//! creates the next day's), then replaces the head. Read the other way round
//! (the file, then the head), an append in between leaves the head naming
//! more bytes than were read: exactly what a cut-off tail looks like. So the
//! head is read first, then the directory, then the file. The bytes a head
//! names never change under later writers (they cut off only bytes beyond
//! the head they hold), so a head naming this file agrees with any later
//! reading of it; and a later day file in the listing means this one was
//! complete before it was read.
//!
//! Any other reading (no head, or a head naming another file) is also what
//! a writer shows while its batch is creating this file, before it stores
//! the head. It is only trusted once no writer holds `<agent>.lock`: read
//! under a shared lock, or with no lock file before and after (a writer
//! creates it before touching anything else). Until then it is read again.

use std::fs::TryLockError;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::head::{Head, HeadError, SignedHead};
use crate::layout::{DayFile, lock_path};
use crate::read::{ReadError, open_for_reading, read_log_file};

/// How long a writer may hold the lock over a reading that needs it before
/// the check is given up: a batch holds it for a few syncs.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How long to wait between readings.
const POLL: Duration = Duration::from_millis(10);

/// A head as loaded: `Err` only for a head that is not a head anchor
/// (a finding, not a failure to read).
pub(crate) type LoadedHead = Result<Option<SignedHead>, HeadError>;

/// A day file, its neighbours and the head anchor, read so they agree.
pub(crate) struct Snapshot {
    /// The day file's bytes.
    pub(crate) bytes: Vec<u8>,
    /// The nearest earlier day file of the agent.
    pub(crate) before: Option<DayFile>,
    /// The nearest later day file of the agent.
    pub(crate) after: Option<DayFile>,
    /// The head anchor, read before the file.
    pub(crate) head: LoadedHead,
    /// Whether the head changed while the file was read: the entries past
    /// it were being appended.
    pub(crate) moved: bool,
}

impl Snapshot {
    /// Reads `day`'s file with its head anchor and neighbours.
    ///
    /// # Errors
    ///
    /// [`ReadError`] if a file cannot be read, or [`ReadError::Busy`] if a
    /// writer kept the lock for [`LOCK_WAIT`] while the reading needed it.
    pub(crate) fn read(day: &DayFile) -> Result<Snapshot, ReadError> {
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            let snapshot = Snapshot::read_once(day)?;
            if snapshot.agrees_with_any_writer(day) {
                return Ok(snapshot);
            }
            if let Some(snapshot) = Snapshot::read_without_writer(day)? {
                return Ok(snapshot);
            }
            if Instant::now() >= deadline {
                return Err(ReadError::Busy {
                    path: lock_path(&day.dir, &day.agent),
                    waited: LOCK_WAIT,
                });
            }
            thread::sleep(POLL);
        }
    }

    fn read_once(day: &DayFile) -> Result<Snapshot, ReadError> {
        let head = load_head(day)?;
        let (before, after) = day.neighbours().map_err(|source| ReadError::Io {
            path: day.dir.clone(),
            source,
        })?;
        let bytes = read_log_file(&day.path())?;
        let moved = anchor(&head) != anchor(&load_head(day)?);
        Ok(Snapshot {
            bytes,
            before,
            after,
            head,
            moved,
        })
    }

    /// The head anchor, if one was read.
    pub(crate) fn anchor(&self) -> Option<&Head> {
        anchor(&self.head)
    }

    /// Whether no writer's append, however it interleaved with the reading,
    /// can have made the files look other than they are.
    fn agrees_with_any_writer(&self, day: &DayFile) -> bool {
        self.after.is_some() || self.anchor().is_some_and(|h| h.file == day.file_name())
    }

    /// Reads `day` while no writer holds the lock; `None` if one does.
    fn read_without_writer(day: &DayFile) -> Result<Option<Snapshot>, ReadError> {
        let path = lock_path(&day.dir, &day.agent);
        let lock = match open_for_reading(&path) {
            Err(err) if err.is_not_found() => {
                let snapshot = Snapshot::read_once(day)?;
                return Ok((!exists(&path)).then_some(snapshot));
            }
            lock => lock?,
        };
        match lock.try_lock_shared() {
            // Released when `lock` is dropped, after the reading.
            Ok(()) => Snapshot::read_once(day).map(Some),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(source)) => Err(ReadError::Io { path, source }),
        }
    }
}

/// The head, or the reason it could not be read at all.
fn load_head(day: &DayFile) -> Result<LoadedHead, ReadError> {
    match Head::load(&day.dir, &day.agent) {
        Err(HeadError::Unreadable(err)) => Err(err),
        other => Ok(other),
    }
}

fn anchor(head: &LoadedHead) -> Option<&Head> {
    head.as_ref().ok().and_then(Option::as_ref).map(|h| &h.head)
}

fn exists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}
