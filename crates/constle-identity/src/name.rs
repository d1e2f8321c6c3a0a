//! [`Name`]: an agent or key name that is safe to use as one file-name component.

use std::fmt;
use std::str::FromStr;

use crate::show;

/// The longest name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// Examples quoted by every [`NameError`] message.
const GOOD_NAMES: &str = "e.g. `research-bot`, `agent_01` or `billing.v2`";

/// A name safe to use as one file-name component: agent names and key names.
///
/// Rules, checked by [`Name::new`]:
/// - 1 to 64 bytes long;
/// - only ASCII letters, digits, `-`, `_` and `.`;
/// - starts with a letter or a digit;
/// - no `..` anywhere.
///
/// So a `Name` never contains `/`, a control character or non-ASCII text, is
/// never empty, `.` or `..`, and never names a hidden file.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct Name(String);

/// Why a string is not a valid [`Name`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name is the empty string.
    #[error("name is empty; use 1 to 64 ASCII letters, digits, '-', '_' or '.', {GOOD_NAMES}")]
    Empty,

    /// The name is longer than [`MAX_NAME_LEN`] bytes.
    #[error(
        "name {name} is {len} bytes long, the limit is {max} bytes; use a shorter name, {GOOD_NAMES}"
    )]
    TooLong {
        /// The name, escaped and shortened for display.
        name: String,
        /// Its length in bytes.
        len: usize,
        /// The limit, [`MAX_NAME_LEN`].
        max: usize,
    },

    /// The name contains a character outside the allowed set.
    #[error(
        "name {name} contains {character:?} at byte {position}; use only ASCII letters, digits, '-', '_' and '.', {GOOD_NAMES}"
    )]
    InvalidCharacter {
        /// The name, escaped and shortened for display.
        name: String,
        /// The first character that is not allowed.
        character: char,
        /// Its byte offset in the name.
        position: usize,
    },

    /// The name starts with `-`, `_` or `.`.
    #[error(
        "name {name} starts with {first:?}; a name must start with an ASCII letter or digit, {GOOD_NAMES}"
    )]
    BadStart {
        /// The name, escaped and shortened for display.
        name: String,
        /// Its first character.
        first: char,
    },

    /// The name contains `..`.
    #[error("name {name} contains \"..\" at byte {position}; remove it, {GOOD_NAMES}")]
    DotDot {
        /// The name, escaped and shortened for display.
        name: String,
        /// Byte offset of the first `..`.
        position: usize,
    },
}

impl Name {
    /// Check `s` against the naming rules and wrap it.
    ///
    /// # Errors
    ///
    /// A [`NameError`] naming the first rule `s` breaks.
    pub fn new(s: &str) -> Result<Name, NameError> {
        if s.is_empty() {
            return Err(NameError::Empty);
        }
        if s.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong {
                name: show(s),
                len: s.len(),
                max: MAX_NAME_LEN,
            });
        }
        if let Some((position, character)) = s
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return Err(NameError::InvalidCharacter {
                name: show(s),
                character,
                position,
            });
        }
        if let Some(first) = s.chars().next()
            && !first.is_ascii_alphanumeric()
        {
            return Err(NameError::BadStart {
                name: show(s),
                first,
            });
        }
        if let Some(position) = s.find("..") {
            return Err(NameError::DotDot {
                name: show(s),
                position,
            });
        }
        Ok(Name(s.to_owned()))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Name {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Name::new(s)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Name::new(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_names_are_accepted() {
        for s in [
            "a",
            "0",
            "research-bot",
            "agent_01",
            "billing.v2",
            "A.b-c_d",
            "x.",
            &"a".repeat(64),
        ] {
            let name = Name::new(s);
            assert_eq!(name.as_ref().map(Name::as_str), Ok(s), "{s:?}");
        }
    }

    #[test]
    fn each_rule_is_enforced() {
        assert_eq!(Name::new(""), Err(NameError::Empty));
        assert!(matches!(
            Name::new(&"a".repeat(65)),
            Err(NameError::TooLong {
                len: 65,
                max: 64,
                ..
            })
        ));
        assert!(matches!(
            Name::new("a/b"),
            Err(NameError::InvalidCharacter {
                character: '/',
                position: 1,
                ..
            })
        ));
        assert!(matches!(
            Name::new("bad\nname"),
            Err(NameError::InvalidCharacter {
                character: '\n',
                ..
            })
        ));
        assert!(matches!(
            Name::new("a\0"),
            Err(NameError::InvalidCharacter {
                character: '\0',
                ..
            })
        ));
        assert!(matches!(
            Name::new("agent\u{7f}"),
            Err(NameError::InvalidCharacter { .. })
        ));
        assert!(matches!(
            Name::new("ag\u{e9}nt"),
            Err(NameError::InvalidCharacter {
                character: '\u{e9}',
                position: 2,
                ..
            })
        ));
        assert!(matches!(
            Name::new("has space"),
            Err(NameError::InvalidCharacter { character: ' ', .. })
        ));
        assert!(matches!(
            Name::new(".hidden"),
            Err(NameError::BadStart { first: '.', .. })
        ));
        assert!(matches!(
            Name::new("-flag"),
            Err(NameError::BadStart { first: '-', .. })
        ));
        assert!(matches!(
            Name::new("_x"),
            Err(NameError::BadStart { first: '_', .. })
        ));
        assert!(matches!(Name::new(".."), Err(NameError::BadStart { .. })));
        assert!(matches!(
            Name::new("a..b"),
            Err(NameError::DotDot { position: 1, .. })
        ));
    }

    #[test]
    fn messages_explain_and_escape() {
        let err = Name::new("evil\x1b[2Jname").err().map(|e| e.to_string());
        let msg = err.unwrap_or_default();
        assert!(!msg.contains('\x1b'), "{msg}");
        assert!(msg.contains("research-bot"), "{msg}");
        let msg = Name::new("")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("empty"), "{msg}");
    }

    #[test]
    fn serde_round_trip_validates() {
        let name = Name::new("agent_01").ok();
        let json = serde_json::to_string(&name).ok();
        assert_eq!(json.as_deref(), Some("\"agent_01\""));
        let back: Result<Name, _> = serde_json::from_str("\"agent_01\"");
        assert_eq!(back.ok(), name);
        let bad: Result<Name, _> = serde_json::from_str("\"../etc\"");
        assert!(bad.is_err());
    }

    #[test]
    fn parse_display_and_as_ref_agree() {
        let name: Result<Name, _> = "web.v2".parse();
        let name = name.ok();
        assert_eq!(
            name.as_ref().map(ToString::to_string).as_deref(),
            Some("web.v2")
        );
        assert_eq!(name.as_ref().map(AsRef::as_ref), Some("web.v2"));
    }
}
