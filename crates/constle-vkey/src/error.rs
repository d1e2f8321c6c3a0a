//! Why a name or a key is refused.

use constle_identity::NameError;

/// Why a deployment name or an origin is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OriginError {
    /// Not a lowercase DNS-style name.
    #[error(
        "deployment {deployment:?}: {reason}; use lowercase DNS labels such as `ci.example.com`"
    )]
    InvalidDeployment {
        /// The name given.
        deployment: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The agent part is not an agent name.
    #[error("the agent in origin {origin:?} is not a valid agent name: {source}")]
    InvalidAgent {
        /// The origin given.
        origin: String,
        /// Why the name is refused.
        source: NameError,
    },
    /// Not of the form `<deployment>/constle/<agent>`.
    #[error("origin {origin:?} is not a Constle log's origin, `<deployment>/constle/<agent>`")]
    NotConstle {
        /// The origin given.
        origin: String,
    },
}

/// Why a verifier key (`name+keyid+base64key`) or key name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Not three `+`-separated parts with an 8-digit lowercase hex key ID and
    /// canonical base64.
    #[error("verifier key {vkey:?} is not `<name>+<8 lowercase hex digits>+<base64>`")]
    Format {
        /// The text given.
        vkey: String,
    },
    /// A key name with a space, a `+`, a control character, or empty.
    #[error("key name {name:?} must be 1 to 255 bytes without spaces, `+` or control characters")]
    InvalidName {
        /// The name given.
        name: String,
    },
    /// The key is of another signature type (0x01 log key, 0x04 cosigner).
    #[error("verifier key of type 0x{found:02x} where a key of type 0x{expected:02x} was needed")]
    WrongType {
        /// The type byte wanted.
        expected: u8,
        /// The type byte found.
        found: u8,
    },
    /// The key material is not an Ed25519 public key of large order.
    #[error("verifier key {name:?}: not a usable Ed25519 public key")]
    BadKey {
        /// The key's name.
        name: String,
    },
    /// The key ID is not the one computed from name and key.
    #[error("verifier key {name:?}: key ID {found:08x} should be {expected:08x}")]
    KeyIdMismatch {
        /// The key's name.
        name: String,
        /// The ID computed.
        expected: u32,
        /// The ID written.
        found: u32,
    },
    /// A log key whose name is not a Constle origin.
    #[error(transparent)]
    Origin(#[from] OriginError),
}
