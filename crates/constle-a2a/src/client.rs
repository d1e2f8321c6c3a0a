//! The outbound side: POST a signed envelope to a peer's listener.

use std::fmt;
use std::time::Duration;

use constle_redact::is_loopback_host;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Client, Url, redirect};

use crate::envelope::{Envelope, MsgId};
use crate::listener::MESSAGES_PATH;

/// The longest a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest one delivery may take, answer included.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(15);
/// The most of a refusal's body that is read, for its reason code.
const MAX_ANSWER_BYTES: usize = 4096;

/// A peer listener's base URL: `https`, or `http` to a loopback address
/// only. Envelopes are POSTed to `<url>/a2a/v1/messages`.
#[derive(Clone, PartialEq, Eq)]
pub struct PeerUrl(Url);

impl fmt::Debug for PeerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PeerUrl({})", self.0)
    }
}

impl fmt::Display for PeerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why a peer URL is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerUrlError {
    /// Not an absolute URL with a host.
    #[error("the peer URL is not an absolute URL with a host")]
    Invalid,
    /// Neither `https` nor `http`.
    #[error("the peer URL must use https")]
    Scheme,
    /// Plain `http` to a host other than loopback.
    #[error("the peer URL uses plain http to a non-loopback host; use https")]
    Insecure,
    /// Credentials, a query or a fragment in the URL.
    #[error("the peer URL must not carry credentials, a query or a fragment")]
    Extras,
}

impl PeerUrl {
    /// Parses a base URL.
    ///
    /// # Errors
    ///
    /// [`PeerUrlError`] if it is unusable.
    pub fn parse(text: &str) -> Result<PeerUrl, PeerUrlError> {
        // Not redundant with the Agentfile's `HttpUrl`: that allows a query,
        // and this is public, so it cannot assume its text came from there.
        let url = Url::parse(text).map_err(|_| PeerUrlError::Invalid)?;
        if url.cannot_be_a_base() || url.host().is_none() {
            return Err(PeerUrlError::Invalid);
        }
        if !url.username().is_empty()
            || url.password().is_some()
            || url.query().is_some()
            || url.fragment().is_some()
        {
            return Err(PeerUrlError::Extras);
        }
        match url.scheme() {
            "https" => {}
            "http" if url.host_str().is_some_and(is_loopback_host) => {}
            "http" => return Err(PeerUrlError::Insecure),
            _ => return Err(PeerUrlError::Scheme),
        }
        Ok(PeerUrl(url))
    }

    /// Where envelopes are POSTed: the base URL with [`MESSAGES_PATH`]
    /// appended to its path.
    pub fn messages_url(&self) -> Url {
        let mut url = self.0.clone();
        let path = format!("{}{MESSAGES_PATH}", url.path().trim_end_matches('/'));
        url.set_path(&path);
        url
    }
}

/// A delivery the peer accepted (202).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The envelope's id.
    pub msg_id: MsgId,
    /// The HTTP status (202).
    pub status: u16,
}

/// Why a delivery did not succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeliverError {
    /// No HTTP client could be built (TLS setup failed).
    #[error("no HTTP client could be built (TLS setup failed)")]
    Client,
    /// The peer answered, and refused.
    #[error("the peer refused the message with status {status}{}", reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The peer's reason code (`a2a_…`), if it sent a well-formed one.
        reason: Option<String>,
        /// The peer's `Retry-After`, if any.
        retry_after: Option<Duration>,
    },
    /// The peer could not be reached, or the exchange failed midway.
    #[error("the peer could not be reached: {0}")]
    Unreachable(String),
    /// The peer did not answer within the time bound.
    #[error("the peer did not answer within {0:?}")]
    Timeout(Duration),
}

impl DeliverError {
    /// Whether sending the same envelope again may succeed: a 503 or 429, or
    /// no answer at all. (A timeout may mean the peer accepted it; a resend
    /// is then refused as `a2a_replayed`, never accepted twice.)
    pub fn is_retryable(&self) -> bool {
        match self {
            DeliverError::Refused { status, .. } => matches!(status, 429 | 503),
            DeliverError::Unreachable(_) | DeliverError::Timeout(_) => true,
            DeliverError::Client => false,
        }
    }
}

