//! One `add-checkpoint` exchange with one witness (c2sp.org/tlog-witness).

use std::time::Duration;

use constle_tlog::{AddCheckpoint, LogTree, VerifiedCheckpoint, verify_cosignature};

use crate::config::Witness;

/// How long to wait for a witness to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one exchange may take in all.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an answer read: a cosignature line is under 200 bytes.
const MAX_ANSWER_BYTES: usize = 16 * 1024;
/// The most of a refusal's text kept for the log and the warning.
const MAX_REASON_CHARS: usize = 200;

/// What a witness answered.
pub(crate) enum Answer {
    /// The line of a cosignature that verifies with the witness's key.
    Cosigned(String),
    /// 409: the witness last cosigned this size.
    Stale(u64),
    /// Anything else: why, and the HTTP status if one came.
    Failed(String, Option<u16>),
}

pub(crate) fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(EXCHANGE_TIMEOUT)
        .user_agent(concat!("constle-checkpoints/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Submits `checkpoint`, the tree's head at its size, with a proof from
/// `old`, the size the witness is believed to have cosigned last.
pub(crate) async fn add_checkpoint(
    client: &reqwest::Client,
    witness: &Witness,
    checkpoint: &VerifiedCheckpoint,
    tree: &LogTree,
    old: u64,
) -> Answer {
    let size = checkpoint.head().size;
    let proof = match tree.consistency_proof(old, size) {
        Ok(proof) => proof.hashes().to_vec(),
        Err(err) => return Answer::Failed(format!("no proof from size {old}: {err}"), None),
    };
    let body = AddCheckpoint {
        old_size: old,
        proof,
        checkpoint: checkpoint.signed().clone(),
    }
    .to_bytes();
    let sent = client.post(&witness.endpoint).body(body).send().await;
    let response = match sent {
        Ok(response) => response,
        Err(err) => return Answer::Failed(unreachable_reason(&err), None),
    };
    let status = response.status().as_u16();
    let text = match read_limited(response).await {
        Ok(text) => text,
        Err(reason) => return Answer::Failed(reason, Some(status)),
    };
    match status {
        200 => cosigned(witness, checkpoint, &text),
        409 => match text.trim_end_matches('\n').parse::<u64>() {
            Ok(latest) => Answer::Stale(latest),
            Err(_) => Answer::Failed("409 without a size".to_owned(), Some(409)),
        },
        _ => Answer::Failed(refusal(status, &text), Some(status)),
    }
}

/// The line of the answer that is the witness's valid cosignature.
fn cosigned(witness: &Witness, checkpoint: &VerifiedCheckpoint, text: &str) -> Answer {
    let mut last_error = None;
    for line in text.lines().filter(|l| !l.is_empty()) {
        match verify_cosignature(checkpoint, &witness.key, line) {
            Ok(_) => return Answer::Cosigned(line.to_owned()),
            Err(err) => last_error = Some(err),
        }
    }
    let why = last_error.map_or_else(|| "an empty answer".to_owned(), |e| e.to_string());
    Answer::Failed(format!("200 without a valid cosignature: {why}"), Some(200))
}

fn unreachable_reason(err: &reqwest::Error) -> String {
    let what = if err.is_timeout() {
        "no answer in time"
    } else if err.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    // reqwest's own text names the URL, which may carry a secret.
    let mut source = std::error::Error::source(err);
    let mut detail = None;
    while let Some(inner) = source {
        detail = Some(inner.to_string());
        source = inner.source();
    }
    match detail {
        Some(detail) => format!("{what}: {}", printable(&detail)),
        None => what.to_owned(),
    }
}

fn refusal(status: u16, text: &str) -> String {
    match printable(text.trim()) {
        shown if shown.is_empty() => format!("refused with {status}"),
        shown => format!("refused with {status}: {shown}"),
    }
}

/// A witness's text as it may appear in the log and on the terminal:
/// bounded, and escaped as everything constle did not write
/// (`constle-escape`).
fn printable(text: &str) -> String {
    constle_escape::escape(&text.chars().take(MAX_REASON_CHARS).collect::<String>())
}

async fn read_limited(mut response: reqwest::Response) -> Result<String, String> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_ANSWER_BYTES => {
                body.extend_from_slice(&chunk);
            }
            Ok(Some(_)) => return Err(format!("an answer over {MAX_ANSWER_BYTES} bytes")),
            Ok(None) => break,
            Err(err) => return Err(unreachable_reason(&err)),
        }
    }
    String::from_utf8(body).map_err(|_| "an answer that is not UTF-8".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_witness_text_reaches_no_terminal_as_it_is_and_is_bounded() {
        let shown = refusal(422, "bad\u{1b}[2J\rproof\u{202e}");
        assert!(!shown.chars().any(constle_escape::is_unsafe), "{shown}");
        assert!(shown.starts_with("refused with 422: bad"), "{shown}");
        assert_eq!(printable(&"x".repeat(1000)).len(), MAX_REASON_CHARS);
    }
}
