//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

/// Decode lowercase or uppercase hex; panics on bad input (test vectors only).
pub fn hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd-length hex {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// Decode hex into a fixed-size array.
pub fn hex_array<const N: usize>(s: &str) -> [u8; N] {
    hex(s).try_into().expect("hex of the expected length")
}

/// Encode bytes as lowercase hex.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a test that needs an outside tool must run (`CONSTLE_E2E=require`,
/// set by `.ci/run`) rather than skip.
pub fn e2e_required() -> bool {
    std::env::var("CONSTLE_E2E").is_ok_and(|v| v == "require")
}
