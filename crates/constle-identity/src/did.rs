//! [`DidKey`]: an Ed25519 public key written as a `did:key` DID.
//!
//! The encoding (did:key method, W3C CCG): `did:key:` + multibase base58btc
//! (`z`) of the multicodec `ed25519-pub` prefix `0xed 0x01` followed by the 32
//! key bytes. Every Ed25519 `did:key` therefore starts with `did:key:z6Mk`.

use std::fmt;
use std::str::FromStr;

use ed25519_dalek::{Signature, VerifyingKey};

use crate::show;

/// `did:key:` — the DID scheme and method.
pub const DID_KEY_PREFIX: &str = "did:key:";

/// The multicodec varint for `ed25519-pub` (0xed), as it prefixes the key.
pub const ED25519_PUB_MULTICODEC: [u8; 2] = [0xed, 0x01];

/// The longest input [`DidKey::parse`] looks at, in bytes. An Ed25519
/// `did:key` is 56 bytes; this bound keeps base58 decoding (quadratic) cheap
/// on hostile input.
pub const MAX_DID_LEN: usize = 128;

/// The base58btc (Bitcoin) alphabet.
const BASE58_ALPHABET: &str = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// An example of a well-formed DID, quoted by error messages.
const EXAMPLE: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

/// An Ed25519 public key, identified as a `did:key` DID.
///
/// Only keys that make sense as identities can be held: the point is on the
/// curve, canonically encoded and not of small order ("weak"). [`Display`]
/// prints the DID (`did:key:z6Mk…`); `Debug` prints the same string.
///
/// [`Display`]: fmt::Display
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DidKey {
    key: VerifyingKey,
    did: String,
}

/// Why a string is not an Ed25519 `did:key`, or a key cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DidKeyError {
    /// Leading or trailing whitespace around the DID.
    #[error(
        "did:key {found} has leading or trailing whitespace; remove it and write the DID alone, e.g. {EXAMPLE}"
    )]
    SurroundingWhitespace {
        /// The input, escaped and shortened for display.
        found: String,
    },

    /// The string does not start with `did:key:`.
    #[error(
        "expected a DID starting with \"did:key:\", found {found}; write the agent's or approver's Ed25519 key as a did:key, e.g. {EXAMPLE}"
    )]
    MissingPrefix {
        /// The input, escaped and shortened for display.
        found: String,
    },

    /// The string is a DID URL (has a fragment, query or path), not a DID.
    #[error(
        "{found} is a DID URL (it contains {part:?} at byte {position}), not a DID; remove the {what} and give the bare did:key, e.g. {EXAMPLE}"
    )]
    DidUrl {
        /// The input, escaped and shortened for display.
        found: String,
        /// The character that starts the fragment, query or path.
        part: char,
        /// Its byte offset in the input.
        position: usize,
        /// "fragment", "query" or "path".
        what: &'static str,
    },

    /// The input is longer than any Ed25519 `did:key` can be.
    #[error(
        "did:key is {len} bytes long, an Ed25519 did:key is 56 bytes (at most {max} accepted); check that only the DID was pasted"
    )]
    TooLong {
        /// The input length in bytes.
        len: usize,
        /// The limit, [`MAX_DID_LEN`].
        max: usize,
    },

    /// The multibase prefix after `did:key:` is not `z` (base58btc).
    #[error(
        "did:key must continue with multibase prefix 'z' (base58btc) after \"did:key:\", found {found}; an Ed25519 did:key looks like {EXAMPLE}"
    )]
    NotBase58Btc {
        /// What was found instead, escaped for display.
        found: String,
    },

    /// A character outside the base58btc alphabet.
    #[error(
        "did:key contains {character:?} at byte {position}, which is not base58btc (no 0, O, I, l or punctuation); check the DID for typos or truncation"
    )]
    InvalidBase58 {
        /// The offending character.
        character: char,
        /// Its byte offset in the whole input.
        position: usize,
    },

    /// The decoded key does not start with the `ed25519-pub` multicodec.
    #[error(
        "did:key is not an Ed25519 key: the multicodec prefix is {found}, expected 0xed 0x01 (ed25519-pub); Constle identities are Ed25519 keys, create one with `constle keygen NAME`"
    )]
    WrongMulticodec {
        /// The bytes found (with the codec name when known).
        found: String,
    },

    /// The key after the multicodec prefix is not 32 bytes.
    #[error(
        "did:key holds a {found}-byte key, expected {expected} bytes for Ed25519; the DID is truncated or corrupted, copy it again"
    )]
    WrongLength {
        /// Key length found, in bytes.
        found: usize,
        /// The Ed25519 public key length, 32.
        expected: usize,
    },

    /// The 32 bytes are not the encoding of a point on the Ed25519 curve.
    #[error(
        "did:key's 32 bytes are not a point on the Ed25519 curve; the DID is corrupted, copy it again from the key's owner"
    )]
    InvalidPoint,

    /// The 32 bytes encode a point, but not in the canonical (unique) way.
    #[error(
        "did:key's key bytes are a non-canonical encoding of an Ed25519 point; refusing it because one key must have exactly one DID, re-encode the key or generate a new one"
    )]
    NonCanonical,

    /// The key is a small-order ("weak") point: signatures under it prove nothing.
    #[error(
        "did:key is a weak (small-order) Ed25519 key that any forger can sign for; refusing it, generate a real key with `constle keygen NAME`"
    )]
    WeakKey,
}

