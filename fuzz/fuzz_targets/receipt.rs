//! Fuzz the run receipt parser of `constle-receipt`: nothing may panic,
//! whatever parses must re-encode to exactly the input (one spelling), and
//! verifying it, unpinned, must not panic either.
#![no_main]

use constle_receipt::Receipt;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(receipt) = Receipt::parse(data) else {
        return;
    };
    assert_eq!(receipt.to_bytes(), data, "a receipt must re-encode unchanged");
    assert_eq!(Receipt::parse(data).expect("re-parses"), receipt);
    if let Ok(verified) = receipt.verify(None) {
        assert_eq!(verified.receipt(), &receipt);
    }
});
