//! The MCP revisions the gate serves, as named by the `MCP-Protocol-Version`
//! header.
//!
//! The header comes from the agent, so it is never trusted to loosen a
//! rule: it can only make the gate stricter (a revision from 2025-06-18 on
//! has no batches). Leaving it out, as 2025-03-26 clients do, gets the
//! 2025-03-26 rules, which still police every batch element.

use std::fmt;

/// An MCP protocol revision the gate serves. Ordered by date.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Revision {
    /// 2025-03-26: Streamable HTTP; JSON-RPC batches allowed.
    V2025_03_26,
    /// 2025-06-18: batches removed; `MCP-Protocol-Version` required.
    V2025_06_18,
    /// 2025-11-25.
    V2025_11_25,
    /// 2026-07-28: no sessions; method and name mirrored in headers (the
    /// gate decides from the body all the same).
    V2026_07_28,
}

/// Every revision the gate serves, oldest first.
pub const SUPPORTED_REVISIONS: [Revision; 4] = [
    Revision::V2025_03_26,
    Revision::V2025_06_18,
    Revision::V2025_11_25,
    Revision::V2026_07_28,
];

impl Revision {
    /// The revision's name, as written in `MCP-Protocol-Version`.
    pub fn as_str(self) -> &'static str {
        match self {
            Revision::V2025_03_26 => "2025-03-26",
            Revision::V2025_06_18 => "2025-06-18",
            Revision::V2025_11_25 => "2025-11-25",
            Revision::V2026_07_28 => "2026-07-28",
        }
    }

    /// The revision an `MCP-Protocol-Version` header value names, compared
    /// byte for byte.
    pub fn from_header(value: &[u8]) -> Result<Revision, UnsupportedRevision> {
        SUPPORTED_REVISIONS
            .into_iter()
            .find(|r| r.as_str().as_bytes() == value)
            .ok_or_else(|| UnsupportedRevision::new(value))
    }

    /// Whether JSON-RPC batches exist in this revision (only 2025-03-26).
    pub fn allows_batches(self) -> bool {
        self < Revision::V2025_06_18
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An `MCP-Protocol-Version` value that names no revision the gate serves.
/// Its [`Display`](fmt::Display) is the message the agent gets, with the
/// supported revisions listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedRevision {
    /// The value, escaped and cut short for a message.
    shown: String,
}

/// Longest part of a bad value repeated back to the agent.
const SHOWN_BYTES: usize = 40;

impl UnsupportedRevision {
    fn new(value: &[u8]) -> UnsupportedRevision {
        let cut = &value[..value.len().min(SHOWN_BYTES)];
        let mut shown = format!("{:?}", String::from_utf8_lossy(cut));
        if value.len() > SHOWN_BYTES {
            shown.push('…');
        }
        UnsupportedRevision { shown }
    }
}

impl fmt::Display for UnsupportedRevision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MCP-Protocol-Version {} is not a revision the Constle gate supports (supported: ",
            self.shown
        )?;
        for (i, revision) in SUPPORTED_REVISIONS.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(revision.as_str())?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for UnsupportedRevision {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_parse_exactly() {
        for revision in SUPPORTED_REVISIONS {
            assert_eq!(
                Revision::from_header(revision.as_str().as_bytes()),
                Ok(revision)
            );
        }
        for bad in [
            &b""[..],
            b"2024-11-05",
            b"2025-03-25",
            b"2099-01-01",
            b" 2025-06-18",
            b"2025-06-18 ",
            b"2025-06-18,2025-03-26",
            b"not-a-version",
            b"2025-06-18\xff",
        ] {
            assert!(Revision::from_header(bad).is_err(), "{bad:?}");
        }
        assert!(Revision::V2025_03_26.allows_batches());
        assert!(!Revision::V2025_06_18.allows_batches());
        assert!(!Revision::V2026_07_28.allows_batches());
    }

    #[test]
    fn the_message_lists_what_is_supported_and_escapes_the_value() {
        let err = Revision::from_header(b"1900-01-01").unwrap_err();
        assert_eq!(
            err.to_string(),
            "MCP-Protocol-Version \"1900-01-01\" is not a revision the Constle gate supports \
             (supported: 2025-03-26, 2025-06-18, 2025-11-25, 2026-07-28)"
        );
        let err = Revision::from_header(&[b'\x1b'; 100]).unwrap_err();
        assert!(err.to_string().contains("\"\\u{1b}"), "{err}");
        assert!(err.to_string().contains("…"), "{err}");
    }
}