/// A signature did not verify against a [`DidKey`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "signature does not verify against {did}: the message was changed, or it was signed by another key; do not trust it"
)]
pub struct SignatureError {
    // Boxed: a `DidKey` holds the decompressed point and is large.
    did: Box<DidKey>,
}

impl SignatureError {
    /// The DID the signature was checked against.
    pub fn did(&self) -> &DidKey {
        &self.did
    }
}

impl DidKey {
    /// Parse an Ed25519 `did:key` DID such as
    /// `did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK`.
    ///
    /// Strict: no surrounding whitespace, no DID URL parts (`#`, `?`, `/`),
    /// only the `ed25519-pub` multicodec, a canonical encoding of a point of
    /// large order. A DID accepted here prints back identically.
    ///
    /// # Errors
    ///
    /// A [`DidKeyError`] naming the first thing that is wrong.
    pub fn parse(s: &str) -> Result<DidKey, DidKeyError> {
        if s.trim() != s {
            return Err(DidKeyError::SurroundingWhitespace { found: show(s) });
        }
        let Some(rest) = s.strip_prefix(DID_KEY_PREFIX) else {
            return Err(DidKeyError::MissingPrefix { found: show(s) });
        };
        if let Some((position, part)) = s
            .char_indices()
            .find(|&(_, c)| matches!(c, '#' | '?' | '/'))
        {
            let what = match part {
                '#' => "fragment",
                '?' => "query",
                _ => "path",
            };
            return Err(DidKeyError::DidUrl {
                found: show(s),
                part,
                position,
                what,
            });
        }
        if s.len() > MAX_DID_LEN {
            return Err(DidKeyError::TooLong {
                len: s.len(),
                max: MAX_DID_LEN,
            });
        }
        let Some(payload) = rest.strip_prefix('z') else {
            let found = match rest.chars().next() {
                Some(other) => format!("{other:?}"),
                None => "nothing".to_owned(),
            };
            return Err(DidKeyError::NotBase58Btc { found });
        };
        let payload_start = DID_KEY_PREFIX.len() + 1;
        if let Some((index, character)) = payload
            .char_indices()
            .find(|&(_, c)| !BASE58_ALPHABET.contains(c))
        {
            return Err(DidKeyError::InvalidBase58 {
                character,
                position: payload_start + index,
            });
        }
        let decoded = bs58::decode(payload).into_vec().map_err(|err| match err {
            bs58::decode::Error::InvalidCharacter { character, index } => {
                DidKeyError::InvalidBase58 {
                    character,
                    position: payload_start + index,
                }
            }
            _ => DidKeyError::InvalidBase58 {
                character: '?',
                position: payload_start,
            },
        })?;
        let key_bytes = match decoded.as_slice() {
            [0xed, 0x01, key @ ..] => key,
            other => {
                return Err(DidKeyError::WrongMulticodec {
                    found: describe_multicodec(other),
                });
            }
        };
        let key_bytes: &[u8; 32] = key_bytes.try_into().map_err(|_| DidKeyError::WrongLength {
            found: key_bytes.len(),
            expected: 32,
        })?;
        let key = VerifyingKey::from_bytes(key_bytes).map_err(|_| DidKeyError::InvalidPoint)?;
        DidKey::from_verifying_key(key)
    }

    /// The DID of an Ed25519 public key.
    ///
    /// # Errors
    ///
    /// [`DidKeyError::NonCanonical`] if `key` was decoded from a non-canonical
    /// encoding, [`DidKeyError::WeakKey`] if it is a small-order point.
    pub fn from_verifying_key(key: VerifyingKey) -> Result<DidKey, DidKeyError> {
        // `VerifyingKey::from_bytes` follows ZIP-215 and accepts non-canonical
        // encodings (y >= p, or x = 0 with the sign bit set); re-compressing
        // the point shows them up.
        if key.to_edwards().compress().to_bytes() != key.to_bytes() {
            return Err(DidKeyError::NonCanonical);
        }
        if key.is_weak() {
            return Err(DidKeyError::WeakKey);
        }
        Ok(DidKey::from_checked_key(key))
    }

