//! The embedded replay store: `<dir>/seen`, an append-only list of seen
//! ids, under an exclusive `flock` on `<dir>/lock`.
//!
//! Each line is `<until> <from> <msg_id>\n`, `until` in Unix seconds: the
//! id may be forgotten after it. Recording an id takes the lock, reads any
//! lines other listeners appended since this one last looked (each listener
//! caches what it has read, keyed by the file's inode), checks the id, then
//! appends its line and `fdatasync`s before answering: an id is durable
//! before its message is accepted. If the append fails, it is cut off again
//! before the refusal is answered: a sender told "not recorded" must find
//! its resend accepted.
//!
//! The lock file is never renamed, so every process locks the same inode;
//! each store opens its own description, so two listeners in one process
//! exclude each other too, and one store's callers are serialized by a
//! mutex before they take the lock.
//!
//! A crash mid-append leaves a line without its newline: that id was never
//! acknowledged, and the next writer (holding the lock) cuts it off. A line
//! that is not in the format is corruption, and every message is refused
//! until an operator looks.
//!
//! Pruning: when the file holds more than twice as many lines as were live
//! at the last rewrite (and at least [`COMPACT_MIN_LINES`]), the live ones
//! are written to `seen.tmp`, fsynced and renamed over `seen`, and the
//! directory is fsynced. Other listeners see a new inode and reread.
//!
//! Nothing else makes the file lose an id, so a store never trusts a file
//! that did:
//!
//! - The directory is created whole: `seen` and `lock` are made in a
//!   temporary directory that is then renamed into place. So `seen` is
//!   expected wherever the directory holds anything, and a directory
//!   without it is refused ([`ReplayError::Missing`]): it was removed, and
//!   what it held cannot be known. A directory that holds nothing (a
//!   volume mounted at the store's path, which cannot be renamed over) is
//!   a new store, as an absent one is: it gets an empty `seen` in place.
//! - Each store keeps every id it has read or written until the id's
//!   `until`, whatever happens to the file. A file that shrank or vanished,
//!   or a new one (another listener's rewrite) that lacks an id still inside
//!   its window, is damage ([`ReplayError::Damaged`]): the message at hand
//!   is refused, and the ids it lacks are written back.

use std::collections::HashMap;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use constle_store::LockFailure;
use constle_store::replace::replace_via;
use jiff::Timestamp;

use crate::envelope::MsgId;
use crate::seen::{ReplayError, Seen};

const SEEN: &str = "seen";
const TEMP: &str = "seen.tmp";
const LOCK: &str = "lock";
/// How long a listener waits for another's lock.
const LOCK_WAIT: Duration = Duration::from_secs(5);
/// The file is never rewritten while it has fewer lines than this.
pub(crate) const COMPACT_MIN_LINES: usize = 4096;

fn io_error<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(io::Error) -> ReplayError + 'a {
    move |err| ReplayError::Io {
        path: path.to_owned(),
        message: format!("{what}: {err}"),
    }
}

/// How far a store has read `seen`.
#[derive(Clone, Copy)]
struct Position {
    /// The (device, inode) read.
    file: (u64, u64),
    /// How many bytes of it.
    offset: u64,
}

/// What this store knows of the ids.
#[derive(Default)]
struct Cache {
    /// Every id this store has read or written, `<from> <msg_id>` → until
    /// (Unix seconds). Kept through errors and rereads; an id leaves only
    /// when it has expired, at a rewrite.
    known: HashMap<String, i64>,
    /// How far the file has been read; `None` until it is read from the
    /// start again (at open, and after any error).
    read: Option<Position>,
    /// Whether the file has been read at all: from then on, its absence is
    /// damage rather than an unknown past.
    found: bool,
    /// Lines in the file (live or not).
    lines: usize,
    /// Lines at which to consider a rewrite.
    compact_at: usize,
}

struct Shared {
    dir: PathBuf,
    lock: File,
    cache: Mutex<Cache>,
}

/// One identity's directory.
pub(crate) struct Store {
    shared: Arc<Shared>,
}

