//! Appending to an agent's log, durably, from one place.
//!
//! Durability policy: an entry counts as written only once its line has been
//! `fdatasync`ed and the head anchor naming it has been replaced and synced.
//! Entries that arrive while a write is in flight are sealed and synced
//! together (group commit), so many concurrent producers share one sync.
//!
//! Several processes may append to one agent's log at once (two runs of the
//! same agent): every batch takes an exclusive lock on `<agent>.lock` and
//! continues the chain from the head anchor it reads under that lock.
//!
//! A crash can leave bytes after the head's length: a torn half-line, or
//! whole lines whose head update never happened. None of them was reported
//! written, so the next append cuts them off and records what it cut (size
//! and SHA-256) as an `audit_tail_discarded` entry. A log *shorter* than its
//! head has lost acknowledged entries; the writer then refuses to continue.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

use constle_identity::{Name, SigningIdentity};
use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;
use nix::fcntl::OFlag;
use tokio::sync::oneshot;

use crate::catalogue::AuditTailDiscarded;
use crate::entry::{Event, Header, LineHash, seal, utc_date};
use crate::head::Head;
use crate::layout::{DayFile, day_file_name, lock_path};

/// How many queued entries one sync may cover.
const MAX_BATCH: usize = 4096;

/// Where an entry ended up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Its sequence number in the agent's chain.
    pub seq: u64,
    /// The hash of its line, which the next entry links to.
    pub hash: LineHash,
    /// The day file holding it.
    pub path: PathBuf,
}

/// Why the log could not be written. Cloneable so that every entry of a
/// failed batch gets the same answer.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// A filesystem operation failed.
    #[error("audit log {path}: {message}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// What the operating system said.
        message: String,
    },
    /// Day files exist but the head anchor does not; continuing would hide a
    /// removed tail.
    #[error(
        "audit log in {dir} has day files for `{agent}` but no head anchor; run `constle audit verify` on them, then move them aside to start a new chain"
    )]
    AnchorMissing {
        /// The log directory.
        dir: PathBuf,
        /// The agent.
        agent: String,
    },
    /// The head anchor names a different agent or signer than this writer.
    #[error("audit log head {path} does not belong to this writer: {reason}")]
    AnchorMismatch {
        /// The head file.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// The log has fewer bytes than its head anchor says were written.
    #[error(
        "audit log {path} is shorter than its head anchor ({found} < {expected} bytes): acknowledged entries are missing; run `constle audit verify`"
    )]
    TailMissing {
        /// The day file.
        path: PathBuf,
        /// Bytes the head says were written.
        expected: u64,
        /// Bytes found.
        found: u64,
    },
    /// The writer thread is gone.
    #[error("the audit log writer has stopped")]
    Stopped,
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> AuditError + '_ {
    move |err| AuditError::Io {
        path: path.to_owned(),
        message: err.to_string(),
    }
}

/// Appends sealed entries to one agent's log. Use it directly for a batch at
/// a time, or through [`AuditLog`] to share it between producers.
pub struct Appender {
    dir: PathBuf,
    agent: Name,
    signer: Option<SigningIdentity>,
    clock: Box<dyn Fn() -> Timestamp + Send>,
}

