//! [`SetDigest`], the identity of one version (`sha256:<hex>` of the bytes
//! its signatures cover), and [`SetPin`], the digest of version 1 that an
//! Agentfile holds.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

const PREFIX: &str = "sha256:";

/// The SHA-256 of a version's signed bytes (the domain separator and the
/// canonical `signed` object), written `sha256:` and 64 lowercase hex
/// digits. Adding a signature to a file does not change it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SetDigest([u8; 32]);

/// Why a string is not a `sha256:<hex>` digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "expected sha256: followed by 64 lowercase hexadecimal digits, found {found}; copy the pin that `constle approvers show` prints"
)]
pub struct DigestParseError {
    found: String,
}

impl SetDigest {
    /// The digest of `signed_bytes`.
    pub(crate) fn of(signed_bytes: &[u8]) -> SetDigest {
        SetDigest(Sha256::digest(signed_bytes).into())
    }

    /// Parse `sha256:<64 lowercase hex digits>`; one spelling only.
    ///
    /// # Errors
    ///
    /// [`DigestParseError`] for anything else.
    pub fn parse(s: &str) -> Result<SetDigest, DigestParseError> {
        let error = || DigestParseError {
            found: constle_escape::escape(&s.chars().take(80).collect::<String>()),
        };
        let hex_part = s.strip_prefix(PREFIX).ok_or_else(error)?;
        if hex_part.len() != 64
            || !hex_part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(error());
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| error())?;
        Ok(SetDigest(bytes))
    }

    /// The 64 hex digits alone (the name of the set's store directory).
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for SetDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}", self.hex())
    }
}

impl fmt::Debug for SetDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SetDigest({self})")
    }
}

impl FromStr for SetDigest {
    type Err = DigestParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SetDigest::parse(s)
    }
}

/// What an Agentfile pins: the [`SetDigest`] of version 1 of its approver
/// set. Every later version is trusted only through the chain from it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SetPin(SetDigest);

impl SetPin {
    /// Parse `sha256:<64 lowercase hex digits>`.
    ///
    /// # Errors
    ///
    /// [`DigestParseError`] for anything else.
    pub fn parse(s: &str) -> Result<SetPin, DigestParseError> {
        SetDigest::parse(s).map(SetPin)
    }

    /// The pin for a set whose version 1 has this digest.
    pub fn new(first_version: SetDigest) -> SetPin {
        SetPin(first_version)
    }

    /// The pinned digest of version 1.
    pub fn digest(&self) -> SetDigest {
        self.0
    }

    /// The 64 hex digits alone: the set's directory under
    /// `$CONSTLE_HOME/approvers/`.
    pub fn hex(&self) -> String {
        self.0.hex()
    }
}

impl fmt::Display for SetPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for SetPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SetPin({})", self.0)
    }
}

impl FromStr for SetPin {
    type Err = DigestParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SetPin::parse(s)
    }
}

impl serde::Serialize for SetPin {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for SetPin {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        SetPin::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spelling() {
        let good = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(
            SetPin::parse(&good).map(|p| p.to_string()),
            Ok(good.clone())
        );
        for bad in [
            good.to_uppercase(),
            good.replace("sha256:", "SHA256:"),
            format!("{good}0"),
            good[..good.len() - 1].to_owned(),
            format!(" {good}"),
            "sha256:".to_owned(),
            String::new(),
            format!("sha256:{}", "g".repeat(64)),
        ] {
            assert!(SetPin::parse(&bad).is_err(), "accepted {bad}");
        }
    }
}