impl Store {
    /// Creates `dir` whole if it does not exist (0700, with its parents up
    /// to `home`) and reads its state once, so a damaged store is reported
    /// at start.
    pub(crate) async fn open(home: PathBuf, dir: PathBuf) -> Result<Store, ReplayError> {
        let shared = blocking(&dir.clone(), move || {
            if !dir.is_dir() {
                create_whole(&home, &dir)?;
            } else if is_empty(&dir)? {
                fill_in_place(&dir)?;
            }
            let lock_path = dir.join(LOCK);
            let lock = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&lock_path)
                .map_err(io_error(&lock_path, "open lock file"))?;
            Ok(Shared {
                dir,
                lock,
                cache: Mutex::new(Cache::default()),
            })
        })
        .await?;
        let store = Store {
            shared: Arc::new(shared),
        };
        store
            .locked(|shared, cache| refresh(&shared.dir, cache, Timestamp::now()).map(drop))
            .await?;
        Ok(store)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.shared.dir
    }

    pub(crate) async fn remember(
        &self,
        from: &str,
        msg_id: &str,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<Seen, ReplayError> {
        let key = format!("{from} {msg_id}");
        let until = until.as_second();
        self.locked(move |shared, cache| {
            let mut file = refresh(&shared.dir, cache, now)?;
            if cache.known.contains_key(&key) {
                return Ok(Seen::Before);
            }
            let line = format!("{until} {key}\n");
            append(&mut file, &shared.dir.join(SEEN), cache, line.as_bytes())?;
            cache.known.insert(key, until);
            if cache.lines >= cache.compact_at {
                // The id is durable and the message will be accepted: a
                // failed rewrite must not turn that into a refusal. The
                // next call's refresh tries again, and fails closed before
                // recording anything.
                let _ = compact(&shared.dir, cache, now);
            }
            Ok(Seen::New)
        })
        .await
    }

    /// Runs `work` on a blocking thread holding the mutex and the `flock`,
    /// giving up after [`LOCK_WAIT`] without ever running it late: an id
    /// the caller was told could not be recorded must not be recorded
    /// afterwards (the sender's retry would then be refused as a replay).
    async fn locked<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Shared, &mut Cache) -> Result<T, ReplayError> + Send + 'static,
    ) -> Result<T, ReplayError> {
        let shared = Arc::clone(&self.shared);
        let lock_path = self.shared.dir.join(LOCK);
        constle_store::lock::locked(LOCK_WAIT, move |claim| {
            let mut cache = shared.cache.lock().unwrap_or_else(|poisoned| {
                // A panic midway may have left the position wrong: reread
                // the file, still holding it to every id known.
                let mut cache = poisoned.into_inner();
                cache.read = None;
                cache
            });
            let _held = claim
                .lock(&shared.lock)
                .map_err(io_error(&lock_path, "lock"))?;
            let done = work(&shared, &mut cache);
            if done.is_err() {
                // Whatever failed may have left the position ahead of the
                // file: reread it next time (the ids stay known).
                cache.read = None;
            }
            done
        })
        .await
        .map_err(|failure| match failure {
            LockFailure::TimedOut => ReplayError::LockTimeout {
                path: self.shared.dir.join(LOCK),
                waited: LOCK_WAIT,
            },
            LockFailure::Stopped(err) => stopped(&self.shared.dir, &err),
            LockFailure::Job(err) => err,
        })
    }
}

async fn blocking<T: Send + 'static>(
    dir: &Path,
    work: impl FnOnce() -> Result<T, ReplayError> + Send + 'static,
) -> Result<T, ReplayError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| stopped(dir, &err))?
}

fn stopped(path: &Path, err: &tokio::task::JoinError) -> ReplayError {
    ReplayError::Io {
        path: path.to_owned(),
        message: format!("the replay store's worker thread stopped: {err}"),
    }
}

