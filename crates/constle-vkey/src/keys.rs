//! Keys as signed notes name them: a key name, a 4-byte key ID and an
//! Ed25519 public key, written as a verifier key (*vkey*),
//! `<name>+<hex key ID>+<base64(type || public key)>`.
//!
//! - The **log key** is the agent's identity key (`identity.did`). Its name
//!   is the log's [`Origin`], its type byte `0x01` (c2sp.org/signed-note
//!   Ed25519), its key ID `SHA-256(origin || 0x0A || 0x01 || key)[:4]`.
//! - A **witness key** signs cosignatures. Its name is the witness's (a
//!   schema-less URL is recommended), its type byte `0x04`
//!   (c2sp.org/tlog-cosignature, `cosignature/v1`), its key ID
//!   `SHA-256(name || 0x0A || 0x04 || key)[:4]`.
//!
//! Verifier keys are read strictly: name and key ID up to the first two `+`
//! (the base64 after them may hold `+` too), the key ID as eight
//! lowercase hex digits, canonical padded base64, a key of the right type
//! that is a canonical Ed25519 point of large order, and the key ID that
//! name and key give.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::DidKey;
use constle_identity::ed25519_dalek::{Signature, VerifyingKey};

use crate::error::KeyError;
use crate::origin::Origin;

/// Signed-note signature type of an Ed25519 note signature.
pub(crate) const TYPE_ED25519: u8 = 0x01;
/// Signature type of an Ed25519 `cosignature/v1`.
pub(crate) const TYPE_COSIGNATURE_V1: u8 = 0x04;

/// The key ID of `name`'s key of `kind`.
fn key_id(name: &str, kind: u8, key: &VerifyingKey) -> u32 {
    let mut material = Vec::with_capacity(33);
    material.push(kind);
    material.extend_from_slice(key.as_bytes());
    signed_note::key_id(name, &material)
}

fn vkey(name: &str, id: u32, kind: u8, key: &VerifyingKey) -> String {
    let mut material = Vec::with_capacity(33);
    material.push(kind);
    material.extend_from_slice(key.as_bytes());
    format!("{name}+{id:08x}+{}", BASE64.encode(material))
}

/// Whether `name` may name a key: 1 to 255 bytes, no whitespace, no `+`,
/// no control character.
pub(crate) fn valid_key_name(name: &str) -> bool {
    name.len() <= 255 && signed_note::is_key_name_valid(name) && !name.chars().any(char::is_control)
}

/// Reads `name+id+base64` into the name and key of type `kind`.
fn parse_vkey(text: &str, kind: u8) -> Result<(&str, DidKey, u32), KeyError> {
    let format = || KeyError::Format {
        vkey: text.to_owned(),
    };
    // The name and key ID hold no `+`; the base64 after them may.
    let (name, rest) = text.split_once('+').ok_or_else(format)?;
    let (hex_id, b64) = rest.split_once('+').ok_or_else(format)?;
    if !valid_key_name(name) {
        return Err(KeyError::InvalidName {
            name: name.to_owned(),
        });
    }
    if hex_id.len() != 8
        || !hex_id
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(format());
    }
    let found = u32::from_str_radix(hex_id, 16).map_err(|_| format())?;
    let material = BASE64.decode(b64).map_err(|_| format())?;
    let (&found_kind, key) = material.split_first().ok_or_else(format)?;
    if found_kind != kind {
        return Err(KeyError::WrongType {
            expected: kind,
            found: found_kind,
        });
    }
    let bad_key = || KeyError::BadKey {
        name: name.to_owned(),
    };
    let key: [u8; 32] = key.try_into().map_err(|_| bad_key())?;
    let key = VerifyingKey::from_bytes(&key).map_err(|_| bad_key())?;
    let did = DidKey::from_verifying_key(key).map_err(|_| bad_key())?;
    let expected = key_id(name, kind, did.verifying_key());
    if expected != found {
        return Err(KeyError::KeyIdMismatch {
            name: name.to_owned(),
            expected,
            found,
        });
    }
    Ok((name, did, expected))
}

/// The key a log's checkpoints are signed with: the agent's key, named by
/// the log's origin.
#[derive(Clone, PartialEq, Eq)]
pub struct LogKey {
    origin: Origin,
    did: DidKey,
    id: u32,
}

impl LogKey {
    /// The log key of `origin`, signed by the agent key `did`.
    pub fn new(origin: Origin, did: &DidKey) -> LogKey {
        let id = key_id(origin.as_str(), TYPE_ED25519, did.verifying_key());
        LogKey {
            origin,
            did: did.clone(),
            id,
        }
    }

    /// Reads a verifier key whose name is a Constle origin and whose type
    /// is Ed25519 (`0x01`).
    ///
    /// # Errors
    ///
    /// [`KeyError`] saying what is wrong with it.
    pub fn from_vkey(text: &str) -> Result<LogKey, KeyError> {
        let (name, did, id) = parse_vkey(text, TYPE_ED25519)?;
        Ok(LogKey {
            origin: Origin::parse(name)?,
            did,
            id,
        })
    }

    /// The verifier key, `<origin>+<key ID>+<base64(0x01 || key)>`.
    pub fn vkey(&self) -> String {
        vkey(
            self.origin.as_str(),
            self.id,
            TYPE_ED25519,
            self.did.verifying_key(),
        )
    }

