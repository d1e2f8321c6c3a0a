//! [`LedgerKey`]: whose totals these are.

use std::fmt;

use constle_identity::{DID_KEY_PREFIX, DidKey, Name};

/// Whose totals a ledger holds: the agent's DID, or its name when it has no
/// identity.
///
/// The key is one file-name component and one Redis key segment: only ASCII
/// letters, digits, `-`, `_` and `.`, never `:` or `/`, never starting with
/// `.`. A DID key (`did-z6Mk…`, base58 after the prefix) and a name key
/// (`name-<name>`) can never be equal, so an agent without a DID never shares
/// totals with one that has a DID, whatever its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LedgerKey(String);

impl LedgerKey {
    /// The key of an agent with an identity.
    pub fn for_did(did: &DidKey) -> LedgerKey {
        let did = did.to_string();
        // A DidKey always has the prefix; the fallback keeps the key
        // path-safe even if that ever changed (base58 has no ':').
        let id = did.strip_prefix(DID_KEY_PREFIX).unwrap_or(&did);
        LedgerKey(format!("did-{}", id.replace(':', "-")))
    }

    /// The key of an agent without an identity: any agent of that name on
    /// the same ledger shares these totals.
    pub fn for_name(name: &Name) -> LedgerKey {
        LedgerKey(format!("name-{name}"))
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LedgerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