impl Appender {
    /// Prepares to append to `agent`'s log in `dir` (created `0700` if
    /// missing), signing each entry when `signer` is given.
    pub fn new(
        dir: &Path,
        agent: Name,
        signer: Option<SigningIdentity>,
    ) -> Result<Appender, AuditError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_error(dir))?;
        Ok(Appender {
            dir: dir.to_owned(),
            agent,
            signer,
            clock: Box::new(Timestamp::now),
        })
    }

    /// Replaces the system clock, for tests and tools that must produce a log
    /// spanning several days.
    pub fn with_clock(mut self, clock: impl Fn() -> Timestamp + Send + 'static) -> Appender {
        self.clock = Box::new(clock);
        self
    }

    /// Seals and durably appends `events`, in order, timestamped now.
    pub fn append(&self, events: Vec<Event>) -> Result<Vec<Written>, AuditError> {
        let lock_path = lock_path(&self.dir, &self.agent);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path);
        let lock = lock.map_err(io_error(&lock_path))?;
        lock.lock().map_err(io_error(&lock_path))?;
        let (mut head, discarded) = self.current_head()?;
        let mut day: Option<OpenDay> = None;
        let mut written = Vec::with_capacity(events.len() + 1);
        for event in discarded.into_iter().chain(events) {
            let (ts, date) = entry_time((self.clock)(), head.as_ref());
            if day.as_ref().is_none_or(|d| d.file.date != date) {
                if let Some(done) = day.take() {
                    done.sync()?;
                }
                day = Some(OpenDay::open(&self.dir, &self.agent, date)?);
            }
            let day = day.as_mut().ok_or(AuditError::Stopped)?;
            let header = Header {
                seq: head.as_ref().map_or(0, |h| h.seq + 1),
                ts,
                agent: &self.agent,
                prev: head.as_ref().map(|h| h.hash),
            };
            let line = seal(&header, event, self.signer.as_ref());
            let hash = LineHash::of(&line);
            day.buffer.extend_from_slice(&line);
            day.buffer.push(b'\n');
            let start = head
                .as_ref()
                .map_or_else(|| day.file.file_name(), |h| h.start.clone());
            head = Some(Head {
                agent: self.agent.to_string(),
                start,
                did: self.signer.as_ref().map(|s| s.did().clone()),
                file: day.file.file_name(),
                len: day.len + day.buffer.len() as u64,
                seq: header.seq,
                hash,
            });
            written.push(Written {
                seq: header.seq,
                hash,
                path: day.file.path(),
            });
        }
        if let Some(done) = day {
            done.sync()?;
        }
        if let Some(head) = head {
            let path = crate::layout::head_path(&self.dir, &self.agent);
            head.store(&self.dir, &self.agent, self.signer.as_ref())
                .map_err(io_error(&path))?;
        }
        drop(lock);
        Ok(written)
    }

    /// Reads the head under the lock, cuts off any unacknowledged tail after
    /// it, and returns the head with an event recording what was cut.
    fn current_head(&self) -> Result<(Option<Head>, Option<Event>), AuditError> {
        let head_path = crate::layout::head_path(&self.dir, &self.agent);
        let mismatch = |reason: String| AuditError::AnchorMismatch {
            path: head_path.clone(),
            reason,
        };
        let loaded = Head::load(&self.dir, &self.agent).map_err(|err| mismatch(err.to_string()))?;
        let Some(head) = loaded.map(|signed| signed.head) else {
            return match self.has_day_files()? {
                true => Err(AuditError::AnchorMissing {
                    dir: self.dir.clone(),
                    agent: self.agent.to_string(),
                }),
                false => Ok((None, None)),
            };
        };
        if head.agent != self.agent.as_str() {
            return Err(mismatch(format!("it belongs to agent `{}`", head.agent)));
        }
        let signer = self.signer.as_ref().map(|s| s.did());
        if head.did.as_ref() != signer {
            let show = |did: Option<&constle_identity::DidKey>| {
                did.map_or("nobody (unsigned)".to_owned(), ToString::to_string)
            };
            return Err(mismatch(format!(
                "the chain is signed by {}, this writer signs as {}",
                show(head.did.as_ref()),
                show(signer)
            )));
        }
        let discarded = cut_unacknowledged_tail(&self.dir.join(&head.file), head.len)?;
        Ok((Some(head), discarded))
    }

    fn has_day_files(&self) -> Result<bool, AuditError> {
        let entries = fs::read_dir(&self.dir).map_err(io_error(&self.dir))?;
        Ok(entries
            .flatten()
            .any(|e| DayFile::from_path(&e.path()).is_some_and(|f| f.agent == self.agent)))
    }
}

/// The UTC time for the next entry, and the day file it goes in. A clock
/// that stepped back across midnight must not reopen an earlier day's file
/// behind the head, so such an entry is dated the head's day.
fn entry_time(now: Timestamp, head: Option<&Head>) -> (Timestamp, Date) {
    let date = utc_date(now);
    let head_date = head
        .and_then(|h| DayFile::from_path(Path::new(&h.file)))
        .map(|f| f.date);
    match head_date {
        Some(head_date) if head_date > date => {
            let start = head_date
                .to_zoned_datetime(TimeZone::UTC)
                .map(|z| z.timestamp())
                .unwrap_or(now);
            (start, head_date)
        }
        _ => (now, date),
    }
}

fn cut_unacknowledged_tail(path: &Path, acknowledged: u64) -> Result<Option<Event>, AuditError> {
    let mut file = open_regular(path, OpenOptions::new().read(true).write(true))?;
    let found = file.metadata().map_err(io_error(path))?.len();
    if found < acknowledged {
        return Err(AuditError::TailMissing {
            path: path.to_owned(),
            expected: acknowledged,
            found,
        });
    }
    if found == acknowledged {
        return Ok(None);
    }
    let mut tail = Vec::new();
    file.seek(SeekFrom::Start(acknowledged))
        .and_then(|_| file.read_to_end(&mut tail))
        .map_err(io_error(path))?;
    file.set_len(acknowledged)
        .and_then(|()| file.sync_data())
        .map_err(io_error(path))?;
    Ok(Some(
        AuditTailDiscarded {
            file: path.file_name().map(|n| n.to_string_lossy().into_owned()),
            bytes: tail.len(),
            sha256: LineHash::of(&tail).to_string(),
        }
        .into(),
    ))
}

