//! One bounded, credential-safe Redis connection, shared by the spend
//! ledger and the A2A replay store.
//!
//! - [`connect`] opens a [`ConnectionManager`] (connection and response
//!   timeouts of [`TIMEOUT`], one retry, a rustls provider for
//!   `rediss://`) and checks it with a `PING`. It reconnects by itself once
//!   the server is back.
//! - [`bounded`] runs one command within [`TIMEOUT`], whatever the client's
//!   own timeouts and reconnection attempts do.
//! - Every URL in a [`RedisFailure`] or a [`Connection`] is [`redacted`]:
//!   its password (in the user information, or `pass=` in the query of a
//!   `redis+unix://` URL) is `***`.
//!
//! Each store maps a [`RedisFailure`] into its own error type, with its own
//! messages.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use redis::RedisResult;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::RedisFailure;

/// The bound on every Redis command, connecting included.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// The URL with its password masked, for messages: the rule every URL
/// Constle shows follows ([`constle_redact::url`]).
pub use constle_redact::url as redacted;

/// An open, checked connection and the [`redacted`] URL it was opened with.
#[derive(Clone)]
pub struct Connection {
    manager: ConnectionManager,
    url: String,
}

impl Connection {
    /// A handle for one command: cheap, and shared with every other handle.
    pub fn manager(&self) -> ConnectionManager {
        self.manager.clone()
    }

    /// The URL, without credentials.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.url)
            .finish()
    }
}

/// Opens a connection to `url` and checks it with a `PING`, each within
/// [`TIMEOUT`].
pub async fn connect(url: &str) -> Result<Connection, RedisFailure> {
    let shown = redacted(url);
    if url.starts_with("rediss://") {
        // rustls needs a process-wide provider; if one is installed
        // already (reqwest's, the same one), that one is used.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    let client = redis::Client::open(url).map_err(|err| RedisFailure::BadUrl {
        url: shown.clone(),
        message: err.to_string(),
    })?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT))
        .set_number_of_retries(1);
    let connecting = ConnectionManager::new_with_config(client, config);
    let mut manager = bounded(&shown, connecting).await?;
    bounded(&shown, redis::cmd("PING").query_async::<()>(&mut manager)).await?;
    Ok(Connection {
        manager,
        url: shown,
    })
}

/// Runs one Redis command with the [`TIMEOUT`] bound, whatever the client's
/// own timeouts and reconnection attempts do. `url` is the [`redacted`] one.
pub async fn bounded<T>(
    url: &str,
    command: impl Future<Output = RedisResult<T>>,
) -> Result<T, RedisFailure> {
    let timeout = || RedisFailure::Timeout {
        url: url.to_owned(),
        after: TIMEOUT,
    };
    match tokio::time::timeout(TIMEOUT, command).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) if err.is_timeout() => Err(timeout()),
        Ok(Err(err)) => Err(RedisFailure::Redis {
            url: url.to_owned(),
            message: err.to_string(),
        }),
        Err(_) => Err(timeout()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_url_that_cannot_be_used_is_refused_without_its_password() {
        for url in [
            "redis://:S3CRET@host:notaport/0",
            "redis://user:S3CRET@127.0.0.1:1/0",
            "redis+unix:///nonexistent/redis.sock?pass=S3CRET",
            "unix:///nonexistent/redis.sock?db=0&PASS=S3CRET",
        ] {
            let err = connect(url).await.unwrap_err();
            for shown in [err.to_string(), format!("{err:?}"), err.url().to_owned()] {
                assert!(!shown.contains("S3CRET"), "{url}: {shown}");
            }
            assert!(err.to_string().contains("***"), "{url}: {err}");
        }
    }

    #[tokio::test]
    async fn commands_run_and_a_stopped_server_times_out() {
        let redis = constle_testkit::RedisServer::start().unwrap();
        let conn = connect(&redis.url()).await.unwrap();
        let mut manager = conn.manager();
        let echo = redis::cmd("ECHO").arg("hi").clone();
        let reply = bounded(conn.url(), echo.query_async::<String>(&mut manager)).await;
        assert_eq!(reply.unwrap(), "hi");

        redis.stop().unwrap();
        let ping = redis::cmd("PING");
        let err = bounded(conn.url(), ping.query_async::<()>(&mut manager))
            .await
            .unwrap_err();
        redis.resume().unwrap();
        assert!(
            matches!(err, RedisFailure::Timeout { after: TIMEOUT, .. }),
            "{err}"
        );
    }
}
