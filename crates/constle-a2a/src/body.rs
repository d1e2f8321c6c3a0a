//! Reading a request body within a limit, for every endpoint that takes
//! one: an oversized body must be answered with the spec's 413
//! `a2a_too_large` in JSON, which axum's own limit (a plain-text
//! rejection) cannot give.
//!
//! The 413 must also arrive. Most clients send their whole request before
//! they read the answer; a server that answers and closes while body bytes
//! are still coming in has the kernel reset the connection, and the client
//! sees a reset, not the 413 (hyper reads at most one more chunk of a body
//! the handler left, then closes). So the rest of an oversized body is read
//! and thrown away first, up to [`MAX_DISCARDED_BYTES`] and
//! [`DISCARD_FOR`]: the answer then comes after the last byte sent, and
//! nothing is kept. Past either bound the connection is closed on the
//! sender, who may see that as a reset.

use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use axum::http::{HeaderMap, header};
use futures_util::StreamExt as _;

/// The most of a request (counted from its first byte) read, and thrown
/// away, so that a sender still sending an oversized body gets its 413.
/// A body declared longer is answered at once.
pub const MAX_DISCARDED_BYTES: usize = 16 * 1024 * 1024;

/// The longest an oversized body is read for before its 413 is sent.
pub const DISCARD_FOR: Duration = Duration::from_secs(10);

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

/// Reads `body` whole, refusing if `headers` declare more than `max`
/// bytes, and as soon as more than `max` have come; what is left of a body
/// refused is read and dropped within the bounds of the module docs.
pub(crate) async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    max: usize,
) -> Result<Vec<u8>, BodyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut stream = body.into_data_stream();
    if let Some(len) = declared
        && len > max as u64
    {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        // A client waiting for `100 Continue` has sent nothing yet: reading
        // would only ask it for the body.
        if len <= MAX_DISCARDED_BYTES && !expects_continue(headers) {
            discard(&mut stream, 0).await;
        }
        return Err(BodyError::TooLarge { len });
    }
    let mut bytes = Vec::with_capacity(declared.map_or(4096, |n| n as usize).min(max));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| BodyError::Unreadable)?;
        if bytes.len() + chunk.len() > max {
            let len = bytes.len() + chunk.len();
            discard(&mut stream, len).await;
            return Err(BodyError::TooLarge { len });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Reads and drops the rest of `stream`, `read` bytes of the request being
/// read already, until its end, [`MAX_DISCARDED_BYTES`] in all, an error,
/// or [`DISCARD_FOR`].
async fn discard(stream: &mut BodyDataStream, mut read: usize) {
    let drain = async {
        while read <= MAX_DISCARDED_BYTES {
            match stream.next().await {
                Some(Ok(chunk)) => read += chunk.len(),
                Some(Err(_)) | None => break,
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_FOR, drain).await;
}
