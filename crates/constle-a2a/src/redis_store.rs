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
//! Every command is bounded by [`TIMEOUT`]; a server that is down, slow or
//! answers anything else is a [`ReplayError`] and the listener answers 503.
//! The connection reconnects by itself once the server is back.

use std::future::Future;
use std::time::Duration;

use constle_identity::DidKey;
use jiff::Timestamp;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, RedisResult};

use crate::envelope::MsgId;
use crate::replay::{ReplayError, Seen};

/// The bound on every Redis command, connecting included.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(2);

/// The URL without credentials or query (which may hold `pass=`).
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(not a URL)".to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let path = path.split(['?', '#']).next().unwrap_or_default();
    format!("{scheme}://{host}{path}")
}

pub(crate) struct Store {
    conn: ConnectionManager,
    url: String,
    prefix: String,
}

impl Store {
    pub(crate) async fn open(url: &str, listener: &DidKey) -> Result<Store, ReplayError> {
        let shown = redacted(url);
        let bad_url = |err: RedisError| ReplayError::BadUrl {
            url: shown.clone(),
            message: err.to_string(),
        };
        if url.starts_with("rediss://") {
            // rustls needs a process-wide provider; if one is installed
            // already (reqwest's, the same one), that one is used.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        }
        let client = redis::Client::open(url).map_err(bad_url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT))
            .set_number_of_retries(1);
        let mut conn = bounded(&shown, ConnectionManager::new_with_config(client, config)).await?;
        bounded(&shown, redis::cmd("PING").query_async::<()>(&mut conn)).await?;
        Ok(Store {
            conn,
            url: shown,
            prefix: format!("constle:a2a:seen:{listener}"),
        })
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
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
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("SET");
        cmd.arg(&key).arg("1").arg("NX").arg("PX").arg(ms as i64);
        let reply: Option<String> = bounded(&self.url, cmd.query_async(&mut conn)).await?;
        match reply.as_deref() {
            Some("OK") => Ok(Seen::New),
            None => Ok(Seen::Before),
            Some(other) => Err(ReplayError::Redis {
                url: self.url.clone(),
                message: format!(
                    "unexpected reply to SET NX: {}",
                    crate::envelope::shorten(other)
                ),
            }),
        }
    }
}

/// Runs one Redis command with the [`TIMEOUT`] bound, whatever the client's
/// own timeouts and reconnection attempts do.
pub(crate) async fn bounded<T>(
    url: &str,
    command: impl Future<Output = RedisResult<T>>,
) -> Result<T, ReplayError> {
    let timeout = || ReplayError::Timeout {
        url: url.to_owned(),
        after: TIMEOUT,
    };
    match tokio::time::timeout(TIMEOUT, command).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) if err.is_timeout() => Err(timeout()),
        Ok(Err(err)) => Err(ReplayError::Redis {
            url: url.to_owned(),
            message: err.to_string(),
        }),
        Err(_) => Err(timeout()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_credentials() {
        assert_eq!(
            redacted("redis://user:secret@replay.example:6379/0"),
            "redis://replay.example:6379/0"
        );
        assert_eq!(
            redacted("redis+unix:///run/redis.sock?db=1&pass=secret"),
            "redis+unix:///run/redis.sock"
        );
    }
}
