//! Fuzz the Agentfile reader: any input, valid UTF-8 or not, must produce a
//! `Validated` or a `Rejected` (never a panic, a hang or unbounded memory),
//! and every diagnostic must render.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let no_env = |_: &str| None;
    let diagnostics = match constle_manifest::parse_str(&text, Path::new("fuzz.yaml"), &no_env) {
        Ok(validated) => validated.warnings,
        Err(rejected) => {
            assert!(!rejected.errors.is_empty());
            let _ = rejected.to_string();
            rejected.errors
        }
    };
    for d in diagnostics {
        let _ = d.to_string();
    }
});
