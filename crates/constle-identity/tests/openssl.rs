//! Interoperability with the real `openssl` command (OpenSSL 3.0 or later).
//!
//! Skipped, with the reason printed, when `openssl` is not installed, unless
//! `CONSTLE_E2E=require` (set by `.ci/run`), in which case that is a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use constle_identity::{KeyKind, KeyStore, Name, SigningIdentity};

/// Run `openssl ARGS`; `None` (after printing why) if it is not installed.
fn openssl(args: &[&str]) -> Option<Output> {
    match Command::new("openssl").args(args).output() {
        Ok(output) => Some(output),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                !common::e2e_required(),
                "openssl is not installed and CONSTLE_E2E=require: install openssl"
            );
            eprintln!("SKIPPED: openssl is not installed ({err}); install it to run this test");
            None
        }
        Err(err) => panic!("could not run openssl: {err}"),
    }
}

fn check_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The 32 raw key bytes of the public key OpenSSL reads from `file`.
fn openssl_public_key(file: &Path) -> Option<Vec<u8>> {
    let file = file.to_str().unwrap();
    let output = openssl(&["pkey", "-in", file, "-pubout", "-outform", "DER"])?;
    check_ok(&output, "openssl pkey -pubout");
    // SubjectPublicKeyInfo for Ed25519 is 12 bytes of header then the key.
    assert_eq!(output.stdout.len(), 44, "{:02x?}", output.stdout);
    Some(output.stdout[output.stdout.len() - 32..].to_vec())
}

#[test]
fn openssl_reads_generated_key_files() {
    let parent = tempfile::tempdir().unwrap();
    let store = KeyStore::open(&parent.path().join("home")).unwrap();
    let (did, path) = store
        .generate(KeyKind::Agent, &Name::new("interop").unwrap())
        .unwrap();
    let Some(output) = openssl(&["pkey", "-in", path.to_str().unwrap(), "-noout"]) else {
        return;
    };
    check_ok(&output, "openssl pkey -noout");
    let Some(public) = openssl_public_key(&path) else {
        return;
    };
    assert_eq!(public.as_slice(), did.verifying_key().as_bytes());
}

#[test]
fn openssl_reads_pem_for_many_keys() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0u8..4 {
        let identity = SigningIdentity::from_bytes(&[i.wrapping_mul(37); 32]);
        let path = dir.path().join(format!("k{i}.pem"));
        std::fs::write(&path, identity.to_pkcs8_pem().as_bytes()).unwrap();
        let Some(public) = openssl_public_key(&path) else {
            return;
        };
        assert_eq!(public.as_slice(), identity.did().verifying_key().as_bytes());
    }
}

#[test]
fn keys_made_by_openssl_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("openssl.pem");
    let Some(output) = openssl(&[
        "genpkey",
        "-algorithm",
        "ed25519",
        "-out",
        path.to_str().unwrap(),
    ]) else {
        return;
    };
    check_ok(&output, "openssl genpkey");
    let pem = std::fs::read_to_string(&path).unwrap();
    let identity = SigningIdentity::from_pkcs8_pem(&pem).unwrap();
    let Some(public) = openssl_public_key(&path) else {
        return;
    };
    assert_eq!(public.as_slice(), identity.did().verifying_key().as_bytes());
    // And we write it back exactly as OpenSSL did (both are v1).
    assert_eq!(*identity.to_pkcs8_pem(), pem);
}
