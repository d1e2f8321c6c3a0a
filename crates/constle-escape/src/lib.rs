//! What may reach the operator's terminal from text constle did not write.
//!
//! The agent is hostile, and a terminal obeys what it prints: `ESC[2J ESC[H`
//! clears the screen so a fake approval prompt can be drawn on it, a carriage
//! return or backspaces rewrite a line already shown, other sequences set
//! the window title, query the terminal (whose reply arrives as typed
//! input) or change its modes. Every byte the agent controls therefore goes
//! through this crate before it is printed: names, paths and messages shown
//! on one line, and the agent's own standard output and error.
//!
//! [`is_unsafe`] is the one definition of which characters must not reach a
//! terminal as they are:
//!
//! - C0 controls, U+0000–U+001F: ESC starts every escape sequence; CR, BS
//!   and TAB move the cursor; BEL, NUL and the rest act or vanish.
//! - DEL, U+007F.
//! - C1 controls, U+0080–U+009F: CSI (U+009B), OSC (U+009D) and DCS
//!   (U+0090) start sequences on terminals that honour 8-bit controls.
//! - Unicode bidirectional formatting characters (U+061C, U+200E, U+200F,
//!   U+202A–U+202E, U+2066–U+2069): they reorder what is shown, so text can
//!   read differently from what it says.
//! - Invisible format characters: U+200B ZERO WIDTH SPACE, U+2060–U+2064
//!   (word joiner, invisible operators), U+FEFF (byte order mark), U+180E,
//!   the deprecated U+206A–U+206F, the annotation marks U+FFF9–U+FFFB, the
//!   tag characters U+E0000–U+E007F, and the rare invisible controls
//!   U+13430–U+1343F, U+1BCA0–U+1BCA3 and U+1D173–U+1D17A. They show
//!   nothing, so two different texts (a tool's arguments in the human
//!   gate's prompt, say) would look the same, and tag characters can carry
//!   a hidden message to any model the output is pasted into. This is the
//!   Unicode category Cf except: U+200C and U+200D (zero width non-joiner
//!   and joiner), which emoji sequences and several scripts need, and the
//!   format characters a terminal shows (the soft hyphen and the prefixed
//!   number marks such as U+0600).
//! - U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR: line breaks that
//!   terminals do not agree on; output has one line break, `\n`.
//!
//! # Formats
//!
//! An unsafe character is shown as `\u{..}`, its code point in lowercase
//! hexadecimal without leading zeros, as Rust writes it: ESC is `\u{1b}`.
//! In a byte stream, a byte that is not part of well-formed UTF-8 is shown
//! as `\x{..}`, two lowercase hexadecimal digits: a raw 8-bit CSI is
//! `\x{9b}`. Everything else is shown as it is, backslashes included, so
//! output stays readable. The escaping is for harmlessness, not
//! reversibility: `\u{1b}` on the screen may be an escaped ESC or six
//! characters the agent wrote, but neither acts on the terminal.
//!
//! # Which function
//!
//! - [`escape`]: one-line fields (a tool name, a path, an error message).
//!   Newline and tab are escaped too, so the field stays on its line.
//! - [`StreamEscaper`]: the agent's output, as bytes in pieces as they are
//!   read. Newline and tab pass; bytes that are not UTF-8 are shown as
//!   `\x{..}`; a character cut between two pieces is put back together.
//! - [`forward`]: a blocking copy from the agent's pipe to the terminal
//!   through a [`StreamEscaper`], which keeps reading (and discards) when
//!   the terminal side fails, so the agent never blocks on a full pipe:
//!   `constle_escape::forward(pipe, std::io::stdout())`.

#![forbid(unsafe_code)]

mod forward;
mod stream;

pub use forward::{CHUNK_BYTES, ForwardReport, forward};
pub use stream::StreamEscaper;

/// Whether `c` must not reach a terminal as it is: a C0 or C1 control,
/// DEL, a bidirectional formatting character, an invisible format
/// character, or a line or paragraph separator (see the crate
/// documentation for why each).
pub fn is_unsafe(c: char) -> bool {
    matches!(
        c,
        '\u{0}'..='\u{1f}'
            | '\u{7f}'..='\u{9f}'
            | '\u{61c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{180e}'
            | '\u{200b}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{2060}'..='\u{2064}'
            | '\u{206a}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e007f}'
    )
}

/// Makes text that did not come from us safe to print on one line: every
/// [unsafe](is_unsafe) character, newline included, is shown as `\u{..}`
/// (ESC as `\u{1b}`) instead of acting on the terminal.
pub fn escape(text: &str) -> String {
    let mut safe = String::with_capacity(text.len());
    push_escaped(&mut safe, text, is_unsafe);
    safe
}

/// Appends `text` to `out` with every character for which `escapes` holds
/// shown as `\u{..}`.
fn push_escaped(out: &mut String, text: &str, escapes: impl Fn(char) -> bool) {
    let mut rest = text;
    loop {
        let (safe, tail) = rest.split_at(safe_len(rest, &escapes));
        out.push_str(safe);
        let mut chars = tail.chars();
        let Some(c) = chars.next() else { return };
        push_hex(out, 'u', c.into());
        rest = chars.as_str();
    }
}

/// The length of the longest prefix of `text` with nothing to escape.
fn safe_len(text: &str, escapes: impl Fn(char) -> bool) -> usize {
    let mut len = 0;
    loop {
        len += printable_ascii_len(&text.as_bytes()[len..]);
        // Other characters one by one, until printable ASCII comes again.
        for c in text[len..].chars() {
            if matches!(c, ' '..='~') {
                break;
            }
            if escapes(c) {
                return len;
            }
            len += c.len_utf8();
        }
        if len == text.len() {
            return len;
        }
    }
}

/// The length of the longest prefix of `bytes` in U+0020–U+007E, which no
/// caller escapes. Most output is such text, so it is checked 16 bytes at a
/// time without early exit, which the compiler turns into vector
/// instructions.
fn printable_ascii_len(bytes: &[u8]) -> usize {
    let printable = |b: &u8| (b' '..=b'~').contains(b);
    let blocks = bytes
        .chunks_exact(16)
        .take_while(|block| block.iter().fold(true, |all, b| all & printable(b)))
        .count();
    let len = blocks * 16;
    len + bytes[len..].iter().take_while(|b| printable(b)).count()
}

/// Appends `\u{..}` (`kind` `u`) or `\x{..}` (`kind` `x`) with `value` in
/// lowercase hexadecimal, without leading zeros.
fn push_hex(out: &mut String, kind: char, value: u32) {
    out.push('\\');
    out.push(kind);
    out.push('{');
    let digits = (u32::BITS - value.leading_zeros()).div_ceil(4).max(1);
    for shift in (0..digits).rev() {
        let digit = (value >> (shift * 4)) & 0xf;
        out.push(char::from(b"0123456789abcdef"[digit as usize]));
    }
    out.push('}');
}
