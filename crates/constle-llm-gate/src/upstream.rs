//! The gate's HTTP client to the provider: hyper's pooled client over
//! plain TCP or rustls, HTTP/1.1. It follows no redirects and uses no
//! proxy (hyper's client does neither), so a request goes to the declared
//! base URL or nowhere.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// The pooled client: keep-alive connections to the provider, reused
/// across calls, closed after 90 s unused.
pub(crate) type Client = hyper_util::client::legacy::Client<Connector, Full<Bytes>>;

/// TCP, or TLS over it, to the provider.
pub(crate) type Connector = HttpsConnector<HttpConnector>;

/// Longest wait for the provider to accept a TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client for `http` and `https` URLs: TLS through aws-lc-rs and the
/// platform's verifier (the system trust store), named explicitly so no
/// process-wide default provider is needed.
pub(crate) fn client() -> std::io::Result<Client> {
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector()?),
    )
}

/// The connector under [`client`], also the Responses WebSocket's way to
/// the provider: the same TLS, no proxy.
pub(crate) fn connector() -> std::io::Result<Connector> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
    Ok(HttpsConnectorBuilder::new()
        .with_provider_and_platform_verifier(rustls::crypto::aws_lc_rs::default_provider())?
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp))
}
