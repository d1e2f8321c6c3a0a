//! Cosignatures (c2sp.org/tlog-cosignature, Ed25519 `cosignature/v1`): a
//! witness's note signature on a checkpoint, saying that as of a time this
//! is the largest tree consistent with all it has seen of the log.
//!
//! The signed message is
//!
//! ```text
//! cosignature/v1
//! time <POSIX seconds>
//! <the checkpoint's note text>
//! ```
//!
//! and the signature line is `— <witness name> base64(key ID || timestamp
//! (8 bytes, big-endian) || Ed25519 signature)`, the key ID being that of
//! the witness key with type `0x04` ([`WitnessKey`]).

use constle_identity::ed25519_dalek::Signature;

use crate::checkpoint::VerifiedCheckpoint;
use crate::error::CosignatureError;
use constle_vkey::WitnessKey;

use crate::keys::WitnessSigner;

/// The largest timestamp a cosignature may carry.
const MAX_TIMESTAMP: u64 = (1 << 63) - 1;

/// A cosignature made by [`cosign`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cosignature {
    timestamp: u64,
    line: String,
}

impl Cosignature {
    /// The note signature line, ending in a newline: what a witness answers.
    pub fn line(&self) -> &str {
        &self.line
    }

    /// When it was made, in POSIX seconds.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }
}

/// A cosignature that verified: by whom, and when the witness says it made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedCosignature {
    witness: String,
    timestamp: u64,
}

impl VerifiedCosignature {
    /// The witness's name.
    pub fn witness(&self) -> &str {
        &self.witness
    }

    /// The cosignature's time, POSIX seconds.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }
}

/// The message a `cosignature/v1` signs, of the checkpoint whose note text
/// is `text`.
fn message(text: &[u8], timestamp: u64) -> Vec<u8> {
    let mut message = format!("cosignature/v1\ntime {timestamp}\n").into_bytes();
    message.extend_from_slice(text);
    message
}

fn check_timestamp(timestamp: u64) -> Result<(), CosignatureError> {
    match (1..=MAX_TIMESTAMP).contains(&timestamp) {
        true => Ok(()),
        false => Err(CosignatureError::Timestamp { timestamp }),
    }
}

/// Cosigns `checkpoint` as the witness `signer`, at `timestamp` (POSIX
/// seconds, not zero).
///
/// Pure: whether to cosign is [`check_submission`](crate::check_submission)'s
/// decision, made first.
///
/// # Errors
///
/// [`CosignatureError::Timestamp`] for 0 or a time above 2^63 - 1.
pub fn cosign(
    checkpoint: &VerifiedCheckpoint,
    signer: &WitnessSigner,
    timestamp: u64,
) -> Result<Cosignature, CosignatureError> {
    check_timestamp(timestamp)?;
    let signature = signer.sign(&message(checkpoint.text(), timestamp));
    let mut bytes = Vec::with_capacity(72);
    bytes.extend_from_slice(&timestamp.to_be_bytes());
    bytes.extend_from_slice(&signature.to_bytes());
    let key = signer.public();
    let line = signed_note::Signature::new(key.name().to_owned(), key.key_id(), bytes)
        .map_err(|_| CosignatureError::Malformed)?
        .to_bytes();
    Ok(Cosignature {
        timestamp,
        line: String::from_utf8(line).map_err(|_| CosignatureError::Malformed)?,
    })
}

/// Checks one signature line (with or without its newline) as `witness`'s
/// cosignature of `checkpoint`.
///
/// # Errors
///
/// [`CosignatureError`]: a malformed line, another key's line, a wrong
/// length or timestamp, or a signature that does not verify.
pub fn verify_cosignature(
    checkpoint: &VerifiedCheckpoint,
    witness: &WitnessKey,
    line: &str,
) -> Result<VerifiedCosignature, CosignatureError> {
    verify_over_text(checkpoint.text(), witness, line)
}

/// [`verify_cosignature`] over a checkpoint's note text, signed by the log
/// or not: what a witness cosigns is the text, so a cosignature recorded
/// without its checkpoint is checked over the text rebuilt from origin,
/// size and root.
pub(crate) fn verify_over_text(
    text: &[u8],
    witness: &WitnessKey,
    line: &str,
) -> Result<VerifiedCosignature, CosignatureError> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let sig = signed_note::Signature::from_bytes(line.as_bytes())
        .map_err(|_| CosignatureError::Malformed)?;
    if sig.name() != witness.name() || sig.id() != witness.key_id() {
        return Err(CosignatureError::OtherKey {
            expected: witness.label(),
            found: format!("{}+{:08x}", sig.name(), sig.id()),
        });
    }
    let bytes = sig.signature();
    let (Some(time), Some(signature), 72) = (bytes.get(..8), bytes.get(8..), bytes.len()) else {
        return Err(CosignatureError::WrongLength { len: bytes.len() });
    };
    let mut be = [0u8; 8];
    be.copy_from_slice(time);
    let timestamp = u64::from_be_bytes(be);
    check_timestamp(timestamp)?;
    let invalid = || CosignatureError::InvalidSignature {
        key: witness.label(),
    };
    let signature = Signature::from_slice(signature).map_err(|_| invalid())?;
    witness
        .did()
        .verify(&message(text, timestamp), &signature)
        .map_err(|_| invalid())?;
    Ok(VerifiedCosignature {
        witness: witness.name().to_owned(),
        timestamp,
    })
}

/// Finds and checks `witness`'s cosignature among `checkpoint`'s signature
/// lines. A line by the witness's key that does not verify is an error, not
/// skipped.
///
/// # Errors
///
/// [`CosignatureError::Missing`] if no line is by the witness's key, or
/// what [`verify_cosignature`] says of the first that is.
pub fn find_cosignature(
    checkpoint: &VerifiedCheckpoint,
    witness: &WitnessKey,
) -> Result<VerifiedCosignature, CosignatureError> {
    for line in checkpoint.signed().signature_lines() {
        let Ok(sig) = signed_note::Signature::from_bytes(line) else {
            continue;
        };
        if sig.name() == witness.name() && sig.id() == witness.key_id() {
            let line = std::str::from_utf8(line).map_err(|_| CosignatureError::Malformed)?;
            return verify_cosignature(checkpoint, witness, line);
        }
    }
    Err(CosignatureError::Missing {
        key: witness.label(),
    })
}

/// The key name and key ID a note signature line (without its newline)
/// names, if it is one.
pub(crate) fn line_signer(line: &str) -> Option<(String, u32)> {
    let sig = signed_note::Signature::from_bytes(line.as_bytes()).ok()?;
    Some((sig.name().to_owned(), sig.id()))
}
