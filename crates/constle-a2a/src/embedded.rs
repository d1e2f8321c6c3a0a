//! The embedded replay store: `<dir>/seen`, an append-only list of seen
//! ids, under an exclusive `flock` on `<dir>/lock`.
//!
//! Each line is `<until> <from> <msg_id>\n`, `until` in Unix seconds: the
//! id may be forgotten after it. Recording an id takes the lock, reads any
//! lines other listeners appended since this one last looked (each listener
//! caches what it has read, keyed by the file's inode), checks the id, then
//! appends its line and `fdatasync`s before answering: an id is durable
//! before its message is accepted.
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

use std::collections::HashMap;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use constle_lockfile::Failure;
use jiff::Timestamp;

use crate::envelope::MsgId;
use crate::replay::{ReplayError, Seen};

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

/// What this store has read of the file.
#[derive(Default)]
struct Cache {
    /// The (device, inode) read, if any.
    file: Option<(u64, u64)>,
    /// How many bytes of it.
    offset: u64,
    /// `<from> <msg_id>` → until (Unix seconds).
    seen: HashMap<String, i64>,
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
    /// Creates `dir` (0700, with its parents up to `home`) and reads its
    /// state once, so a corrupt store is reported at start.
    pub(crate) async fn open(home: PathBuf, dir: PathBuf) -> Result<Store, ReplayError> {
        let shared = blocking(&dir.clone(), move || {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(io_error(&dir, "create directory"))?;
            // New directory entries must survive a crash like the ids in them.
            let mut at = dir.as_path();
            while let Some(parent) = at.parent() {
                sync_dir(parent)?;
                if parent == home || parent.as_os_str().is_empty() {
                    break;
                }
                at = parent;
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
            if cache.seen.contains_key(&key) {
                return Ok(Seen::Before);
            }
            let path = shared.dir.join(SEEN);
            let line = format!("{until} {key}\n");
            file.write_all(line.as_bytes())
                .map_err(io_error(&path, "append"))?;
            file.sync_data().map_err(io_error(&path, "fdatasync"))?;
            cache.offset += line.len() as u64;
            cache.lines += 1;
            cache.seen.insert(key, until);
            if cache.lines >= cache.compact_at {
                compact(&shared.dir, cache, now)?;
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
        constle_lockfile::locked(LOCK_WAIT, move |claim| {
            let mut cache = shared.cache.lock().unwrap_or_else(|poisoned| {
                // A panic midway may have left the cache half updated:
                // forget it and reread the file.
                let mut cache = poisoned.into_inner();
                *cache = Cache::default();
                cache
            });
            let _held = claim
                .lock(&shared.lock)
                .map_err(io_error(&lock_path, "lock"))?;
            let done = work(&shared, &mut cache);
            if done.is_err() {
                // Whatever failed may have left the cache ahead of the
                // file: reread next time.
                *cache = Cache::default();
            }
            done
        })
        .await
        .map_err(|failure| match failure {
            Failure::TimedOut => ReplayError::LockTimeout {
                path: self.shared.dir.join(LOCK),
                waited: LOCK_WAIT,
            },
            Failure::Stopped(err) => stopped(&self.shared.dir, &err),
            Failure::Job(err) => err,
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

/// Opens `seen` for appending and brings the cache up to date with it.
/// Called with the lock held.
fn refresh(dir: &Path, cache: &mut Cache, now: Timestamp) -> Result<File, ReplayError> {
    let path = dir.join(SEEN);
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&path)
        .map_err(io_error(&path, "open"))?;
    let meta = file.metadata().map_err(io_error(&path, "stat"))?;
    if !meta.is_file() {
        return Err(ReplayError::Corrupt {
            path,
            reason: "not a regular file".to_owned(),
        });
    }
    let id = (meta.dev(), meta.ino());
    if cache.file != Some(id) || meta.len() < cache.offset {
        *cache = Cache {
            file: Some(id),
            ..Cache::default()
        };
        // A file this call may just have created must survive a crash.
        sync_dir(dir)?;
    }
    if meta.len() > cache.offset {
        let mut fresh = Vec::new();
        file.seek(SeekFrom::Start(cache.offset))
            .map_err(io_error(&path, "seek"))?;
        file.read_to_end(&mut fresh)
            .map_err(io_error(&path, "read"))?;
        let complete = fresh.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        if complete < fresh.len() {
            // A torn append from a crash: never acknowledged, cut it off.
            file.set_len(cache.offset + complete as u64)
                .map_err(io_error(&path, "truncate a torn line"))?;
            file.sync_data().map_err(io_error(&path, "fdatasync"))?;
        }
        let text = std::str::from_utf8(&fresh[..complete]).map_err(|_| ReplayError::Corrupt {
            path: path.clone(),
            reason: "not UTF-8".to_owned(),
        })?;
        for (n, line) in text.lines().enumerate() {
            let (until, key) = parse_line(line).ok_or_else(|| ReplayError::Corrupt {
                path: path.clone(),
                reason: format!(
                    "line {} after byte {} is not `<until> <did> <msg_id>`",
                    n + 1,
                    cache.offset
                ),
            })?;
            cache.seen.insert(key.to_owned(), until);
            cache.lines += 1;
        }
        cache.offset += complete as u64;
    }
    if cache.compact_at == 0 {
        cache.compact_at = COMPACT_MIN_LINES.max(2 * cache.lines);
    }
    if cache.lines >= cache.compact_at {
        compact(dir, cache, now)?;
        return refresh(dir, cache, now);
    }
    Ok(file)
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
    let now = now.as_second();
    cache.seen.retain(|_, until| *until >= now);
    let mut text = String::with_capacity(cache.seen.len() * 90);
    for (key, until) in &cache.seen {
        text.push_str(&format!("{until} {key}\n"));
    }
    let temp = dir.join(TEMP);
    let path = dir.join(SEEN);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&temp)
        .map_err(io_error(&temp, "create"))?;
    file.write_all(text.as_bytes())
        .map_err(io_error(&temp, "write"))?;
    file.sync_all().map_err(io_error(&temp, "fsync"))?;
    let meta = file.metadata().map_err(io_error(&temp, "stat"))?;
    drop(file);
    fs::rename(&temp, &path).map_err(io_error(&path, "rename into place"))?;
    sync_dir(dir)?;
    cache.file = Some((meta.dev(), meta.ino()));
    cache.offset = text.len() as u64;
    cache.lines = cache.seen.len();
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
}
