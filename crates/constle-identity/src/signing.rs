//! [`SigningIdentity`]: an Ed25519 private key, its DID, and its PKCS#8 PEM form.

use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey};
use getrandom::SysRng;
use getrandom::rand_core::UnwrapErr;
use pkcs8::PrivateKeyInfoRef;
use zeroize::{Zeroize as _, Zeroizing};

use crate::did::DidKey;
use crate::show;

/// The PEM label of an unencrypted PKCS#8 private key.
const PEM_LABEL: &str = "PRIVATE KEY";

/// The PEM label of a password-protected PKCS#8 private key.
const ENCRYPTED_PEM_LABEL: &str = "ENCRYPTED PRIVATE KEY";

/// The algorithm OID of Ed25519 (RFC 8410).
const ED25519_OID: pkcs8::ObjectIdentifier = pkcs8::ObjectIdentifier::new_unwrap("1.3.101.112");

/// The DER of an Ed25519 PKCS#8 v1 `PrivateKeyInfo` (RFC 8410 §7, RFC 5958)
/// up to the 32 seed bytes:
///
/// ```text
/// 30 2e              SEQUENCE, 46 bytes
///    02 01 00        INTEGER 0 (version v1: no public key)
///    30 05           SEQUENCE (AlgorithmIdentifier)
///       06 03 2b6570 OID 1.3.101.112 (Ed25519), no parameters
///    04 22           OCTET STRING, 34 bytes (privateKey)
///       04 20        OCTET STRING, 32 bytes (CurvePrivateKey) ...seed
/// ```
pub(crate) const PKCS8_V1_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// How a key file is made, quoted by [`KeyError`] messages.
const HOW_TO_MAKE: &str = "Constle key files are unencrypted PKCS#8 Ed25519 keys (\"-----BEGIN PRIVATE KEY-----\") as written by `constle keygen NAME` or `openssl genpkey -algorithm ed25519`";

/// Why a PEM text is not a usable Ed25519 private key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The text is not PEM at all, or its PEM framing or base64 is broken.
    #[error("not a PEM private key ({reason}); {HOW_TO_MAKE}")]
    NotPem {
        /// What the PEM decoder objected to.
        reason: String,
    },

    /// A password-protected key (`ENCRYPTED PRIVATE KEY`).
    #[error(
        "the private key is encrypted (\"ENCRYPTED PRIVATE KEY\"); Constle cannot prompt for a key password, decrypt it with `openssl pkey -in FILE -out NEW_FILE` and keep NEW_FILE mode 0600"
    )]
    Encrypted,

    /// PEM with another label (`RSA PRIVATE KEY`, `OPENSSH PRIVATE KEY`, `PUBLIC KEY`, …).
    #[error("the PEM block is labelled {label}, expected \"PRIVATE KEY\" (PKCS#8); {HOW_TO_MAKE}")]
    WrongLabel {
        /// The label found, escaped for display.
        label: String,
    },

    /// The PEM content is not a DER PKCS#8 `PrivateKeyInfo`.
    #[error("the PEM content is not a valid PKCS#8 private key ({reason}); {HOW_TO_MAKE}")]
    Malformed {
        /// What the DER decoder objected to.
        reason: String,
    },

    /// A PKCS#8 key for another algorithm (RSA, ECDSA, X25519, Ed448, …).
    #[error(
        "the key is not an Ed25519 key: its algorithm is {algorithm}, expected 1.3.101.112 (Ed25519); {HOW_TO_MAKE}"
    )]
    WrongAlgorithm {
        /// The algorithm OID found, with its name when known.
        algorithm: String,
    },

    /// The Ed25519 algorithm identifier carries parameters (RFC 8410 forbids them).
    #[error(
        "the Ed25519 algorithm identifier has parameters, which RFC 8410 forbids; the file is corrupted or was written by a broken tool, {HOW_TO_MAKE}"
    )]
    AlgorithmParameters,

    /// The private key field is not a 32-byte Ed25519 seed in an OCTET STRING.
    #[error(
        "the private key field is not a 32-byte Ed25519 seed wrapped in an OCTET STRING (RFC 8410 CurvePrivateKey); the file is corrupted, {HOW_TO_MAKE}"
    )]
    BadPrivateKey,

    /// A PKCS#8 v2 file whose public key does not belong to its private key.
    #[error(
        "the public key stored in the file does not match its private key; the file was tampered with or corrupted, do not use it"
    )]
    PublicKeyMismatch,
}

/// An Ed25519 private key with its DID.
///
/// Not `Debug`, not `Clone`; the secret is zeroized when this is dropped.
/// Write it out only through [`SigningIdentity::to_pkcs8_pem`], whose result
/// is zeroized too.
pub struct SigningIdentity {
    key: SigningKey,
    did: DidKey,
}

// `SigningKey` zeroizes its secret in its own `Drop`; `DidKey` is public.
impl zeroize::ZeroizeOnDrop for SigningIdentity {}