/// Creates `dir` with an empty `seen` and a `lock` in it, all at once: they
/// are made in a temporary directory beside it, which is renamed into
/// place. If another listener got there first, its directory is used.
fn create_whole(home: &Path, dir: &Path) -> Result<(), ReplayError> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(ReplayError::Io {
            path: dir.to_owned(),
            message: "not a directory below $CONSTLE_HOME".to_owned(),
        });
    };
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(io_error(parent, "create directory"))?;
    // New directory entries must survive a crash like the ids in them.
    for ancestor in parent.ancestors().filter(|a| !a.as_os_str().is_empty()) {
        sync_dir(ancestor)?;
        if ancestor == home {
            break;
        }
    }
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|err| ReplayError::Io {
        path: dir.to_owned(),
        message: format!("no random bytes for a temporary name: {err}"),
    })?;
    let temp = parent.join(format!(
        ".{}.new-{}",
        name.to_string_lossy(),
        hex::encode(suffix)
    ));
    let made = fill_new_store(&temp).and_then(|()| match fs::rename(&temp, dir) {
        Ok(()) => sync_dir(parent),
        // Another listener's directory is in place: use it.
        Err(err)
            if matches!(
                err.kind(),
                io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::AlreadyExists
            ) =>
        {
            Ok(())
        }
        Err(err) => Err(io_error(dir, "rename into place")(err)),
    });
    // Left only if another listener won, or something failed.
    let _ = fs::remove_dir_all(&temp);
    made
}

/// Whether `dir` holds no entry at all: a volume mounted there new (it
/// cannot be renamed over), or a directory made for the store.
fn is_empty(dir: &Path) -> Result<bool, ReplayError> {
    let mut entries = fs::read_dir(dir).map_err(io_error(dir, "read directory"))?;
    Ok(entries.next().is_none())
}

/// Makes an empty `seen` in the empty directory `dir`. Emptied, a store
/// is no more than a removed one, which is made anew too; what is refused
/// is a directory the store was in that lost `seen`, since its `lock`
/// stays. If another listener made `seen` first, its file is used.
fn fill_in_place(dir: &Path) -> Result<(), ReplayError> {
    let path = dir.join(SEEN);
    let made = OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .and_then(|file| file.sync_all());
    match made {
        Ok(()) => sync_dir(dir),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(io_error(&path, "create")(err)),
    }
}

fn fill_new_store(temp: &Path) -> Result<(), ReplayError> {
    DirBuilder::new()
        .mode(0o700)
        .create(temp)
        .map_err(io_error(temp, "create directory"))?;
    for name in [SEEN, LOCK] {
        let path = temp.join(name);
        OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&path)
            .and_then(|file| file.sync_all())
            .map_err(io_error(&path, "create"))?;
    }
    sync_dir(temp)
}

/// Opens `seen` for appending and brings the cache up to date with it.
/// Called with the lock held.
fn refresh(dir: &Path, cache: &mut Cache, now: Timestamp) -> Result<File, ReplayError> {
    let path = dir.join(SEEN);
    let mut file = match OpenOptions::new().read(true).append(true).open(&path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Err(match cache.found {
                false => ReplayError::Missing { path },
                true => recreate(dir, cache, now),
            });
        }
        Err(err) => return Err(io_error(&path, "open")(err)),
    };
    let meta = file.metadata().map_err(io_error(&path, "stat"))?;
    if !meta.is_file() {
        return Err(ReplayError::Corrupt {
            path,
            reason: "not a regular file".to_owned(),
        });
    }
    let id = (meta.dev(), meta.ino());
    match cache.read {
        Some(read) if read.file == id && meta.len() >= read.offset => {
            let (ids, end) = read_from(&mut file, &path, read.offset)?;
            cache.lines += ids.len();
            cache.known.extend(ids);
            cache.read = Some(Position {
                file: id,
                offset: end,
            });
        }
        previous => {
            let change = match previous {
                Some(read) if read.file == id => Some(format!(
                    "shrank from {} to {} bytes",
                    read.offset,
                    meta.len()
                )),
                _ => None,
            };
            reread(&mut file, &path, id, cache, now, change)?;
        }
    }
    cache.found = true;
    if cache.compact_at == 0 {
        cache.compact_at = COMPACT_MIN_LINES.max(2 * cache.lines);
    }
    if cache.lines >= cache.compact_at {
        compact(dir, cache, now)?;
        return refresh(dir, cache, now);
    }
    Ok(file)
}

