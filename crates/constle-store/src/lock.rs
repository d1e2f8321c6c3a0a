//! An exclusive `flock` taken on a blocking thread within a deadline that
//! is never overrun by a write, shared by the embedded spend ledger and the
//! embedded A2A replay store.
//!
//! Both stores let several processes share one directory by writing under
//! a `flock`. A lock held too long (a stopped process, a stalled disk) must
//! not stall their caller forever, but giving up is only safe if the write
//! it asked for cannot happen afterwards: a charge reported as failed, or a
//! message id reported as not recorded, must never be written later.
//!
//! [`locked`] runs a job on a blocking thread. The job takes the lock
//! through its [`Claim`], which then claims the work; the caller, once
//! [`locked`]'s wait is over, tries to claim the abandonment. One atomic
//! decides, so exactly one of them wins:
//!
//! - the caller: it gets [`LockFailure::TimedOut`], and the job, when it
//!   finally has the lock, gets an error instead and must write nothing;
//! - the job: it is already writing, so the caller waits for it past the
//!   deadline, and its result is the truth.
//!
//! Each store maps a [`LockFailure`] into its own error type, with its own
//! messages.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use crate::error::LockFailure;

const WAITING: u8 = 0;
const WORKING: u8 = 1;
const ABANDONED: u8 = 2;

/// The job's right to start work: [`Claim::lock`] takes the lock and, if
/// the caller is still waiting, claims the work for the job.
#[derive(Debug)]
pub struct Claim(Arc<AtomicU8>);

impl Claim {
    /// Takes an exclusive `flock` on `file`, blocking, then claims the work.
    /// The lock is released when the returned guard is dropped.
    ///
    /// # Errors
    ///
    /// The `flock` failed, or the caller stopped waiting
    /// ([`io::ErrorKind::TimedOut`]; the caller has already returned
    /// [`LockFailure::TimedOut`] and never sees this error). Either way the
    /// lock is not held and the job must write nothing.
    pub fn lock(self, file: &File) -> io::Result<Flock<'_>> {
        file.lock()?;
        let held = Flock(file);
        self.0
            .compare_exchange(WAITING, WORKING, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the caller stopped waiting"))?;
        Ok(held)
    }
}

/// An exclusive `flock` on a file, released on drop.
#[derive(Debug)]
pub struct Flock<'a>(&'a File);

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        // Closing the file would release it too; a store that keeps its
        // lock file open needs it released now.
        let _ = self.0.unlock();
    }
}

/// Runs `job` on a blocking thread and waits at most `wait` for it to take
/// its lock through [`Claim::lock`]; once it has, waits for its result
/// however long that takes.
///
/// The job must take the lock before it writes anything: only then is a
/// [`LockFailure::TimedOut`] a promise that nothing was or will be written.
///
/// # Errors
///
/// [`LockFailure`]: the wait ran out, the thread stopped, or the job failed.
pub async fn locked<T, E>(
    wait: Duration,
    job: impl FnOnce(Claim) -> Result<T, E> + Send + 'static,
) -> Result<T, LockFailure<E>>
where
    T: Send + 'static,
    E: Send + 'static,
{
    let claim = Arc::new(AtomicU8::new(WAITING));
    let job_claim = Claim(Arc::clone(&claim));
    let mut task = tokio::task::spawn_blocking(move || job(job_claim));
    let joined = match tokio::time::timeout(wait, &mut task).await {
        Ok(joined) => joined,
        Err(_) => {
            let gave_up = claim
                .compare_exchange(WAITING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if gave_up {
                return Err(LockFailure::TimedOut);
            }
            // It holds the lock and is writing: its result is the truth.
            task.await
        }
    };
    joined
        .map_err(LockFailure::Stopped)?
        .map_err(LockFailure::Job)
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::path::Path;
    use std::time::Instant;

    use super::*;

    fn open(path: &Path) -> File {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .append(true)
            .open(path)
            .unwrap()
    }

    /// Holds the lock on `lock` from another open file description, as
    /// another process would.
    fn hold(lock: &Path) -> File {
        let file = open(lock);
        file.lock().unwrap();
        file
    }

    #[tokio::test]
    async fn a_caller_that_gave_up_never_gets_a_late_write() {
        let dir = tempfile::tempdir().unwrap();
        let (lock, data) = (dir.path().join("lock"), dir.path().join("data"));
        let other = hold(&lock);
        let (done, finished) = tokio::sync::oneshot::channel();
        let (job_lock, job_data) = (lock.clone(), data.clone());
        let result = locked(Duration::from_millis(50), move |claim| {
            let file = open(&job_lock);
            let written = claim.lock(&file).and_then(|_held| {
                use std::io::Write as _;
                open(&job_data).write_all(b"late\n")
            });
            let _ = done.send(written.is_ok());
            written
        })
        .await;
        assert!(matches!(result, Err(LockFailure::TimedOut)), "{result:?}");
        // The other holder lets go: the job gets the lock, and must not write.
        drop(other);
        assert!(!finished.await.unwrap(), "the job wrote after the deadline");
        assert!(!data.exists());
        // Its lock was released too.
        drop(hold(&lock));
    }

    #[tokio::test]
    async fn the_wait_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("lock");
        let _other = hold(&lock);
        let wait = Duration::from_millis(200);
        let started = Instant::now();
        let result = locked(wait, move |claim| claim.lock(&open(&lock)).map(drop)).await;
        let waited = started.elapsed();
        assert!(matches!(result, Err(LockFailure::TimedOut)), "{result:?}");
        assert!(waited >= wait, "{waited:?}");
        assert!(waited < wait * 10, "{waited:?}");
    }

    #[tokio::test]
    async fn work_that_started_in_time_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("lock");
        let wait = Duration::from_secs(1);
        let past_the_deadline = Instant::now() + wait + Duration::from_millis(200);
        let result = locked(wait, move |claim| {
            let file = open(&lock);
            let _held = claim.lock(&file)?;
            std::thread::sleep(past_the_deadline.saturating_duration_since(Instant::now()));
            Ok::<_, io::Error>(42)
        })
        .await;
        assert_eq!(result.unwrap(), 42);
    }

    #[tokio::test]
    async fn the_jobs_error_and_a_panic_are_reported() {
        let result = locked(Duration::from_secs(5), |_claim| Err::<(), _>("no"));
        assert!(matches!(result.await, Err(LockFailure::Job("no"))));
        let result = locked(Duration::from_secs(5), |_claim| -> Result<(), ()> {
            panic!("the job panicked")
        });
        assert!(matches!(result.await, Err(LockFailure::Stopped(_))));
    }
}
