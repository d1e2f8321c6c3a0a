//! The stream escaper: each class of unsafe input, every way of cutting it,
//! and properties over arbitrary streams.

use constle_escape::{StreamEscaper, escape, is_unsafe};
use proptest::prelude::*;

/// One row per class: the agent's bytes, and what the terminal is shown.
const STREAM: &[(&[u8], &str)] = &[
    (b"plain text\n", "plain text\n"),
    ("ünïcode 漢字 🦀".as_bytes(), "ünïcode 漢字 🦀"),
    (b"\x1b[2J\x1b[Happrove? ", "\\u{1b}[2J\\u{1b}[Happrove? "),
    (b"\x1b]0;title\x07", "\\u{1b}]0;title\\u{7}"),
    (b"\x1b[6n", "\\u{1b}[6n"),
    (b"done\rfake", "done\\u{d}fake"),
    (b"ab\x08\x08cd", "ab\\u{8}\\u{8}cd"),
    (b"\x07\0\x0b\x0c", "\\u{7}\\u{0}\\u{b}\\u{c}"),
    (b"\x7f", "\\u{7f}"),
    (b"line\n\tindented\n", "line\n\tindented\n"),
    // C1 controls written as UTF-8, and the raw 8-bit CSI, which is not.
    ("\u{9b}2J\u{80}\u{9f}".as_bytes(), "\\u{9b}2J\\u{80}\\u{9f}"),
    (b"\x9b2J", "\\x{9b}2J"),
    ("\u{202e}evil\u{2066}".as_bytes(), "\\u{202e}evil\\u{2066}"),
    (
        "\u{61c}\u{200e}\u{200f}".as_bytes(),
        "\\u{61c}\\u{200e}\\u{200f}",
    ),
    (
        "a\u{200b}b\u{feff}\u{e0041}\u{2028}".as_bytes(),
        "a\\u{200b}b\\u{feff}\\u{e0041}\\u{2028}",
    ),
    // Not UTF-8: stray bytes, a bad continuation, an overlong slash, a
    // surrogate, a code point past U+10FFFF, a sequence cut off at the end.
    (b"\xff\xfe", "\\x{ff}\\x{fe}"),
    (b"\xc3(", "\\x{c3}("),
    (b"\xc0\xaf", "\\x{c0}\\x{af}"),
    (b"\xed\xa0\x80", "\\x{ed}\\x{a0}\\x{80}"),
    (b"\xf4\x90\x80\x80", "\\x{f4}\\x{90}\\x{80}\\x{80}"),
    (b"ok\xf0\x9f\xa6", "ok\\x{f0}\\x{9f}\\x{a6}"),
    (b"\xe2\x9c\xe2\x9c\x93", "\\x{e2}\\x{9c}✓"),
    // Backslashes pass: harmless, not reversible.
    (b"\\u{1b}\\x{9b}", "\\u{1b}\\x{9b}"),
];

/// The stream cut into `pieces`, escaped.
fn escaped<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut escaper = StreamEscaper::new();
    let mut out = String::new();
    for piece in pieces {
        escaper.push(piece, &mut out);
    }
    escaper.finish(&mut out);
    out
}

/// `bytes` cut at each of `cuts` (ascending offsets).
fn cut<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let ends = cuts.iter().copied().chain([bytes.len()]);
    let starts = [0].into_iter().chain(cuts.iter().copied());
    starts
        .zip(ends)
        .map(|(start, end)| &bytes[start..end])
        .collect()
}

#[test]
fn each_class_is_shown_as_the_table_says() {
    for (bytes, shown) in STREAM {
        assert_eq!(escaped([*bytes]), *shown, "{bytes:?}");
    }
}

/// Every one or two cuts, so a sequence is also split across three pieces
/// and an empty piece comes between two others.
#[test]
fn each_class_is_shown_the_same_however_it_is_cut() {
    for (bytes, shown) in STREAM {
        for first in 0..=bytes.len() {
            for second in first..=bytes.len() {
                let pieces = cut(bytes, &[first, second]);
                assert_eq!(
                    escaped(pieces),
                    *shown,
                    "{bytes:?} cut at {first}, {second}"
                );
            }
        }
    }
}

/// Streams rich in what is hard to escape: controls, bidi characters,
/// characters of every UTF-8 length, stray bytes and cut-off sequences.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        "[ -~]{1,20}".prop_map(String::into_bytes),
        any::<char>().prop_map(|c| c.to_string().into_bytes()),
        "[\u{0}-\u{a0}\u{61c}\u{200b}-\u{200f}\u{2028}-\u{206f}\u{feff}\u{e0000}-\u{e0080}]"
            .prop_map(String::into_bytes),
        any::<u8>().prop_map(|b| vec![b]),
        any::<char>().prop_map(|c| {
            let bytes = c.to_string().into_bytes();
            bytes[..bytes.len().div_ceil(2)].to_vec()
        }),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

/// Ascending offsets into a stream of `len` bytes.
fn cuts(len: usize, indices: &[prop::sample::Index]) -> Vec<usize> {
    let mut cuts: Vec<usize> = indices.iter().map(|i| i.index(len + 1)).collect();
    cuts.sort_unstable();
    cuts
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn output_does_not_depend_on_how_the_stream_is_cut(
        bytes in stream(),
        indices in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let pieces = cut(&bytes, &cuts(bytes.len(), &indices));
        prop_assert_eq!(escaped(pieces), escaped([&bytes[..]]));
    }

    #[test]
    fn output_holds_nothing_unsafe_but_newline_and_tab(bytes in stream()) {
        let out = escaped([&bytes[..]]);
        prop_assert!(std::str::from_utf8(out.as_bytes()).is_ok());
        for c in out.chars() {
            let passes = matches!(c, '\n' | '\t');
            prop_assert!(passes || !(is_unsafe(c) || c.is_control()), "{:?} in {:?}", c, out);
        }
    }

    #[test]
    fn safe_text_is_shown_as_it_is(
        text in prop::collection::vec(
            any::<char>().prop_filter("safe", |&c| !is_unsafe(c) || c == '\n' || c == '\t'),
            0..100,
        ).prop_map(String::from_iter),
        indices in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let pieces = cut(text.as_bytes(), &cuts(text.len(), &indices));
        prop_assert_eq!(escaped(pieces), text);
    }

    /// One definition: a stream and a one-line field escape alike, but for
    /// newline and tab.
    #[test]
    fn text_is_escaped_as_escape_does(bytes in stream()) {
        let text = String::from_utf8_lossy(&bytes).replace(['\n', '\t'], "");
        prop_assert_eq!(escaped([text.as_bytes()]), escape(&text));
    }
}