    /// Wrap a key already known to be canonical and of large order.
    pub(crate) fn from_checked_key(key: VerifyingKey) -> DidKey {
        let mut bytes = [0u8; 34];
        bytes[..2].copy_from_slice(&ED25519_PUB_MULTICODEC);
        bytes[2..].copy_from_slice(key.as_bytes());
        let mut did = String::with_capacity(64);
        did.push_str(DID_KEY_PREFIX);
        did.push('z');
        did.push_str(&bs58::encode(bytes).into_string());
        DidKey { key, did }
    }

    /// The Ed25519 public key.
    pub fn verifying_key(&self) -> &VerifyingKey {
        &self.key
    }

    /// The DID as a string, `did:key:z6Mk…`.
    pub fn as_str(&self) -> &str {
        &self.did
    }

    /// Check an Ed25519 signature over `message` by this key, strictly
    /// (`verify_strict`: no non-canonical `S`, no small-order `R`).
    ///
    /// # Errors
    ///
    /// [`SignatureError`] if the signature is not valid for `message` and this key.
    pub fn verify(&self, message: &[u8], signature: &Signature) -> Result<(), SignatureError> {
        // `verify_strict` refuses S >= l too, unless some crate in the build
        // turns on ed25519-dalek's `legacy_compatibility` feature: check it
        // here as well so that cannot loosen Constle's verification.
        if !is_canonical_scalar(signature.s_bytes()) {
            return Err(SignatureError {
                did: Box::new(self.clone()),
            });
        }
        self.key
            .verify_strict(message, signature)
            .map_err(|_| SignatureError {
                did: Box::new(self.clone()),
            })
    }
}

/// The order l of the Ed25519 base point, little-endian:
/// 2^252 + 27742317777372353535851937790883648493.
const GROUP_ORDER_LE: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10,
];

/// Whether the little-endian number `s` is below the group order (RFC 8032 §5.1.7).
fn is_canonical_scalar(s: &[u8; 32]) -> bool {
    for (byte, order) in s.iter().rev().zip(GROUP_ORDER_LE.iter().rev()) {
        if byte != order {
            return byte < order;
        }
    }
    false
}

/// Render the multicodec prefix of a decoded did:key payload for an error.
fn describe_multicodec(bytes: &[u8]) -> String {
    let Some(prefix) = bytes.get(..2) else {
        return match bytes.first() {
            Some(b) => format!("only the single byte {b:#04x}"),
            None => "empty".to_owned(),
        };
    };
    let name = match prefix {
        [0xec, 0x01] => "x25519-pub",
        [0xe7, 0x01] => "secp256k1-pub",
        [0xea, 0x01] => "bls12_381-g1-pub",
        [0xeb, 0x01] => "bls12_381-g2-pub",
        [0x80, 0x24] => "p256-pub",
        [0x81, 0x24] => "p384-pub",
        [0x82, 0x24] => "p521-pub",
        [0x85, 0x24] => "rsa-pub",
        [0x80, 0x26] => "ed25519-priv, a PRIVATE key: do not share it",
        _ => "unknown codec",
    };
    format!("{:#04x} {:#04x} ({name})", prefix[0], prefix[1])
}

impl FromStr for DidKey {
    type Err = DidKeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DidKey::parse(s)
    }
}

impl fmt::Display for DidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.did)
    }
}

impl fmt::Debug for DidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DidKey").field(&self.did).finish()
    }
}

impl AsRef<str> for DidKey {
    fn as_ref(&self) -> &str {
        &self.did
    }
}

impl serde::Serialize for DidKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.did)
    }
}

impl<'de> serde::Deserialize<'de> for DidKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        DidKey::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_scalar_bound_is_the_group_order() {
        let mut below = GROUP_ORDER_LE;
        below[0] -= 1;
        let mut above = GROUP_ORDER_LE;
        above[0] += 1;
        assert!(is_canonical_scalar(&[0u8; 32]));
        assert!(is_canonical_scalar(&below));
        assert!(!is_canonical_scalar(&GROUP_ORDER_LE));
        assert!(!is_canonical_scalar(&above));
        assert!(!is_canonical_scalar(&[0xff; 32]));
        let mut high = [0u8; 32];
        high[31] = 0x0f;
        assert!(is_canonical_scalar(&high));
    }

    #[test]
    fn multicodec_descriptions() {
        assert_eq!(describe_multicodec(&[]), "empty");
        assert_eq!(describe_multicodec(&[0xec]), "only the single byte 0xec");
        assert_eq!(
            describe_multicodec(&[0xec, 0x01, 9, 9]),
            "0xec 0x01 (x25519-pub)"
        );
        assert!(describe_multicodec(&[0x80, 0x26]).contains("PRIVATE"));
        assert_eq!(describe_multicodec(&[0, 0]), "0x00 0x00 (unknown codec)");
    }
}
