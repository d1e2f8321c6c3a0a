//! How the canonical form writes a string: RFC 8785 exactly, or RFC 8785
//! with the characters a terminal must not be shown written as escapes.
//!
//! RFC 8785 (JCS) writes strings as ECMAScript's `JSON.stringify` does:
//! only `"`, `\` and the C0 controls are escaped, everything else is written
//! as it is. So a right-to-left override (U+202E) that an agent got into a
//! value reaches the bytes raw, and `cat` of those bytes shows reversed
//! text. [`Spelling::TerminalSafe`] writes every such character as a JSON
//! escape instead: the text a JSON reader gets is the same, and the bytes
//! hold no character that acts on a terminal.

use constle_escape::is_unsafe;

/// How strings are written in a canonical form. Each spelling gives every
/// value exactly one form; the two agree on every string that holds no
/// character [`constle_escape::is_unsafe`] names but the C0 controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Spelling {
    /// RFC 8785 exactly: `"` and `\` escaped, C0 controls as `\b`, `\t`,
    /// `\n`, `\f`, `\r` or `\u00xx`, every other character as it is.
    Jcs,
    /// RFC 8785, except that every other character
    /// [`constle_escape::is_unsafe`] names (DEL, the C1 controls,
    /// bidirectional and invisible format characters, U+2028 and U+2029)
    /// is written as a `\uxxxx` escape too, in lowercase hexadecimal as JCS
    /// writes C0 controls; one above U+FFFF as its UTF-16 surrogate pair
    /// (`\udb40\udc41` for U+E0041). The audit log is written so.
    TerminalSafe,
}

impl Spelling {
    /// Whether `text` is written as it is, between quotes, with nothing
    /// escaped.
    pub(crate) fn writes_as_is(self, text: &str) -> bool {
        let bytes = text.as_bytes();
        let jcs_plain = |b: u8| (b >= 0x20) & (b != b'"') & (b != b'\\');
        // Scans without early exit, which the compiler vectorises, settle
        // the common cases.
        match self {
            Spelling::Jcs => bytes.iter().fold(true, |all, &b| all & jcs_plain(b)),
            Spelling::TerminalSafe => {
                let printable = |b: u8| jcs_plain(b) & (b < 0x7f);
                bytes.iter().fold(true, |all, &b| all & printable(b))
                    || (bytes.iter().all(|&b| jcs_plain(b)) && !self.holds_raw(text))
            }
        }
    }

    /// Whether `text` (a string's characters, or a JSON string as written,
    /// quotes and all) holds a character this spelling must escape beyond
    /// what JCS escapes.
    pub(crate) fn holds_raw(self, text: &str) -> bool {
        match self {
            Spelling::Jcs => false,
            Spelling::TerminalSafe => {
                let suspect = text.bytes().fold(false, |any, b| any | may_start_unsafe(b));
                // Suspect bytes start characters (none continues one), so
                // only the characters they start need a look.
                suspect
                    && text
                        .bytes()
                        .enumerate()
                        .filter(|(_, b)| may_start_unsafe(*b))
                        .any(|(at, _)| {
                            text.get(at..)
                                .and_then(|rest| rest.chars().next())
                                .is_some_and(is_unsafe)
                        })
            }
        }
    }

    /// Whether `c` is written as an escape.
    fn escapes(self, c: char) -> bool {
        match c {
            '\u{0}'..='\u{1f}' | '"' | '\\' => true,
            _ => self == Spelling::TerminalSafe && is_unsafe(c),
        }
    }
}

/// Whether `byte` may start the UTF-8 form of a character at or above DEL
/// that [`is_unsafe`] names: DEL itself, and the lead bytes of U+0080 to
/// U+009F, U+061C, U+180E, U+200B to U+206F, U+FEFF to U+FFFB, U+13430 to
/// U+1D17A and the tag characters (a test pins this against
/// [`is_unsafe`]). Text without such a byte, most text, is settled by one
/// scan of its bytes.
const fn may_start_unsafe(byte: u8) -> bool {
    matches!(byte, 0x7f | 0xc2 | 0xd8 | 0xe1 | 0xe2 | 0xef | 0xf0 | 0xf3)
}

/// Writes `text` as a JSON string in `spelling`.
pub(crate) fn write_string(text: &str, spelling: Spelling, out: &mut Vec<u8>) {
    out.push(b'"');
    if spelling.writes_as_is(text) {
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
        return;
    }
    let bytes = text.as_bytes();
    let mut plain_from = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let c = match byte {
            b'"' | b'\\' => char::from(byte),
            // Printable ASCII, and the bytes that continue a character.
            0x20..0x7f | 0x80..0xc0 => continue,
            0..0x80 => char::from(byte),
            _ if spelling == Spelling::Jcs || !may_start_unsafe(byte) => continue,
            _ => match text.get(i..).and_then(|rest| rest.chars().next()) {
                Some(c) => c,
                None => continue,
            },
        };
        if spelling.escapes(c) {
            out.extend_from_slice(&bytes[plain_from..i]);
            push_escape(c, out);
            plain_from = i + c.len_utf8();
        }
    }
    out.extend_from_slice(&bytes[plain_from..]);
    out.push(b'"');
}

/// The escape of `c`: the short form where JSON has one, else `\uxxxx`
/// (two of them, a surrogate pair, above U+FFFF).
fn push_escape(c: char, out: &mut Vec<u8>) {
    let short: &[u8] = match c {
        '"' => b"\\\"",
        '\\' => b"\\\\",
        '\u{8}' => b"\\b",
        '\t' => b"\\t",
        '\n' => b"\\n",
        '\u{c}' => b"\\f",
        '\r' => b"\\r",
        _ => {
            let mut units = [0; 2];
            for unit in c.encode_utf16(&mut units) {
                push_unicode_escape(*unit, out);
            }
            return;
        }
    };
    out.extend_from_slice(short);
}

/// `\u` and four lowercase hexadecimal digits.
fn push_unicode_escape(unit: u16, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(b"\\u");
    for shift in [12, 8, 4, 0] {
        out.push(HEX[usize::from((unit >> shift) & 0xf)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unsafe_character_beyond_c0_starts_with_a_suspect_byte() {
        let mut utf8 = [0; 4];
        for c in ('\u{20}'..=char::MAX).filter(|c| is_unsafe(*c)) {
            let first = c.encode_utf8(&mut utf8).as_bytes()[0];
            assert!(may_start_unsafe(first), "{c:?} starts with {first:#x}");
        }
    }
}
