//! What a replay store answers: whether an id was new, or why it could not
//! say.

use std::path::PathBuf;
use std::time::Duration;

use constle_store::RedisFailure;

use crate::envelope::CLOCK_SKEW;

/// How long after the clock-skew window an id is still kept, for clocks
/// stepped backwards.
pub const REPLAY_MARGIN: Duration = Duration::from_secs(60);

/// Why the replay store could not answer. The listener refuses with 503.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// A file or directory could not be created, read, written or synced.
    #[error("replay store {path}: {message}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// The seen-ids file holds something this version did not write.
    #[error(
        "replay store {path} is corrupt ({reason}); refusing all messages until an operator repairs or removes it (removing it allows replays of messages from the last few minutes)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The store's directory exists but its seen-ids file does not. The
    /// directory is only ever created with the file in it, so the file was
    /// removed, and the ids it held cannot be known.
    #[error(
        "replay store {path} is missing although its directory exists: it was removed, and the ids it held cannot be known; refusing all messages. Stop every listener of this identity, wait {} minutes (the longest an id is kept), then create it empty",
        LONGEST_KEPT.as_secs() / 60
    )]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The seen-ids file shrank or vanished while the store was using it,
    /// or was replaced by one that lacks ids the store knows are still
    /// inside their window. The store writes those ids back; the message at
    /// hand is refused.
    #[error("replay store {path} {change} while in use; {}", restoration(*.missing, .not_restored.as_deref()))]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What happened to it.
        change: String,
        /// How many ids still inside their window it lacked.
        missing: usize,
        /// Why they could not be written back, if they could not.
        not_restored: Option<String>,
    },
    /// Another listener held the store's lock too long.
    #[error("replay store {path}: its lock was held for more than {waited:?}")]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long this listener waited.
        waited: Duration,
    },
    /// The Redis URL is not usable.
    #[error("replay store {url}: not a usable Redis URL: {message}")]
    BadUrl {
        /// The URL, without credentials.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// Redis answered with an error, or the connection failed.
    #[error("replay store {url}: {message}")]
    Redis {
        /// The URL, without credentials.
        url: String,
        /// What failed.
        message: String,
    },
    /// Redis did not answer in time.
    #[error("replay store {url}: no answer within {after:?}")]
    Timeout {
        /// The URL, without credentials.
        url: String,
        /// The bound.
        after: Duration,
    },
}

/// The longest an id is kept: an envelope issued [`CLOCK_SKEW`] ahead of
/// the listener's clock, remembered until its issue time plus the skew and
/// [`REPLAY_MARGIN`].
const LONGEST_KEPT: Duration =
    Duration::from_secs(2 * CLOCK_SKEW.as_secs() + REPLAY_MARGIN.as_secs());

fn restoration(missing: usize, not_restored: Option<&str>) -> String {
    match (missing, not_restored) {
        (0, None) => {
            "no id still inside its window was lost; this message was refused and may be resent"
                .to_owned()
        }
        (n, None) => format!(
            "the {n} ids still inside their window it lacked were written back; this message was refused and may be resent"
        ),
        (n, Some(err)) => format!(
            "{n} ids still inside their window are missing and could not be written back ({err}); refusing all messages until they are"
        ),
    }
}

impl From<RedisFailure> for ReplayError {
    fn from(failure: RedisFailure) -> Self {
        match failure {
            RedisFailure::BadUrl { url, message } => ReplayError::BadUrl { url, message },
            RedisFailure::Redis { url, message } => ReplayError::Redis { url, message },
            RedisFailure::Timeout { url, after } => ReplayError::Timeout { url, after },
            other => ReplayError::Redis {
                url: other.url().to_owned(),
                message: other.to_string(),
            },
        }
    }
}

/// Whether an id was new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Seen {
    /// First time: it is now recorded durably.
    New,
    /// Recorded before: a replay.
    Before,
    /// Claimed by another attempt (Redis store) that has not settled yet:
    /// it may still be delivered, or abandoned. Not recorded for this one.
    InFlight,
}
