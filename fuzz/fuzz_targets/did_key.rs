//! Fuzz `DidKey::parse`: it must never panic, and whatever it accepts must
//! print back as exactly the input and parse again to the same key.
#![no_main]

use constle_identity::DidKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(did) = DidKey::parse(text) {
        let printed = did.to_string();
        assert_eq!(printed, text, "a parsed DID must print back unchanged");
        let again = DidKey::parse(&printed).expect("a printed DID must parse");
        assert_eq!(again, did);
        assert_eq!(again.verifying_key(), did.verifying_key());
    }
});
