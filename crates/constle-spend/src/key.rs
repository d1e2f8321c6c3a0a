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
/// totals with one that has a DID, whatever its name. A
/// [scoped](LedgerKey::scoped) key (`llm-<key>`) starts with neither prefix,
/// so it equals no agent's own key either.
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

    /// The key of this agent's totals kept apart for `scope`: another
    /// ledger, with its own day, month and last-run totals, beside (never
    /// inside) the agent's shared ones.
    pub fn scoped(&self, scope: Scope) -> LedgerKey {
        LedgerKey(format!("{}-{}", scope.as_str(), self.0))
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

/// A part of an agent's spend that has caps of its own, counted in a
/// ledger of its own ([`LedgerKey::scoped`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scope {
    /// Model calls alone, against `llm.spending`'s caps.
    Llm,
}

impl Scope {
    /// The Agentfile section whose caps hold this scope's totals, as a
    /// prefix of a cap's field: `llm.spending.`.
    pub fn section(self) -> &'static str {
        match self {
            Scope::Llm => "llm.spending.",
        }
    }

    /// The key's prefix: never `did` or `name`, so a scoped key is never an
    /// agent's own.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Llm => "llm",
        }
    }
}
