//! Query names as text: the lower-case host name the policy judges, and the
//! escaped, bounded form a refusal record holds.

use std::fmt::Write as _;

use hickory_proto::rr::Name;

/// Longest name text a [`Refused`](crate::Refused) record holds whole: a
/// longer one (escaped bytes make a 255-byte wire name up to four times as
/// long) is cut before the piece that would cross it, and `…` appended.
pub const MAX_RECORDED_BYTES: usize = 256;

/// `name` as a host name would be written: labels in lower case, joined by
/// dots, no trailing dot. `None` for the root, or when a label holds a byte
/// no host name has (anything but letters, digits and `-`), so that only
/// text [`Hostname`](constle_manifest::Hostname)'s own rules can judge
/// reaches the policy.
pub(crate) fn host_text(name: &Name) -> Option<String> {
    let mut text = String::with_capacity(name.len());
    for label in name.iter() {
        if !label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        {
            return None;
        }
        if !text.is_empty() {
            text.push('.');
        }
        text.extend(label.iter().map(|b| char::from(b.to_ascii_lowercase())));
    }
    (!text.is_empty()).then_some(text)
}

/// `name` for a log: lower case, dots between labels, a dot or backslash
/// inside a label written `\.` or `\\`, and every byte outside visible
/// ASCII as `\DDD` (decimal, as in a zone file), so no control byte and no
/// ambiguity reaches the log; at most [`MAX_RECORDED_BYTES`] plus `…`.
/// The root is `.`.
pub(crate) fn recorded(name: &Name) -> String {
    let mut text = String::new();
    let mut piece = String::with_capacity(4);
    for (i, label) in name.iter().enumerate() {
        for (j, &byte) in label.iter().enumerate() {
            piece.clear();
            if i > 0 && j == 0 {
                piece.push('.');
            }
            escape(byte.to_ascii_lowercase(), &mut piece);
            if text.len() + piece.len() > MAX_RECORDED_BYTES {
                text.push('…');
                return text;
            }
            text.push_str(&piece);
        }
    }
    if text.is_empty() {
        text.push('.');
    }
    text
}

fn escape(byte: u8, out: &mut String) {
    match byte {
        b'.' | b'\\' => {
            out.push('\\');
            out.push(char::from(byte));
        }
        0x21..=0x7e => out.push(char::from(byte)),
        _ => {
            let _ = write!(out, "\\{byte:03}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(labels: &[&[u8]]) -> Name {
        Name::from_labels(labels.iter().copied()).unwrap()
    }

    #[test]
    fn host_text_is_lower_case_without_the_root_dot() {
        let n = Name::from_ascii("API.Example.COM.").unwrap();
        assert_eq!(host_text(&n).as_deref(), Some("api.example.com"));
        assert_eq!(host_text(&Name::root()), None);
    }

    #[test]
    fn host_text_refuses_bytes_no_host_name_has() {
        for label in [&b"a_b"[..], b"a b", b"a.b", b"\x00", b"\xc3\xa9", b"*"] {
            assert_eq!(host_text(&name(&[label, b"com"])), None, "{label:?}");
        }
    }

    #[test]
    fn recorded_escapes_everything_a_log_must_not_hold() {
        let n = name(&[b"A\nb\x1b[31m", b"x.y\\z", b"\xff"]);
        let text = recorded(&n);
        assert_eq!(text, "a\\010b\\027[31m.x\\.y\\\\z.\\255");
        assert!(!text.chars().any(char::is_control));
        assert_eq!(recorded(&Name::root()), ".");
    }

    #[test]
    fn recorded_is_bounded_and_never_cuts_an_escape() {
        let label = [0u8; 63];
        let n = name(&[&label, &label, &label, &label[..61]]);
        let text = recorded(&n);
        assert!(text.ends_with("\\000…"), "{text}");
        assert!(text.len() <= MAX_RECORDED_BYTES + '…'.len_utf8());
        let short = "a".repeat(63);
        let n = Name::from_ascii(format!("{short}.{short}.{short}.{}", &short[..61])).unwrap();
        assert_eq!(recorded(&n).len(), 253);
    }
}
