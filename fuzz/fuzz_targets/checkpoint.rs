//! Fuzz the checkpoint and note parsers of `constle-tlog`: a signed
//! checkpoint, a witness's `add-checkpoint` body, verifier keys and
//! cosignature lines. None may panic; whatever parses must re-encode to
//! exactly the input.
#![no_main]

use constle_identity::SigningIdentity;
use constle_tlog::{
    AddCheckpoint, LogKey, LogTree, Origin, SignedCheckpoint, VerifiedCheckpoint, WitnessKey,
    sign_checkpoint, verify_cosignature,
};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

/// A genuine checkpoint and a witness key, made once.
static FIXED: LazyLock<(VerifiedCheckpoint, WitnessKey)> = LazyLock::new(|| {
    let agent = SigningIdentity::from_bytes(&[1; 32]);
    let origin = Origin::parse("ci.example.com/constle/bot").expect("an origin");
    let key = LogKey::new(origin, agent.did());
    let mut tree = LogTree::new();
    tree.push(b"line");
    let signed = sign_checkpoint(&agent, &key, tree.head()).expect("signs");
    let verified = signed.verify(&key).expect("verifies");
    let witness = WitnessKey::new("w.example/1", SigningIdentity::from_bytes(&[2; 32]).did())
        .expect("a witness key");
    (verified, witness)
});

fuzz_target!(|data: &[u8]| {
    if let Ok(checkpoint) = SignedCheckpoint::parse(data) {
        assert_eq!(
            checkpoint.as_bytes(),
            data,
            "a checkpoint must re-encode unchanged"
        );
        let again = SignedCheckpoint::parse(checkpoint.as_bytes()).expect("re-parses");
        assert_eq!(again, checkpoint);
        for line in checkpoint.signature_lines() {
            assert!(line.starts_with("— ".as_bytes()));
        }
        if let Ok(origin) = Origin::parse(checkpoint.claimed_origin()) {
            let key = LogKey::new(origin, SigningIdentity::from_bytes(&[1; 32]).did());
            let _ = checkpoint.verify(&key);
        }
    }
    if let Ok(request) = AddCheckpoint::parse(data) {
        assert_eq!(
            request.to_bytes(),
            data,
            "a request must re-encode unchanged"
        );
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(key) = LogKey::from_vkey(text) {
        assert_eq!(key.vkey(), text, "a vkey must print back unchanged");
    }
    if let Ok(key) = WitnessKey::from_vkey(text) {
        assert_eq!(key.vkey(), text, "a vkey must print back unchanged");
    }
    // Any line as a cosignature of a fixed, genuine checkpoint.
    let (verified, witness) = &*FIXED;
    let _ = verify_cosignature(verified, witness, text);
});
