//! Ed25519 identities for Constle: who signed what, and where the private
//! keys live.
//!
//! Constle runs an untrusted AI agent and writes a signed audit log of what
//! it did. Every agent, and every human approver answering gate requests over
//! the webhook, is identified by an Ed25519 public key written as a
//! [`did:key`](https://w3c-ccg.github.io/did-method-key/) DID. This crate owns
//! those keys:
//!
//! - [`DidKey`]: a public key as `did:key:z6Mk…` — strict parsing (one key,
//!   one spelling; weak and non-canonical keys refused), printing, serde, and
//!   strict signature verification ([`DidKey::verify`] uses `verify_strict`).
//! - [`SigningIdentity`]: a private key with its DID. Signs; reads and writes
//!   PKCS#8 PEM. Written as PKCS#8 **v1** so that `openssl pkey` (OpenSSL 3.0)
//!   reads it; v1 and v2 are both read. No `Debug`, no `Clone`, zeroized on drop.
//! - [`KeyStore`]: the directory `$CONSTLE_HOME/keys` (`agent/` and
//!   `approver/`), mode 0700, key files 0600, created exclusively and never
//!   overwritten, found by name or by DID. It fails closed: directories or
//!   files that other users can access are refused with the `chmod` to run.
//! - [`Name`]: an agent or key name that is safe as one file-name component.
//!
//! What this crate does not do: print anything (the `constle` binary renders
//! errors), hold keys in memory longer than its caller does, or accept
//! encrypted key files (it cannot prompt for a password).
//!
//! ```
//! use constle_identity::{DidKey, SigningIdentity};
//!
//! let identity = SigningIdentity::generate();
//! let signature = identity.sign(b"audit line");
//!
//! // Anyone holding only the DID string can check the signature.
//! let did: DidKey = identity.did().to_string().parse()?;
//! assert!(did.to_string().starts_with("did:key:z6Mk"));
//! did.verify(b"audit line", &signature)?;
//! assert!(did.verify(b"edited line", &signature).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every error type is a `#[non_exhaustive]` enum (or a struct) whose message
//! says what is wrong and what to do instead. Text that came from outside
//! (a DID, a name, a PEM label) is escaped and shortened before it is put in
//! a message, so it cannot draw on the terminal it is shown on.

#![forbid(unsafe_code)]

mod did;
mod name;
mod signing;
mod store;

pub use did::{
    DID_KEY_PREFIX, DidKey, DidKeyError, ED25519_PUB_MULTICODEC, MAX_DID_LEN, SignatureError,
};
pub use name::{MAX_NAME_LEN, Name, NameError};
pub use signing::{KeyError, SigningIdentity};
pub use store::{KeyKind, KeyStore, KeyStoreError};

/// Re-exported so callers name the same `VerifyingKey` and `Signature` types.
pub use ed25519_dalek;

/// Escape untrusted text for an error message: control and non-ASCII
/// characters become escapes, and long text is cut short.
pub(crate) fn show(s: &str) -> String {
    const MAX_CHARS: usize = 80;
    let mut out = String::with_capacity(s.len().min(MAX_CHARS * 2) + 2);
    out.push('"');
    for (i, c) in s.chars().enumerate() {
        if i == MAX_CHARS {
            out.push_str("\"… (");
            out.push_str(&s.len().to_string());
            out.push_str(" bytes)");
            return out;
        }
        if c == '"' || c == '\\' || !(c.is_ascii_graphic() || c == ' ') {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::show;

    #[test]
    fn show_escapes_controls_and_truncates() {
        assert_eq!(show("abc"), "\"abc\"");
        assert_eq!(show("a\x1b[31m\n"), "\"a\\u{1b}[31m\\n\"");
        assert_eq!(show("é"), "\"\\u{e9}\"");
        let long = "x".repeat(200);
        let shown = show(&long);
        assert!(shown.ends_with("… (200 bytes)"), "{shown}");
        assert!(shown.len() < 100, "{shown}");
    }
}