impl SigningIdentity {
    /// A new random key, from the operating system's random number generator.
    ///
    /// # Panics
    ///
    /// If the operating system cannot provide random bytes (`getrandom`
    /// fails), rather than make a guessable key.
    pub fn generate() -> SigningIdentity {
        let key = SigningKey::generate(&mut UnwrapErr(SysRng));
        SigningIdentity::from_signing_key(key)
    }

    /// The key whose 32-byte secret (RFC 8032 "private key", the seed) is `secret`.
    /// For tests and test vectors; use [`SigningIdentity::generate`] for real keys.
    pub fn from_bytes(secret: &[u8; 32]) -> SigningIdentity {
        SigningIdentity::from_signing_key(SigningKey::from_bytes(secret))
    }

    fn from_signing_key(key: SigningKey) -> SigningIdentity {
        // A public key derived from a secret is a clamped, non-zero multiple
        // of the base point: canonical and never of small order.
        let did = DidKey::from_checked_key(key.verifying_key());
        SigningIdentity { key, did }
    }

    /// This key's DID.
    pub fn did(&self) -> &DidKey {
        &self.did
    }

    /// The Ed25519 signature of `message` (RFC 8032, deterministic).
    pub fn sign(&self, message: &[u8]) -> Signature {
        self.key.sign(message)
    }

    /// The key as PKCS#8 **v1** PEM (`-----BEGIN PRIVATE KEY-----`; version 0,
    /// no public key field), the form OpenSSL 3.0 and every other PKCS#8
    /// reader accept. Zeroized on drop.
    pub fn to_pkcs8_pem(&self) -> Zeroizing<String> {
        let mut der = Zeroizing::new([0u8; 48]);
        der[..16].copy_from_slice(&PKCS8_V1_PREFIX);
        der[16..].copy_from_slice(self.key.as_bytes());
        // Room for everything up front, so the buffer never reallocates and
        // leaves an unzeroized copy of the secret behind.
        let mut pem = Zeroizing::new(String::with_capacity(160));
        pem.push_str("-----BEGIN PRIVATE KEY-----\n");
        // 48 bytes are exactly 64 base64 characters: one PEM line.
        base64::engine::general_purpose::STANDARD.encode_string(der.as_slice(), &mut pem);
        pem.push_str("\n-----END PRIVATE KEY-----\n");
        pem
    }

    /// Read an Ed25519 private key from PKCS#8 PEM, v1 or v2.
    ///
    /// Surrounding whitespace is ignored. A v2 file's public key must match
    /// the private key.
    ///
    /// # Errors
    ///
    /// A [`KeyError`] saying what is wrong with the text.
    pub fn from_pkcs8_pem(pem: &str) -> Result<SigningIdentity, KeyError> {
        let text = pem.trim_matches(|c: char| c.is_ascii_whitespace());
        let label =
            pkcs8::der::pem::decode_label(text.as_bytes()).map_err(|err| KeyError::NotPem {
                reason: err.to_string(),
            })?;
        if label == ENCRYPTED_PEM_LABEL {
            return Err(KeyError::Encrypted);
        }
        if label != PEM_LABEL {
            return Err(KeyError::WrongLabel { label: show(label) });
        }
        let (_, der) =
            pkcs8::der::pem::decode_vec(text.as_bytes()).map_err(|err| KeyError::NotPem {
                reason: err.to_string(),
            })?;
        let der = Zeroizing::new(der);
        SigningIdentity::from_pkcs8_der(&der)
    }

    /// Read an Ed25519 private key from PKCS#8 DER, v1 or v2.
    fn from_pkcs8_der(der: &[u8]) -> Result<SigningIdentity, KeyError> {
        let info = PrivateKeyInfoRef::try_from(der).map_err(|err| KeyError::Malformed {
            reason: err.to_string(),
        })?;
        if info.algorithm.oid != ED25519_OID {
            return Err(KeyError::WrongAlgorithm {
                algorithm: describe_oid(&info.algorithm.oid),
            });
        }
        if info.algorithm.parameters.is_some() {
            return Err(KeyError::AlgorithmParameters);
        }
        let mut seed = Zeroizing::new([0u8; 32]);
        match info.private_key.as_bytes() {
            [0x04, 0x20, rest @ ..] if rest.len() == 32 => seed.copy_from_slice(rest),
            _ => return Err(KeyError::BadPrivateKey),
        }
        let identity = SigningIdentity::from_bytes(&seed);
        seed.zeroize();
        if let Some(public_key) = info.public_key
            && public_key.as_bytes() != Some(identity.did.verifying_key().as_bytes().as_slice())
        {
            return Err(KeyError::PublicKeyMismatch);
        }
        Ok(identity)
    }
}

/// Render an algorithm OID for an error message, named when well known.
fn describe_oid(oid: &pkcs8::ObjectIdentifier) -> String {
    let name = match oid.to_string().as_str() {
        "1.2.840.113549.1.1.1" => " (RSA)",
        "1.2.840.10045.2.1" => " (ECDSA / elliptic-curve public key)",
        "1.3.101.110" => " (X25519)",
        "1.3.101.111" => " (X448)",
        "1.3.101.113" => " (Ed448)",
        _ => "",
    };
    format!("{oid}{name}")
}
