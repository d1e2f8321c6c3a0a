//! The replay store: which message ids a listener has already accepted.
//!
//! Two implementations behind one type, [`ReplayStore`]:
//!
//! - embedded (the default): an append-only file under
//!   `$CONSTLE_HOME/a2a/replay/<did>/`, shared by every listener of that
//!   identity on this machine (see the `embedded` module);
//! - Redis (`a2a.replay: redis://…`): one key per message, claimed,
//!   then accepted or abandoned by one Lua script, shared by every machine
//!   listening as that identity (see the `redis_store` module).
//!
//! An id is remembered until its envelope would be refused as too old
//! anyway ([`VerifiedEnvelope::remember_until`]) and may be forgotten after.
//! Ids are kept per sender (`<from> <msg_id>`), so one peer cannot use up
//! another's ids. Any failure to read or write is a [`ReplayError`], which
//! the listener answers with a retryable 503: it never accepts a message it
//! could not record.

use std::path::Path;

use constle_identity::DidKey;
use jiff::Timestamp;

use crate::VerifiedEnvelope;
use crate::embedded;
use crate::redis_store;
use crate::seen::{ReplayError, Seen};

enum Inner {
    Embedded(embedded::Store),
    Redis(redis_store::Store),
}

/// The seen message ids of one listening identity.
pub struct ReplayStore(Inner);

impl std::fmt::Debug for ReplayStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReplayStore({})", self.describe())
    }
}

impl ReplayStore {
    /// The embedded store of `listener` under `home` (`$CONSTLE_HOME`):
    /// `home/a2a/replay/<did>/`, created 0700 if needed.
    ///
    /// # Errors
    ///
    /// [`ReplayError`] if the directory cannot be created or its state read.
    pub async fn embedded(home: &Path, listener: &DidKey) -> Result<ReplayStore, ReplayError> {
        let dir = home.join("a2a").join("replay").join(listener.as_str());
        Ok(ReplayStore(Inner::Embedded(
            embedded::Store::open(home.to_owned(), dir).await?,
        )))
    }

    /// The Redis store of `listener` at `url` (`redis://`, `rediss://`,
    /// `redis+unix://`). Connects and pings before returning.
    ///
    /// # Errors
    ///
    /// [`ReplayError`] if the URL is unusable or the server does not answer.
    pub async fn redis(url: &str, listener: &DidKey) -> Result<ReplayStore, ReplayError> {
        Ok(ReplayStore(Inner::Redis(
            redis_store::Store::open(url, listener).await?,
        )))
    }

    /// Where the ids are kept: a directory, or a Redis URL without
    /// credentials.
    pub fn describe(&self) -> String {
        match &self.0 {
            Inner::Embedded(store) => store.dir().display().to_string(),
            Inner::Redis(store) => store.url().to_owned(),
        }
    }

    /// Records `envelope`'s id (for its sender) unless it was recorded
    /// before. [`Seen::New`] is returned only once the record is durable
    /// (fsynced, or acknowledged by Redis); the caller then owns the id and
    /// must deliver the message.
    ///
    /// # Errors
    ///
    /// [`ReplayError`] if the store cannot be read or written in time. The
    /// id is then not recorded: a resend of the same envelope can be
    /// accepted.
    pub async fn remember(
        &self,
        envelope: &VerifiedEnvelope,
        now: Timestamp,
    ) -> Result<Seen, ReplayError> {
        let until = envelope.remember_until();
        match &self.0 {
            Inner::Embedded(store) => {
                store
                    .remember(
                        envelope.from().as_str(),
                        envelope.msg_id().as_str(),
                        until,
                        now,
                    )
                    .await
            }
            Inner::Redis(store) => {
                store
                    .remember(envelope.from(), envelope.msg_id(), until, now)
                    .await
            }
        }
    }
}
