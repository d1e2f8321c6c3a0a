//! The stream escaper on arbitrary bytes, cut in two where its first two
//! bytes say: it must never panic, the output must not depend on the cut,
//! and nothing unsafe but newline and tab may reach the terminal.

#![no_main]

use constle_escape::{StreamEscaper, is_unsafe};
use libfuzzer_sys::fuzz_target;

fn escaped(pieces: &[&[u8]]) -> String {
    let mut escaper = StreamEscaper::new();
    let mut out = String::new();
    for piece in pieces {
        escaper.push(piece, &mut out);
    }
    escaper.finish(&mut out);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((at, stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let at = usize::from(u16::from_le_bytes(*at)).min(stream.len());
    let (first, second) = stream.split_at(at);
    let whole = escaped(&[stream]);
    assert_eq!(
        escaped(&[first, second]),
        whole,
        "the cut changed the output"
    );
    for c in whole.chars() {
        let passes = matches!(c, '\n' | '\t');
        assert!(
            passes || !(is_unsafe(c) || c.is_control()),
            "{c:?} reached the terminal"
        );
    }
});
