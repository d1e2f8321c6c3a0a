//! The log verifier on arbitrary bytes: it must never panic, and a line it
//! accepts must be exactly the canonical form it was parsed from (so one
//! entry has one spelling): its JCS form with every character a terminal
//! must not be shown written as a `\u` escape, and none of them raw.

#![no_main]

use std::path::Path;

use constle_audit::{DayFile, TrustAnchors, verify_contents};
use constle_escape::is_unsafe;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(entry) = constle_audit::parse_line(data) {
        assert!(!data.contains(&b'\n'));
        assert!(entry.signature.is_some() == entry.did.is_some());
        let value: serde_json::Value =
            serde_json::from_slice(data).expect("accepted lines are JSON");
        let jcs = serde_json_canonicalizer::to_vec(&value).expect("JSON has a JCS form");
        assert_eq!(
            escaped(&jcs),
            data,
            "an accepted line is not its own JCS form with unsafe characters escaped"
        );
    }
    let path = Path::new("fuzz-2026-08-08.jsonl");
    let day = DayFile::from_path(path);
    let _ = verify_contents(path, day.as_ref(), data, &TrustAnchors::default());
});

/// `jcs` with each unsafe character (only strings hold any) written as the
/// `\u` escapes of its UTF-16 units, in lowercase hexadecimal.
fn escaped(jcs: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(jcs).expect("JCS is UTF-8");
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_unsafe(c) {
            for unit in c.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out.into_bytes()
}