/// An HTTP client for peers: rustls, no redirects, no proxy, bounded
/// connect and exchange times. Build one and reuse it.
#[derive(Debug, Clone)]
pub struct A2aClient {
    http: Client,
}

impl A2aClient {
    /// Builds the client.
    ///
    /// # Errors
    ///
    /// [`DeliverError::Client`] if TLS cannot be set up on this host.
    pub fn new() -> Result<A2aClient, DeliverError> {
        let http = Client::builder()
            .redirect(redirect::Policy::none())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(EXCHANGE_TIMEOUT)
            .user_agent(concat!("constle-a2a/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|_| DeliverError::Client)?;
        Ok(A2aClient { http })
    }

    /// POSTs `envelope` to `peer`'s listener.
    ///
    /// # Errors
    ///
    /// [`DeliverError`]: refused (any status but 202), unreachable, or too slow.
    pub async fn deliver(
        &self,
        peer: &PeerUrl,
        envelope: &Envelope,
    ) -> Result<Delivery, DeliverError> {
        let sent = self
            .http
            .post(peer.messages_url())
            .header(CONTENT_TYPE, "application/json")
            .body(envelope.to_bytes())
            .send()
            .await
            .map_err(transport)?;
        let status = sent.status().as_u16();
        if status == 202 {
            return Ok(Delivery {
                msg_id: envelope.msg_id().clone(),
                status,
            });
        }
        let retry_after = sent
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s.min(3600)));
        let reason = read_reason(sent).await;
        Err(DeliverError::Refused {
            status,
            reason,
            retry_after,
        })
    }
}

/// POSTs `envelope` to `peer`'s listener with a fresh [`A2aClient`]. Build
/// one client and call [`A2aClient::deliver`] to send many.
///
/// # Errors
///
/// As [`A2aClient::deliver`].
pub async fn deliver(peer: &PeerUrl, envelope: &Envelope) -> Result<Delivery, DeliverError> {
    A2aClient::new()?.deliver(peer, envelope).await
}

fn transport(err: reqwest::Error) -> DeliverError {
    if err.is_timeout() {
        DeliverError::Timeout(EXCHANGE_TIMEOUT)
    } else {
        // Without the URL: it is the peer's, and shown elsewhere.
        DeliverError::Unreachable(err.without_url().to_string())
    }
}

/// The `error` field of a refusal's JSON body, if it is a reason code.
async fn read_reason(mut response: reqwest::Response) -> Option<String> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_ANSWER_BYTES {
            return None;
        }
    }
    let value = constle_json::parse(&body).ok()?;
    let code = value.get("error")?.as_str()?;
    let plain = !code.is_empty()
        && code.len() <= 64
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    plain.then(|| code.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_urls() {
        let ok = PeerUrl::parse("https://peer.example/base/").unwrap();
        assert_eq!(
            ok.messages_url().as_str(),
            "https://peer.example/base/a2a/v1/messages"
        );
        assert_eq!(
            PeerUrl::parse("http://127.0.0.1:8080")
                .unwrap()
                .messages_url()
                .as_str(),
            "http://127.0.0.1:8080/a2a/v1/messages"
        );
        assert!(PeerUrl::parse("http://[::1]:1/").is_ok());
        assert!(PeerUrl::parse("http://localhost:1/").is_ok());
        assert_eq!(
            PeerUrl::parse("http://peer.example/"),
            Err(PeerUrlError::Insecure)
        );
        assert_eq!(
            PeerUrl::parse("http://10.0.0.1/"),
            Err(PeerUrlError::Insecure)
        );
        assert_eq!(
            PeerUrl::parse("ftp://peer.example/"),
            Err(PeerUrlError::Scheme)
        );
        assert_eq!(
            PeerUrl::parse("https://u:p@peer.example/"),
            Err(PeerUrlError::Extras)
        );
        assert_eq!(
            PeerUrl::parse("https://peer.example/?k=1"),
            Err(PeerUrlError::Extras)
        );
        assert_eq!(PeerUrl::parse("nonsense"), Err(PeerUrlError::Invalid));
    }
}
