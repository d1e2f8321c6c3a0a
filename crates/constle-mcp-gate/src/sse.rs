//! A small incremental parser and writer for `text/event-stream` bodies, as
//! far as the gate needs: it reads the server's events, and writes back the
//! filtered ones.

use crate::inspect::MAX_BODY_BYTES;

/// Longest line or event the gate buffers; a stream exceeding it is cut.
const MAX_EVENT_BYTES: usize = MAX_BODY_BYTES + 4096;

/// One server-sent event: the fields the gate keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) event: Option<Vec<u8>>,
    pub(crate) id: Option<Vec<u8>>,
    pub(crate) retry: Option<Vec<u8>>,
    /// The `data` lines, joined with `\n`; `None` when there was none.
    pub(crate) data: Option<Vec<u8>>,
}

impl Event {
    fn is_empty(&self) -> bool {
        self.event.is_none() && self.id.is_none() && self.retry.is_none() && self.data.is_none()
    }

    /// Writes the event with `data` in place of its own (none: an event
    /// without data, which still moves the agent's last event id on).
    pub(crate) fn write(&self, data: Option<&[u8]>, out: &mut Vec<u8>) {
        let mut field = |name: &[u8], value: &[u8]| {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.push(b'\n');
        };
        if let (Some(_), Some(event)) = (data, &self.event) {
            field(b"event", event);
        }
        if let Some(id) = &self.id {
            field(b"id", id);
        }
        if let Some(retry) = &self.retry {
            field(b"retry", retry);
        }
        let wrote_data = data.is_some();
        if let Some(data) = data {
            for line in data.split(|&b| b == b'\n') {
                field(b"data", line);
            }
        }
        if wrote_data || self.id.is_some() || self.retry.is_some() {
            out.push(b'\n');
        }
    }
}

/// The stream broke the gate's limits.
#[derive(Debug)]
pub(crate) struct TooLong;

/// Splits a byte stream into events.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    buf: Vec<u8>,
    event: Event,
    size: usize,
}

impl Parser {
    /// Feeds one chunk; returns the events it completed.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Event>, TooLong> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + pos;
            let mut line = &self.buf[start..end];
            if let Some(stripped) = line.strip_suffix(b"\r") {
                line = stripped;
            }
            self.size += line.len();
            if self.size > MAX_EVENT_BYTES {
                return Err(TooLong);
            }
            if line.is_empty() {
                let event = std::mem::take(&mut self.event);
                self.size = 0;
                if !event.is_empty() {
                    events.push(event);
                }
            } else if !line.starts_with(b":") {
                let (name, value) = match line.iter().position(|&b| b == b':') {
                    Some(colon) => {
                        let value = &line[colon + 1..];
                        (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
                    }
                    None => (line, &b""[..]),
                };
                match name {
                    b"data" => match &mut self.event.data {
                        Some(data) => {
                            data.push(b'\n');
                            data.extend_from_slice(value);
                        }
                        None => self.event.data = Some(value.to_vec()),
                    },
                    b"id" => self.event.id = Some(value.to_vec()),
                    b"event" => self.event.event = Some(value.to_vec()),
                    b"retry" => self.event.retry = Some(value.to_vec()),
                    _ => {}
                }
            }
            start = end + 1;
        }
        self.buf.drain(..start);
        if self.buf.len() > MAX_EVENT_BYTES {
            return Err(TooLong);
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_and_line_endings() {
        let mut parser = Parser::default();
        let mut events = parser
            .push(b": comment\r\nid: 1\r\nevent: message\r\nda")
            .unwrap();
        assert!(events.is_empty());
        events.extend(
            parser
                .push(b"ta: {\"a\":1}\r\n\r\ndata:x\ndata: y\n\nid: 3\n\n")
                .unwrap(),
        );
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].id.as_deref(), Some(&b"1"[..]));
        assert_eq!(events[0].event.as_deref(), Some(&b"message"[..]));
        assert_eq!(events[0].data.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(events[1].data.as_deref(), Some(&b"x\ny"[..]));
        assert_eq!(events[2].data, None);
        let mut out = Vec::new();
        events[0].write(Some(b"{}"), &mut out);
        events[2].write(None, &mut out);
        assert_eq!(out, b"event: message\nid: 1\ndata: {}\n\nid: 3\n\n");
    }

    #[test]
    fn an_endless_line_is_cut() {
        let mut parser = Parser::default();
        let chunk = vec![b'a'; 1024 * 1024];
        let mut result = Ok(Vec::new());
        for _ in 0..6 {
            result = parser.push(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert!(result.is_err());
    }
}