/// Opens `path` with `options`, without blocking (a FIFO named like a day
/// file would otherwise stall the writer until someone reads it), and only
/// if it is a regular file.
fn open_regular(path: &Path, options: &mut OpenOptions) -> Result<File, AuditError> {
    let file = options
        .custom_flags(OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(io_error(path))?;
    match file.metadata().map_err(io_error(path))?.is_file() {
        true => Ok(file),
        false => Err(AuditError::Io {
            path: path.to_owned(),
            message: "not a regular file; only the log's own files are written".to_owned(),
        }),
    }
}

/// One day file opened for appending, with the lines not yet written.
struct OpenDay {
    file: DayFile,
    handle: File,
    len: u64,
    buffer: Vec<u8>,
}

impl OpenDay {
    fn open(dir: &Path, agent: &Name, date: Date) -> Result<OpenDay, AuditError> {
        let path = dir.join(day_file_name(agent, date));
        let handle = open_regular(
            &path,
            OpenOptions::new().create(true).append(true).mode(0o600),
        )?;
        let len = handle.metadata().map_err(io_error(&path))?.len();
        let file = DayFile {
            dir: dir.to_owned(),
            agent: agent.clone(),
            date,
        };
        Ok(OpenDay {
            file,
            handle,
            len,
            buffer: Vec::new(),
        })
    }

    fn sync(mut self) -> Result<(), AuditError> {
        let path = self.file.path();
        self.handle
            .write_all(&self.buffer)
            .and_then(|()| self.handle.sync_data())
            .map_err(io_error(&path))
    }
}

struct Request {
    event: Event,
    reply: oneshot::Sender<Result<Written, AuditError>>,
}

/// The log's single writer: a thread that owns an [`Appender`] and takes
/// events from any number of producers, group-committing what queues up.
pub struct AuditLog {
    sender: Option<mpsc::Sender<Request>>,
    worker: Option<thread::JoinHandle<()>>,
}

/// An entry on its way to disk.
pub struct Pending(oneshot::Receiver<Result<Written, AuditError>>);

impl Pending {
    /// Blocks until the entry is durable. Not for use inside an async task.
    pub fn wait(self) -> Result<Written, AuditError> {
        self.0.blocking_recv().unwrap_or(Err(AuditError::Stopped))
    }

    /// Waits, asynchronously, until the entry is durable.
    pub async fn written(self) -> Result<Written, AuditError> {
        self.0.await.unwrap_or(Err(AuditError::Stopped))
    }
}

impl AuditLog {
    /// Starts the writer thread.
    pub fn start(appender: Appender) -> AuditLog {
        let (sender, receiver) = mpsc::channel::<Request>();
        let worker = thread::Builder::new()
            .name("constle-audit".into())
            .spawn(move || serve(&appender, &receiver))
            .ok();
        AuditLog {
            sender: Some(sender),
            worker,
        }
    }

    /// Queues an event; the returned [`Pending`] resolves once it is durable.
    pub fn submit(&self, event: Event) -> Pending {
        let (reply, receiver) = oneshot::channel();
        if let Some(sender) = &self.sender {
            // A send error drops `reply`, and the receiver then reports Stopped.
            let _ = sender.send(Request { event, reply });
        }
        Pending(receiver)
    }

    /// Records an event and waits until it is durable.
    pub fn record(&self, event: Event) -> Result<Written, AuditError> {
        self.submit(event).wait()
    }

    /// Writes what is queued, then stops the writer thread.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.sender.take();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve(appender: &Appender, receiver: &mpsc::Receiver<Request>) {
    while let Ok(first) = receiver.recv() {
        let batch: Vec<Request> = std::iter::once(first)
            .chain(receiver.try_iter().take(MAX_BATCH - 1))
            .collect();
        let (events, replies): (Vec<Event>, Vec<_>) =
            batch.into_iter().map(|r| (r.event, r.reply)).unzip();
        match appender.append(events) {
            Ok(written) => {
                // A recovery entry may come first; the callers' entries are the last ones.
                let skip = written.len() - replies.len();
                for (reply, done) in replies.into_iter().zip(written.into_iter().skip(skip)) {
                    let _ = reply.send(Ok(done));
                }
            }
            Err(err) => {
                for reply in replies {
                    let _ = reply.send(Err(err.clone()));
                }
            }
        }
    }
}
