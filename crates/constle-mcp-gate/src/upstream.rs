//! The gate's HTTP client to the server: hyper's pooled client, over plain
//! TCP or rustls, speaking HTTP/1.1. No redirects are followed and no proxy
//! is used (hyper's client does neither), so a request goes to the
//! declared URL or nowhere.
//!
//! The URL is parsed once, when the gate is built; every call clones the
//! parsed form. A general-purpose client (reqwest) re-parsed and
//! re-validated it, and ran a redirect policy, on every call: about a
//! fifth of the instructions the gate ran per call.
//!
//! A server that closes each connection after its answer (an HTTP/1.0
//! server) has the gate connect anew for every call, and a server named by
//! its host name would have that name looked up for every connection
//! (`getaddrinfo`, on a blocking thread). The [`Resolver`] keeps the answer
//! for [`RESOLVED_FOR`] instead: measured with a connection per call, the
//! lookup of `localhost` cost the gate about 40 µs of CPU time a call
//! (135-155 µs, against 90-100 by address) and as much latency.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

/// The pooled client: keep-alive connections to the server, reused across
/// calls, whatever agent connection each came in on, and closed after 90 s
/// unused.
pub(crate) type Client =
    hyper_util::client::legacy::Client<HttpsConnector<HttpConnector<Resolver>>, Full<Bytes>>;

/// Longest wait for the server to accept a TCP connection. The TLS
/// handshake, and everything after it, falls under the gate's response
/// timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long new connections use the addresses the server's name resolved
/// to. Short, so that a server moved to another address is found within
/// seconds; a kept-alive connection already stays on its address for as
/// long as it lives.
const RESOLVED_FOR: Duration = Duration::from_secs(5);

/// A client for `http` and `https` URLs. TLS uses aws-lc-rs and the
/// platform's verifier (the system trust store), named explicitly so that
/// no process-wide default provider is needed.
pub(crate) fn client() -> std::io::Result<Client> {
    let mut tcp = HttpConnector::new_with_resolver(Resolver::new(RESOLVED_FOR));
    // `https` URLs reach this connector too: the TLS layer wraps it.
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let connector = HttpsConnectorBuilder::new()
        .with_provider_and_platform_verifier(rustls::crypto::aws_lc_rs::default_provider())?
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector),
    )
}

/// The server's URL in the form every request clones.
pub(crate) fn uri(url: &str) -> Result<Uri, String> {
    url.parse::<Uri>().map_err(|err| err.to_string())
}

/// Resolves names with `getaddrinfo` ([`GaiResolver`]) and keeps the last
/// answer for `ttl`. A gate's client only ever connects to its server, so
/// one answer is all there is to keep. Failures and empty answers are not
/// kept. Clones share the answer (the connector clones its resolver for
/// every connection).
#[derive(Clone)]
pub(crate) struct Resolver {
    kept: Arc<Mutex<Option<Answer>>>,
    ttl: Duration,
}

/// The addresses `name` resolved to, for connections made before `until`.
struct Answer {
    name: Name,
    until: Instant,
    addrs: Vec<SocketAddr>,
}

type Addrs = std::vec::IntoIter<SocketAddr>;

impl Resolver {
    fn new(ttl: Duration) -> Resolver {
        Resolver {
            kept: Arc::default(),
            ttl,
        }
    }

    /// The kept addresses of `name`, while they may still be used.
    fn kept(&self, name: &Name) -> Option<Vec<SocketAddr>> {
        let kept = self.lock();
        let answer = kept.as_ref()?;
        (answer.name == *name && Instant::now() < answer.until).then(|| answer.addrs.clone())
    }

    fn keep(&self, name: Name, addrs: &[SocketAddr]) {
        if !addrs.is_empty() {
            *self.lock() = Some(Answer {
                name,
                until: Instant::now() + self.ttl,
                addrs: addrs.to_vec(),
            });
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Answer>> {
        // A holder that panicked left a whole answer or none.
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Service<Name> for Resolver {
    type Response = Addrs;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Addrs>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        if let Some(addrs) = self.kept(&name) {
            return Box::pin(std::future::ready(Ok(addrs.into_iter())));
        }
        let resolver = self.clone();
        Box::pin(async move {
            // `GaiResolver` is always ready: no `poll_ready` first.
            let addrs: Vec<SocketAddr> = GaiResolver::new().call(name.clone()).await?.collect();
            resolver.keep(name, &addrs);
            Ok(addrs.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(host: &str) -> Name {
        host.parse().unwrap()
    }

    #[tokio::test]
    async fn an_answer_is_kept_for_its_name_only() {
        let mut resolver = Resolver::new(Duration::from_secs(60));
        let answer: Vec<SocketAddr> = resolver.call(name("localhost")).await.unwrap().collect();
        assert!(answer.iter().any(|addr| addr.ip().is_loopback()));
        assert_eq!(resolver.clone().kept(&name("localhost")), Some(answer));
        assert_eq!(resolver.kept(&name("example.invalid")), None);
    }

    #[tokio::test]
    async fn a_stale_answer_is_not_used() {
        let mut resolver = Resolver::new(Duration::ZERO);
        resolver.call(name("localhost")).await.unwrap();
        assert_eq!(resolver.kept(&name("localhost")), None);
    }

    #[tokio::test]
    async fn a_failure_is_not_kept() {
        let mut resolver = Resolver::new(Duration::from_secs(60));
        // No name at all: refused at once, without asking a DNS server.
        assert!(resolver.call(name("")).await.is_err());
        assert!(resolver.lock().is_none());
    }
}
