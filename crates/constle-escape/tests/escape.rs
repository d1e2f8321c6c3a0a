//! The definition of unsafe characters and the one-line `escape`.

use constle_escape::{escape, is_unsafe};

/// One row per class: text, and what `escape` shows for it.
const LINE: &[(&str, &str)] = &[
    ("plain text, ünïcode 漢字 🦀", "plain text, ünïcode 漢字 🦀"),
    ("a\x1b[2J\x1b[Hb", "a\\u{1b}[2J\\u{1b}[Hb"),
    ("\x1b]0;title\x07", "\\u{1b}]0;title\\u{7}"),
    ("x\ry", "x\\u{d}y"),
    ("ab\x08\x08cd", "ab\\u{8}\\u{8}cd"),
    ("\0", "\\u{0}"),
    ("one\ntwo\tthree", "one\\u{a}two\\u{9}three"),
    ("\x7f", "\\u{7f}"),
    ("\u{80}\u{9b}2J\u{9f}", "\\u{80}\\u{9b}2J\\u{9f}"),
    ("\u{202e}evil\u{2066}", "\\u{202e}evil\\u{2066}"),
    (
        "\u{61c}\u{200e}\u{200f}\u{202a}\u{2069}",
        "\\u{61c}\\u{200e}\\u{200f}\\u{202a}\\u{2069}",
    ),
    // Invisible, so "ali\u{200b}ce" would look like "alice".
    (
        "ali\u{200b}ce\u{feff}\u{2060}\u{2064}\u{180e}\u{206f}\u{fffb}",
        "ali\\u{200b}ce\\u{feff}\\u{2060}\\u{2064}\\u{180e}\\u{206f}\\u{fffb}",
    ),
    (
        "\u{e0001}\u{e0041}\u{e007f}",
        "\\u{e0001}\\u{e0041}\\u{e007f}",
    ),
    ("one\u{2028}two\u{2029}", "one\\u{2028}two\\u{2029}"),
    // Neighbours of the unsafe ranges, the joiners emoji and scripts need,
    // and format characters a terminal shows are shown as they are.
    (
        " ~\u{a0}\u{202f}\u{2065}\u{e0080}",
        " ~\u{a0}\u{202f}\u{2065}\u{e0080}",
    ),
    (
        "👨\u{200d}👩\u{200d}👧 می\u{200c}خواهم",
        "👨\u{200d}👩\u{200d}👧 می\u{200c}خواهم",
    ),
    ("soft\u{ad}hyphen \u{600}1", "soft\u{ad}hyphen \u{600}1"),
    // Backslashes are not escaped: harmless, not reversible.
    ("\\u{1b}", "\\u{1b}"),
];

#[test]
fn escape_shows_each_class() {
    for (text, shown) in LINE {
        assert_eq!(escape(text), *shown, "escape({text:?})");
    }
}

#[test]
fn every_unsafe_character_and_only_those_is_shown_as_its_code_point() {
    for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
        let shown = match is_unsafe(c) {
            true => format!("\\u{{{:x}}}", u32::from(c)),
            false => c.to_string(),
        };
        assert_eq!(escape(&format!("a{c}b")), format!("a{shown}b"), "{c:?}");
    }
}

#[test]
fn every_control_character_is_unsafe() {
    for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
        if c.is_control() {
            assert!(is_unsafe(c), "{c:?}");
        }
    }
}