    /// The log's origin, also the key's name.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The agent's key.
    pub fn did(&self) -> &DidKey {
        &self.did
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.id
    }
}

impl fmt::Debug for LogKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.vkey())
    }
}

impl signed_note::Verifier for LogKey {
    fn name(&self) -> &str {
        self.origin.as_str()
    }

    fn key_id(&self) -> u32 {
        self.id
    }

    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        Signature::from_slice(sig).is_ok_and(|sig| self.did.verify(msg, &sig).is_ok())
    }
}

/// A witness's public key, for checking its cosignatures.
#[derive(Clone, PartialEq, Eq)]
pub struct WitnessKey {
    name: String,
    did: DidKey,
    id: u32,
}

impl WitnessKey {
    /// The witness named `name` with the Ed25519 key `did`.
    ///
    /// # Errors
    ///
    /// [`KeyError::InvalidName`] for a name a note cannot carry.
    pub fn new(name: &str, did: &DidKey) -> Result<WitnessKey, KeyError> {
        if !valid_key_name(name) {
            return Err(KeyError::InvalidName {
                name: name.to_owned(),
            });
        }
        Ok(WitnessKey {
            name: name.to_owned(),
            did: did.clone(),
            id: key_id(name, TYPE_COSIGNATURE_V1, did.verifying_key()),
        })
    }

    /// Reads a verifier key of type `cosignature/v1` (`0x04`).
    ///
    /// # Errors
    ///
    /// [`KeyError`] saying what is wrong with it.
    pub fn from_vkey(text: &str) -> Result<WitnessKey, KeyError> {
        let (name, did, id) = parse_vkey(text, TYPE_COSIGNATURE_V1)?;
        Ok(WitnessKey {
            name: name.to_owned(),
            did,
            id,
        })
    }

    /// The verifier key, `<name>+<key ID>+<base64(0x04 || key)>`.
    pub fn vkey(&self) -> String {
        vkey(
            &self.name,
            self.id,
            TYPE_COSIGNATURE_V1,
            self.did.verifying_key(),
        )
    }

    /// The witness's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The witness's key.
    pub fn did(&self) -> &DidKey {
        &self.did
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.id
    }

    /// `<name>+<key ID>`, as messages name the key.
    pub fn label(&self) -> String {
        format!("{}+{:08x}", self.name, self.id)
    }
}

impl fmt::Debug for WitnessKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.vkey())
    }
}

#[cfg(test)]
mod tests {
    use constle_identity::SigningIdentity;

    use super::*;

    fn origin() -> Origin {
        Origin::parse("ci.example.com/constle/agent").unwrap()
    }

    #[test]
    fn vkeys_round_trip() {
        let id = SigningIdentity::from_bytes(&[7; 32]);
        let log = LogKey::new(origin(), id.did());
        assert_eq!(LogKey::from_vkey(&log.vkey()).unwrap(), log);
        let witness = WitnessKey::new("witness.example.org/w1", id.did()).unwrap();
        assert_eq!(WitnessKey::from_vkey(&witness.vkey()).unwrap(), witness);
        // One key, two types: the IDs differ and neither reads as the other.
        assert_ne!(log.key_id(), witness.key_id());
        assert!(matches!(
            WitnessKey::from_vkey(&log.vkey()),
            Err(KeyError::WrongType { .. })
        ));
        assert!(matches!(
            LogKey::from_vkey(&witness.vkey()),
            Err(KeyError::WrongType { .. })
        ));
    }

    #[test]
    fn vkeys_with_plus_in_their_base64_round_trip() {
        // base64 holds `+`; only the first two split name, ID and key.
        let mut seen_plus = false;
        for seed in 0..64u8 {
            let id = SigningIdentity::from_bytes(&[seed; 32]);
            let log = LogKey::new(origin(), id.did());
            seen_plus |= log.vkey().matches('+').count() > 2;
            assert_eq!(LogKey::from_vkey(&log.vkey()).unwrap(), log);
            let witness = WitnessKey::new("w.example/1", id.did()).unwrap();
            assert_eq!(WitnessKey::from_vkey(&witness.vkey()).unwrap(), witness);
        }
        assert!(seen_plus);
    }

    #[test]
    fn refuses_malformed_vkeys() {
        let id = SigningIdentity::from_bytes(&[7; 32]);
        let good = LogKey::new(origin(), id.did()).vkey();
        let (name, rest) = good.split_once('+').unwrap();
        let (hex_id, b64) = rest.split_once('+').unwrap();
        for bad in [
            String::new(),
            name.to_owned(),
            format!("{name}+{hex_id}"),
            format!("{good}+x"),
            format!("{name}+{}+{b64}", hex_id.to_uppercase()),
            format!("{name}+0{hex_id}+{b64}"),
            format!("{name}+00000000+{b64}"),
            format!("{name}+{hex_id}+{}", &b64[..b64.len() - 1]),
            format!("other.example/constle/agent+{hex_id}+{b64}"),
            format!("not-an-origin+{hex_id}+{b64}"),
            format!("{name}+{hex_id}+{}", BASE64.encode([1u8; 33])),
        ] {
            assert!(LogKey::from_vkey(&bad).is_err(), "{bad:?}");
        }
        assert!(WitnessKey::new("a b", id.did()).is_err());
        assert!(WitnessKey::new("a+b", id.did()).is_err());
        assert!(WitnessKey::new("", id.did()).is_err());
    }
}
