//! The log verifier on arbitrary bytes: it must never panic, and a line it
//! accepts must be exactly the canonical form it was parsed from (so one
//! entry has one spelling).

#![no_main]

use std::path::Path;

use constle_audit::{DayFile, TrustAnchors, verify_contents};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(entry) = constle_audit::parse_line(data) {
        assert!(!data.contains(&b'\n'));
        assert!(entry.signature.is_some() == entry.did.is_some());
        let value: serde_json::Value =
            serde_json::from_slice(data).expect("accepted lines are JSON");
        let canonical = serde_json_canonicalizer::to_vec(&value).expect("JSON has a JCS form");
        assert_eq!(canonical, data, "an accepted line is not its own JCS form");
    }
    let path = Path::new("fuzz-2026-08-08.jsonl");
    let day = DayFile::from_path(path);
    let _ = verify_contents(path, day.as_ref(), data, &TrustAnchors::default());
});
