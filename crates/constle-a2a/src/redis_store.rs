//! The Redis replay store: seen ids shared by every machine listening as one
//! identity.
//!
//! One key per accepted message,
//! `constle:a2a:seen:<listener did>:<sender did>:<msg_id>`, written with
//! `SET key 1 NX PX <ms>`: Redis answers `OK` to exactly one of any number
//! of listeners racing on the same id, and `nil` to the rest. The key
//! expires when the envelope would be refused as too old anyway (the
//! remaining time to `until`, at least one second; measured on the
//! listener's clock, so Redis's own clock does not matter).
//!
//! Every command is bounded by [`constle_redis::TIMEOUT`]; a server that is
//! down, slow or answers anything else is a [`ReplayError`] and the listener
//! answers 503. The connection reconnects by itself once the server is back.

use constle_identity::DidKey;
use constle_redis::{Connection, bounded};
use jiff::Timestamp;

use crate::envelope::MsgId;
use crate::replay::{ReplayError, Seen};

pub(crate) struct Store {
    conn: Connection,
    prefix: String,
}

impl Store {
    pub(crate) async fn open(url: &str, listener: &DidKey) -> Result<Store, ReplayError> {
        Ok(Store {
            conn: constle_redis::connect(url).await?,
            prefix: format!("constle:a2a:seen:{listener}"),
        })
    }

    pub(crate) fn url(&self) -> &str {
        self.conn.url()
    }

    pub(crate) async fn remember(
        &self,
        from: &DidKey,
        msg_id: &MsgId,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<Seen, ReplayError> {
        let key = format!("{}:{from}:{msg_id}", self.prefix);
        let ms = until
            .duration_since(now)
            .as_millis()
            .clamp(1000, i128::from(i64::MAX));
        let mut conn = self.conn.manager();
        let mut cmd = redis::cmd("SET");
        cmd.arg(&key).arg("1").arg("NX").arg("PX").arg(ms as i64);
        let reply: Option<String> = bounded(self.conn.url(), cmd.query_async(&mut conn)).await?;
        match reply.as_deref() {
            Some("OK") => Ok(Seen::New),
            None => Ok(Seen::Before),
            Some(other) => Err(ReplayError::Redis {
                url: self.conn.url().to_owned(),
                message: format!(
                    "unexpected reply to SET NX: {}",
                    crate::envelope::shorten(other)
                ),
            }),
        }
    }
}
