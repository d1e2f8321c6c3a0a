//! How the gate reaches a server: a [`Transport`]. [`HttpTransport`] is
//! the declared URL over the gate's HTTP client ([`crate::upstream`]);
//! another transport (the stdio bridge of a server Constle runs) answers
//! the same Streamable HTTP requests in-process, so everything the gate
//! checks runs the same whatever the server is.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, Uri};

use crate::GateError;
use crate::rpc::Reason;
use crate::upstream::{self, Client};

/// A server's response body, as a transport hands it to the gate.
pub type TransportBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// The future a [`Transport`] returns.
pub type TransportFuture =
    Pin<Box<dyn Future<Output = Result<Response<TransportBody>, TransportError>> + Send>>;

/// Why a request reached no server.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportError {
    /// No connection, or it broke (reason `mcp_upstream_unreachable`).
    Unreachable,
    /// The server is not running: it exited or was stopped. `why` says how
    /// (`exited with status 3`); it must not hold a secret (reason
    /// `mcp_server_exited`).
    Exited {
        /// How it ended, for the agent's error message.
        why: String,
    },
    /// The transport refused the request itself (the stdio bridge: no
    /// session, an id already in flight). The gate answers it like its own
    /// refusals: a JSON-RPC error with `status`, recorded (`mcp_refused`)
    /// before the agent hears of it.
    Refused {
        /// The HTTP status of the answer.
        status: hyper::StatusCode,
        /// Why, as `error.data.reason`.
        reason: Reason,
        /// What the agent is told; it must not hold a secret.
        message: String,
    },
}

/// How the gate reaches its server: a Streamable HTTP request in (method,
/// the headers the gate chose, the body it inspected), the server's
/// response out. The gate bounds the wait
/// ([`Gate::with_response_timeout`](crate::Gate::with_response_timeout)).
pub trait Transport: Send + Sync + 'static {
    /// Sends `request` to the server.
    fn send(&self, request: Request<Bytes>) -> TransportFuture;
}

/// A server's URL, over the gate's pooled HTTP/1.1 client (plain or TLS),
/// which follows no redirects and uses no proxy.
pub struct HttpTransport {
    uri: Uri,
    client: Client,
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a credential: never shown.
        f.debug_struct("HttpTransport").finish_non_exhaustive()
    }
}

impl HttpTransport {
    /// A transport to `url` (`http` or `https`).
    pub(crate) fn new(url: &str) -> Result<HttpTransport, GateError> {
        Ok(HttpTransport {
            uri: upstream::uri(url).map_err(GateError::Url)?,
            client: upstream::client().map_err(GateError::Client)?,
        })
    }
}

impl Transport for HttpTransport {
    fn send(&self, request: Request<Bytes>) -> TransportFuture {
        let (mut parts, body) = request.into_parts();
        parts.uri = self.uri.clone();
        let sent = self
            .client
            .request(Request::from_parts(parts, Full::new(body)));
        Box::pin(async move {
            let response = sent.await.map_err(|_| TransportError::Unreachable)?;
            Ok(response.map(|body| body.map_err(std::io::Error::other).boxed_unsync()))
        })
    }
}
