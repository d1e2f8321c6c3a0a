//! Escaping a byte stream that arrives in pieces.

use crate::{is_unsafe, push_escaped, push_hex};

/// The longest incomplete UTF-8 sequence: a four-byte one lacking its last.
const MAX_TAIL: usize = 3;

/// Escapes an agent's output as it arrives, piece by piece, for a terminal.
///
/// Newline and tab pass, so the output keeps its lines and columns; every
/// other [unsafe](crate::is_unsafe) character is shown as `\u{..}`, and
/// every byte that is not part of well-formed UTF-8 as `\x{..}`. A UTF-8
/// sequence cut between two pieces is kept back until the next one, so the
/// output does not depend on how the stream was cut; [`finish`] shows what
/// is still kept back at the end.
///
/// ```
/// use constle_escape::StreamEscaper;
///
/// let mut escaper = StreamEscaper::new();
/// let mut shown = String::new();
/// escaper.push(b"\x1b[2Jok \xe2\x9c", &mut shown);
/// escaper.push(b"\x93\n\xff", &mut shown);
/// escaper.finish(&mut shown);
/// assert_eq!(shown, "\\u{1b}[2Jok ✓\n\\x{ff}");
/// ```
///
/// [`finish`]: StreamEscaper::finish
#[derive(Debug, Default)]
pub struct StreamEscaper {
    /// The start of a UTF-8 sequence the last piece ended in the middle of:
    /// at most [`MAX_TAIL`] bytes.
    tail: Vec<u8>,
}

impl StreamEscaper {
    /// An escaper at the start of a stream.
    pub fn new() -> StreamEscaper {
        StreamEscaper::default()
    }

    /// Appends the next piece of the stream, escaped, to `out`. An
    /// incomplete UTF-8 sequence at its end is kept for the next piece.
    pub fn push(&mut self, piece: &[u8], out: &mut String) {
        let mut piece = piece;
        if !self.tail.is_empty() {
            let carried = self.tail.len();
            let joined = piece.len().min(MAX_TAIL);
            self.tail.extend_from_slice(&piece[..joined]);
            let done = push_complete(out, &self.tail);
            if joined == piece.len() {
                self.tail.drain(..done);
                return;
            }
            // What `push_complete` leaves is an incomplete sequence of at
            // most three bytes at the end; with three of the piece's bytes
            // joined, those all come from the piece, so `done >= carried`.
            self.tail.clear();
            piece = &piece[done - carried..];
        }
        let done = push_complete(out, piece);
        self.tail.extend_from_slice(&piece[done..]);
    }

    /// Ends the stream: an incomplete UTF-8 sequence still kept back is
    /// shown as `\x{..}` bytes.
    pub fn finish(self, out: &mut String) {
        for &byte in &self.tail {
            push_hex(out, 'x', byte.into());
        }
    }
}

/// Whether a stream escapes `c`: newline and tab pass, so output keeps its
/// lines and columns.
fn escapes_in_stream(c: char) -> bool {
    is_unsafe(c) && !matches!(c, '\n' | '\t')
}

/// Appends `bytes` escaped, except an incomplete UTF-8 sequence at the end,
/// which the next piece may complete; returns how many bytes it escaped.
///
/// `str::from_utf8` rather than `<[u8]>::utf8_chunks`, which is several
/// times slower on the plain text that is most output.
fn push_complete(out: &mut String, bytes: &[u8]) -> usize {
    let mut done = 0;
    loop {
        let rest = &bytes[done..];
        let err = match std::str::from_utf8(rest) {
            Ok(text) => {
                push_escaped(out, text, escapes_in_stream);
                return bytes.len();
            }
            Err(err) => err,
        };
        let (valid, invalid) = rest.split_at(err.valid_up_to());
        // Well-formed up to `valid_up_to`, so this second check cannot fail.
        push_escaped(
            out,
            std::str::from_utf8(valid).unwrap_or_default(),
            escapes_in_stream,
        );
        done += valid.len();
        // No length: the input ended inside a sequence.
        let Some(len) = err.error_len() else {
            return done;
        };
        for &byte in &invalid[..len] {
            push_hex(out, 'x', byte.into());
        }
        done += len;
    }
}
