//! A provider may echo the key it got ("invalid x-api-key sk-…", a debug
//! field): the agent must never read it. What the gate relays is checked
//! for the key's bytes first: a response header holding it is dropped, a
//! whole body holding it is not relayed, and an SSE stream is relayed
//! event by event, each checked whole, and cut before the first event
//! that holds it ([`Events`]).
//!
//! An event is relayed once it is complete (its blank line has arrived),
//! never a part of one: a client reads an event only once it is complete
//! anyway, so this delays no token. The key is header text (visible
//! ASCII), so it never spans a line, let alone an event.

use bytes::Bytes;
use hyper::header::HeaderMap;
use memchr::memmem;

use crate::inspect::MAX_BODY_BYTES;

/// Whether `bytes` hold `key`.
pub(crate) fn holds(bytes: &[u8], key: &[u8]) -> bool {
    !key.is_empty() && memmem::find(bytes, key).is_some()
}

/// Removes every header whose value holds `key`; whether one was.
pub(crate) fn drop_headers_holding(headers: &mut HeaderMap, key: &[u8]) -> bool {
    let echoing: Vec<_> = headers
        .iter()
        .filter(|(_, value)| holds(value.as_bytes(), key))
        .map(|(name, _)| name.clone())
        .collect();
    for name in &echoing {
        headers.remove(name);
    }
    !echoing.is_empty()
}

/// Why a stream is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cut {
    /// The next event holds the key.
    Echoed,
    /// An event longer than [`MAX_BODY_BYTES`]: no client reads one.
    TooLong,
}

/// What may pass of a stream after a chunk: whole events, checked; and
/// whether the stream ends here.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Passed {
    pub(crate) bytes: Bytes,
    pub(crate) cut: Option<Cut>,
}

/// An SSE stream, split into whole events as it arrives.
#[derive(Debug)]
pub(crate) struct Events {
    /// Bytes of events not yet complete.
    pending: Vec<u8>,
    /// How far `pending` has been scanned for event ends.
    scanned: usize,
    /// The line being scanned is empty so far: a line end now ends the
    /// event.
    line_empty: bool,
    /// The last byte was a `\r`: a `\n` now belongs to it.
    after_cr: bool,
}

impl Default for Events {
    fn default() -> Events {
        Events {
            pending: Vec::new(),
            scanned: 0,
            line_empty: true,
            after_cr: false,
        }
    }
}

impl Events {
    /// Takes `chunk`; gives back the events it completed, up to the
    /// first that holds `key`.
    pub(crate) fn push(&mut self, chunk: &[u8], key: &[u8]) -> Passed {
        self.pending.extend_from_slice(chunk);
        let mut passed = 0;
        while let Some(end) = self.next_end() {
            if holds(&self.pending[passed..end], key) {
                return self.take(passed, Some(Cut::Echoed));
            }
            passed = end;
        }
        if self.pending.len() - passed > MAX_BODY_BYTES {
            return self.take(passed, Some(Cut::TooLong));
        }
        self.take(passed, None)
    }

    /// What is left once the stream has ended: a last event without its
    /// blank line, unless it holds `key`.
    pub(crate) fn finish(mut self, key: &[u8]) -> Passed {
        if holds(&self.pending, key) {
            return Passed {
                bytes: Bytes::new(),
                cut: Some(Cut::Echoed),
            };
        }
        let all = self.pending.len();
        self.take(all, None)
    }

    /// The end of the next complete event past what was scanned.
    fn next_end(&mut self) -> Option<usize> {
        while self.scanned < self.pending.len() {
            let byte = self.pending[self.scanned];
            self.scanned += 1;
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            if byte == b'\r' || byte == b'\n' {
                if !std::mem::replace(&mut self.line_empty, true) {
                    self.after_cr = byte == b'\r';
                    continue;
                }
                if byte == b'\n' {
                    return Some(self.scanned);
                }
                // The event ends with its `\n`, if one follows: not yet known.
                match self.pending.get(self.scanned) {
                    Some(b'\n') => self.scanned += 1,
                    Some(_) => {}
                    None => {
                        self.scanned -= 1;
                        return None;
                    }
                }
                return Some(self.scanned);
            } else {
                self.line_empty = false;
            }
        }
        None
    }

    /// The first `n` pending bytes, out.
    fn take(&mut self, n: usize, cut: Option<Cut>) -> Passed {
        let bytes = Bytes::from(self.pending.drain(..n).collect::<Vec<u8>>());
        self.scanned -= n;
        Passed { bytes, cut }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    const KEY: &[u8] = b"sk-echo-123";

    fn relay(chunks: &[&str]) -> (String, Option<Cut>) {
        let mut events = Events::default();
        let mut out = Vec::new();
        for chunk in chunks {
            let passed = events.push(chunk.as_bytes(), KEY);
            out.extend_from_slice(&passed.bytes);
            if passed.cut.is_some() {
                return (String::from_utf8(out).unwrap_or_default(), passed.cut);
            }
        }
        let passed = events.finish(KEY);
        out.extend_from_slice(&passed.bytes);
        (String::from_utf8(out).unwrap_or_default(), passed.cut)
    }

    #[test]
    fn whole_events_pass_as_they_complete() {
        let mut events = Events::default();
        let first = events.push(b"data: {\"a\":1}\n\ndata: {\"b\"", KEY);
        assert_eq!(&first.bytes[..], b"data: {\"a\":1}\n\n");
        let second = events.push(b":2}\r\n\r\n", KEY);
        assert_eq!(&second.bytes[..], b"data: {\"b\":2}\r\n\r\n");
        assert_eq!(events.finish(KEY), Passed::default());
    }

    #[test]
    fn the_stream_is_cut_before_the_event_holding_the_key_even_split() {
        let before = "event: a\ndata: {}\n\n";
        let echo = "event: error\ndata: {\"message\":\"invalid key sk-echo-123\"}\n\n";
        let after = "data: {}\n\n";
        for split in 1..echo.len() {
            let (a, b) = echo.split_at(split);
            let (out, cut) = relay(&[before, a, b, after]);
            assert_eq!((out.as_str(), cut), (before, Some(Cut::Echoed)), "{split}");
        }
        // A last event without its blank line is checked too.
        let (out, cut) = relay(&[before, "data: sk-echo-123"]);
        assert_eq!((out.as_str(), cut), (before, Some(Cut::Echoed)));
        let (out, cut) = relay(&[before, "data: x"]);
        assert_eq!((out, cut), (format!("{before}data: x"), None));
    }

    #[test]
    fn cr_line_ends_split_from_their_lf_end_no_event_early() {
        let (out, cut) = relay(&["data: a\r", "\ndata: sk-echo-", "123\r\n\r\n"]);
        assert_eq!((out.as_str(), cut), ("", Some(Cut::Echoed)));
    }

    #[test]
    fn headers_holding_the_key_are_dropped() {
        let mut headers = HeaderMap::new();
        headers.insert("x-debug", HeaderValue::from_static("key=sk-echo-123;"));
        headers.insert("request-id", HeaderValue::from_static("req_1"));
        assert!(drop_headers_holding(&mut headers, KEY));
        assert!(headers.get("x-debug").is_none() && headers.get("request-id").is_some());
        assert!(!drop_headers_holding(&mut headers, KEY));
        assert!(!holds(b"anything", b""));
    }
}