/// Reads the whole file (another listener's rewrite, or the first read)
/// and checks it still holds every id known to be inside its window. If it
/// does not, or `change` says it shrank, the missing ids are written back
/// and the damage is the error.
fn reread(
    file: &mut File,
    path: &Path,
    id: (u64, u64),
    cache: &mut Cache,
    now: Timestamp,
    change: Option<String>,
) -> Result<(), ReplayError> {
    let (ids, end) = read_from(file, path, 0)?;
    cache.lines = ids.len();
    let ids: HashMap<String, i64> = ids.into_iter().collect();
    let missing = live_lines(&cache.known, now, |key| !ids.contains_key(key));
    cache.known.extend(ids);
    cache.read = Some(Position {
        file: id,
        offset: end,
    });
    let change = match (change, missing.is_empty()) {
        (None, true) => return Ok(()),
        (Some(change), _) => change,
        (None, false) => "lacks ids this listener recorded".to_owned(),
    };
    let restored = append(file, path, cache, missing.as_bytes());
    Err(damaged(path, change, &missing, restored))
}

/// `seen` vanished: makes it again, with every id known to be inside its
/// window, and returns the damage.
fn recreate(dir: &Path, cache: &mut Cache, now: Timestamp) -> ReplayError {
    let path = dir.join(SEEN);
    let missing = live_lines(&cache.known, now, |_| true);
    let restored = OpenOptions::new()
        .create_new(true)
        .read(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .map_err(io_error(&path, "create"))
        .and_then(|mut file| {
            let meta = file.metadata().map_err(io_error(&path, "stat"))?;
            cache.read = Some(Position {
                file: (meta.dev(), meta.ino()),
                offset: 0,
            });
            cache.lines = 0;
            append(&mut file, &path, cache, missing.as_bytes())?;
            sync_dir(dir)
        });
    damaged(&path, "vanished".to_owned(), &missing, restored)
}

fn damaged(
    path: &Path,
    change: String,
    missing: &str,
    restored: Result<(), ReplayError>,
) -> ReplayError {
    ReplayError::Damaged {
        path: path.to_owned(),
        change,
        missing: missing.lines().count(),
        not_restored: restored.err().map(|err| err.to_string()),
    }
}

/// The lines of the ids in `known` still inside their window at `now` for
/// which `wanted` holds.
fn live_lines(
    known: &HashMap<String, i64>,
    now: Timestamp,
    wanted: impl Fn(&str) -> bool,
) -> String {
    let now = now.as_second();
    known
        .iter()
        .filter(|(key, until)| **until >= now && wanted(key))
        .map(|(key, until)| format!("{until} {key}\n"))
        .collect()
}

/// Appends `lines` and syncs them, at the end the cache has read to. If
/// that fails, cuts them off again: the caller is about to answer that
/// nothing was recorded, and a resend must then not be refused as a
/// replay.
fn append(
    file: &mut File,
    path: &Path,
    cache: &mut Cache,
    lines: &[u8],
) -> Result<(), ReplayError> {
    let Some(read) = cache.read.as_mut() else {
        return Err(ReplayError::Io {
            path: path.to_owned(),
            message: "append before the file was read".to_owned(),
        });
    };
    if lines.is_empty() {
        return Ok(());
    }
    let written = file.write_all(lines).and_then(|()| file.sync_data());
    if let Err(err) = written {
        let undone = file.set_len(read.offset).and_then(|()| file.sync_data());
        return Err(ReplayError::Io {
            path: path.to_owned(),
            message: match undone {
                Ok(()) => format!("append: {err}"),
                Err(undo) => format!(
                    "append: {err}; cutting it off again failed too ({undo}), so a resend may be refused as a replay"
                ),
            },
        });
    }
    read.offset += lines.len() as u64;
    cache.lines += lines.iter().filter(|b| **b == b'\n').count();
    Ok(())
}

/// Reads the lines from `start` to the end, cutting off a torn last line;
/// returns them and where the complete ones end.
fn read_from(
    file: &mut File,
    path: &Path,
    start: u64,
) -> Result<(Vec<(String, i64)>, u64), ReplayError> {
    let mut fresh = Vec::new();
    file.seek(SeekFrom::Start(start))
        .map_err(io_error(path, "seek"))?;
    file.read_to_end(&mut fresh)
        .map_err(io_error(path, "read"))?;
    let complete = fresh.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if complete < fresh.len() {
        // A torn append from a crash: never acknowledged, cut it off.
        file.set_len(start + complete as u64)
            .map_err(io_error(path, "truncate a torn line"))?;
        file.sync_data().map_err(io_error(path, "fdatasync"))?;
    }
    let text = std::str::from_utf8(&fresh[..complete]).map_err(|_| ReplayError::Corrupt {
        path: path.to_owned(),
        reason: "not UTF-8".to_owned(),
    })?;
    let ids = text
        .lines()
        .enumerate()
        .map(|(n, line)| {
            parse_line(line)
                .map(|(until, key)| (key.to_owned(), until))
                .ok_or_else(|| ReplayError::Corrupt {
                    path: path.to_owned(),
                    reason: format!(
                        "line {} after byte {start} is not `<until> <did> <msg_id>`",
                        n + 1
                    ),
                })
        })
        .collect::<Result<_, _>>()?;
    Ok((ids, start + complete as u64))
}

fn parse_line(line: &str) -> Option<(i64, &str)> {
    let (until, key) = line.split_once(' ')?;
    let (from, msg_id) = key.split_once(' ')?;
    let until: i64 = until.parse().ok()?;
    let did_ok = from.starts_with("did:key:z")
        && from.len() <= constle_identity::MAX_DID_LEN
        && from.bytes().all(|b| b.is_ascii_alphanumeric() || b == b':');
    (did_ok && MsgId::parse(msg_id).is_some()).then_some((until, key))
}

/// Rewrites `seen` with only the ids still to be remembered at `now`.
fn compact(dir: &Path, cache: &mut Cache, now: Timestamp) -> Result<(), ReplayError> {
    let now_s = now.as_second();
    cache.known.retain(|_, until| *until >= now_s);
    let text = live_lines(&cache.known, now, |_| true);
    let path = dir.join(SEEN);
    let file = replace_via(&path, TEMP, text.as_bytes(), 0o600).map_err(|err| {
        let (step, path, source) = err.into_parts();
        io_error(&path, step)(source)
    })?;
    let meta = file.metadata().map_err(io_error(&path, "stat"))?;
    cache.read = Some(Position {
        file: (meta.dev(), meta.ino()),
        offset: text.len() as u64,
    });
    cache.lines = cache.known.len();
    cache.compact_at = COMPACT_MIN_LINES.max(2 * cache.lines);
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), ReplayError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir, "fsync directory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp";

    fn id(n: u8) -> String {
        hex::encode([n; 16])
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[tokio::test]
    async fn remembers_across_reopen_and_prunes_after_until() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("a2a/replay/x");
        let store = Store::open(home.path().to_owned(), dir.clone())
            .await
            .unwrap();
        let now = at(1_000_000);
        assert_eq!(
            store.remember(A, &id(1), at(1_000_360), now).await.unwrap(),
            Seen::New
        );
        assert_eq!(
            store.remember(A, &id(1), at(1_000_360), now).await.unwrap(),
            Seen::Before
        );
        // Another listener, open while this one rewrites the file.
        let watcher = Store::open(home.path().to_owned(), dir.clone())
            .await
            .unwrap();
        drop(store);
        let store = Store::open(home.path().to_owned(), dir.clone())
            .await
            .unwrap();
        assert_eq!(
            store.remember(A, &id(1), at(1_000_360), now).await.unwrap(),
            Seen::Before
        );
        // Enough lines to rewrite, long after the first id's `until`.
        let later = at(2_000_000);
        for n in 0..COMPACT_MIN_LINES {
            let key = hex::encode((n as u128).to_be_bytes());
            store.remember(A, &key, at(2_000_360), later).await.unwrap();
        }
        let text = fs::read_to_string(dir.join(SEEN)).unwrap();
        assert!(!text.contains(&id(1)), "the expired id was pruned");
        assert!(text.lines().count() < COMPACT_MIN_LINES + 2);
        // The rewrite dropped only expired ids: no damage for the watcher.
        let key = hex::encode(9u128.to_be_bytes());
        assert_eq!(
            watcher
                .remember(A, &key, at(2_000_360), later)
                .await
                .unwrap(),
            Seen::Before
        );
        // Still every live id, also for a fresh reader.
        let other = Store::open(home.path().to_owned(), dir.clone())
            .await
            .unwrap();
        let key = hex::encode(7u128.to_be_bytes());
        assert_eq!(
            other.remember(A, &key, at(2_000_360), later).await.unwrap(),
            Seen::Before
        );
    }

    #[tokio::test]
    async fn an_empty_directory_is_a_new_store_and_one_that_lost_seen_is_refused() {
        let home = tempfile::tempdir().unwrap();
        // A volume mounted at the store's path: there, and empty.
        let dir = home.path().join("a2a/replay/x");
        fs::create_dir_all(&dir).unwrap();
        let store = Store::open(home.path().to_owned(), dir.clone())
            .await
            .unwrap();
        let now = at(1_000_000);
        assert_eq!(
            store.remember(A, &id(1), at(1_000_360), now).await.unwrap(),
            Seen::New
        );
        drop(store);
        // Its `seen` removed later: the lock is left, and it is refused.
        fs::remove_file(dir.join(SEEN)).unwrap();
        let reopened = Store::open(home.path().to_owned(), dir.clone()).await;
        assert!(matches!(reopened, Err(ReplayError::Missing { .. })));
    }

    #[tokio::test]
    async fn a_torn_line_is_cut_and_garbage_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("r");
        let store = Store::open(home.path().to_owned(), dir.clone())
            .await
            .unwrap();
        let now = at(1_000_000);
        store.remember(A, &id(1), at(1_000_360), now).await.unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.join(SEEN))
            .unwrap();
        f.write_all(b"1000360 did:key:z6Mk").unwrap();
        let fresh = Store::open(home.path().to_owned(), dir.clone())
            .await
            .unwrap();
        assert_eq!(
            fresh.remember(A, &id(2), at(1_000_360), now).await.unwrap(),
            Seen::New
        );
        assert_eq!(
            store.remember(A, &id(2), at(1_000_360), now).await.unwrap(),
            Seen::Before
        );
        f.write_all(b"nonsense\n").unwrap();
        assert!(matches!(
            store.remember(A, &id(3), at(1_000_360), now).await,
            Err(ReplayError::Corrupt { .. })
        ));
    }

    #[tokio::test]
    async fn an_id_recorded_before_a_failed_rewrite_is_accepted_once() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("r");
        let store = Store::open(home.path().to_owned(), dir.clone())
            .await
            .unwrap();
        let (now, until) = (at(1_000_000), at(1_000_360));
        for n in 0..COMPACT_MIN_LINES - 1 {
            let key = hex::encode((n as u128).to_be_bytes());
            store.remember(A, &key, until, now).await.unwrap();
        }
        // The rewrite the next record sets off cannot make its temp file.
        fs::create_dir(dir.join(TEMP)).unwrap();
        assert_eq!(
            store.remember(A, &id(0xee), until, now).await.unwrap(),
            Seen::New,
            "recorded, so accepted"
        );
        // The next one tries the rewrite first, and records nothing.
        assert!(matches!(
            store.remember(A, &id(0xef), until, now).await,
            Err(ReplayError::Io { .. })
        ));
        fs::remove_dir(dir.join(TEMP)).unwrap();
        assert_eq!(
            store.remember(A, &id(0xef), until, now).await.unwrap(),
            Seen::New
        );
        assert_eq!(
            store.remember(A, &id(0xee), until, now).await.unwrap(),
            Seen::Before
        );
    }
}
