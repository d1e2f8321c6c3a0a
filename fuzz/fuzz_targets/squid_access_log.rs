//! Squid access-log lines: any text must parse or be refused, never panic,
//! and an accepted line yields only printable text (the fields end up in
//! the audit log and on the terminal).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(event) = constle_egress::parse_access_line(line) {
        for text in [&event.host, &event.method, &event.squid_result] {
            assert!(!text.chars().any(char::is_control), "{text:?}");
        }
        if let Some(reason) = &event.reason {
            assert!(!reason.chars().any(char::is_control), "{reason:?}");
        }
        assert!(!(event.allowed && event.reason.is_some()));
    }
});
