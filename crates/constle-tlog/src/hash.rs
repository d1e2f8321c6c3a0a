//! [`Hash`]: a SHA-256 node, leaf or root hash of the tree, as the tree,
//! its proofs and checkpoints spell it.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

/// A SHA-256 node or root hash of the tree.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    /// The root of the empty tree: SHA-256 of the empty string (RFC 6962 §2.1).
    pub const EMPTY: Hash = Hash(tlog_tiles::EMPTY_HASH.0);

    /// The leaf hash of one line: `SHA-256(0x00 || line)`, the line without
    /// its newline.
    pub fn leaf(line: &[u8]) -> Hash {
        Hash(tlog_tiles::record_hash(line).0)
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Reads standard, padded base64 of 32 bytes (one spelling only).
    pub fn from_base64(text: &str) -> Option<Hash> {
        let bytes = BASE64.decode(text).ok()?;
        Some(Hash(bytes.try_into().ok()?))
    }

    pub(crate) fn from_tl(h: tlog_tiles::Hash) -> Hash {
        Hash(h.0)
    }

    pub(crate) fn to_tl(self) -> tlog_tiles::Hash {
        tlog_tiles::Hash(self.0)
    }
}

impl fmt::Display for Hash {
    /// Standard base64, as in checkpoints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&BASE64.encode(self.0))
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({self})")
    }
}
