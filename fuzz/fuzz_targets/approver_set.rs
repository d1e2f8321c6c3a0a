//! Fuzz the approver-set version parser: any input must parse or be
//! refused with an error that renders (never a panic, a hang or unbounded
//! memory); what parses must write back to bytes that parse to the same
//! version with the same digest, and verifying it as a chain from its own
//! digest must not panic either.

#![no_main]

use constle_approver_set::{Location, SetPin, VersionFile, verify_chain};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let location = Location::Given(0);
    match VersionFile::parse(data, &location) {
        Ok(file) => {
            let written = file.to_bytes();
            let again = VersionFile::parse(&written, &location).expect("written bytes parse");
            assert_eq!(again, file);
            assert_eq!(again.digest(), file.digest());
            assert_eq!(again.to_bytes(), written);
            let pin = SetPin::new(file.digest());
            if let Err(err) = verify_chain(&pin, &[data]) {
                let _ = err.to_string();
            }
        }
        Err(err) => {
            let _ = err.to_string();
        }
    }
});
