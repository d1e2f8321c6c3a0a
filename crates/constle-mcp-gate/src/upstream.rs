//! The gate's HTTP client to the server: hyper's pooled client, over plain
//! TCP or rustls, speaking HTTP/1.1. No redirects are followed and no proxy
//! is used (hyper's client does neither), so a request goes to the
//! declared URL or nowhere.
//!
//! The URL is parsed once, when the gate is built; every call clones the
//! parsed form. A general-purpose client (reqwest) re-parsed and
//! re-validated it, and ran a redirect policy, on every call: about a
//! fifth of the instructions the gate ran per call.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// The pooled client: keep-alive connections to the server, reused across
/// calls, and closed after 90 s unused.
pub(crate) type Client =
    hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Longest wait for the server to accept a TCP connection. The TLS
/// handshake, and everything after it, falls under the gate's response
/// timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client for `http` and `https` URLs. TLS uses aws-lc-rs and the
/// platform's verifier (the system trust store), named explicitly so that
/// no process-wide default provider is needed.
pub(crate) fn client() -> std::io::Result<Client> {
    let mut tcp = HttpConnector::new();
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
