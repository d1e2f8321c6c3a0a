//! [`GateError`]: why a [`Gate`](crate::Gate) could not be built.

use std::fmt;

/// Why a [`Gate`](crate::Gate) could not be built. No variant carries the
/// key or any part of it.
#[derive(Debug)]
#[non_exhaustive]
pub enum GateError {
    /// The upstream base URL is not an `http` or `https` URL with a host.
    Url(String),
    /// The key cannot be sent in a header (empty, or bytes no header may
    /// hold).
    Key,
    /// The HTTP client could not be set up (its TLS configuration).
    Client(std::io::Error),
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateError::Url(why) => write!(f, "the provider's upstream URL cannot be used: {why}"),
            GateError::Key => f.write_str(
                "the provider's key cannot be sent in a header: it is empty or holds bytes a header may not",
            ),
            GateError::Client(err) => write!(f, "cannot set up the gate's HTTP client: {err}"),
        }
    }
}

impl std::error::Error for GateError {}
