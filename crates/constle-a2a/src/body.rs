//! Reading a request body within a limit, for every endpoint that takes
//! one: an oversized body must be answered with the spec's 413
//! `a2a_too_large` in JSON, which axum's own limit (a plain-text
//! rejection) cannot give.

use axum::body::Body;
use axum::http::{HeaderMap, header};
use futures_util::StreamExt as _;

/// Why a body was not read.
pub(crate) enum BodyError {
    /// Longer than the limit: declared by `Content-Length`, or counted.
    TooLarge {
        /// At least this many bytes.
        len: usize,
    },
    /// The connection failed midway.
    Unreadable,
}

/// Reads `body` whole, refusing before reading if `headers` declare more
/// than `max` bytes, and as soon as more than `max` have come.
pub(crate) async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    max: usize,
) -> Result<Vec<u8>, BodyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared
        && len > max as u64
    {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        return Err(BodyError::TooLarge { len });
    }
    let mut bytes = Vec::with_capacity(declared.map_or(4096, |n| n as usize).min(max));
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| BodyError::Unreadable)?;
        if bytes.len() + chunk.len() > max {
            return Err(BodyError::TooLarge {
                len: bytes.len() + chunk.len(),
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}
