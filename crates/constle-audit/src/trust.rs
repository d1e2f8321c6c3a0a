//! What a verifier is told to trust, from the Agentfile: the agent, its
//! key, the approver key and the approvers whose recorded votes count.

use constle_identity::{DidKey, Name};

/// What the verifier is told to trust, from the Agentfile (`--agentfile`).
/// With nothing pinned, verification can only show the file is internally
/// consistent: anyone could have written a consistent log with their own key.
#[derive(Clone, Debug, Default)]
pub struct TrustAnchors {
    /// The agent the log must belong to.
    pub agent: Option<Name>,
    /// The key that must have signed every entry; `None` with `pinned` set
    /// means the Agentfile declares no identity, so the log is unsigned.
    pub agent_did: Option<DidKey>,
    /// The key that must have signed every webhook decision in the log.
    pub approver: Option<DidKey>,
    /// With several approvers (protocol v2): who may sign a recorded vote,
    /// and the threshold a quorum's approval needs.
    pub approvers: Option<Approvers>,
    /// Whether an approval at the terminal counts as one vote of a quorum:
    /// the Agentfile's `human_gates.terminal_approves` (false when it
    /// declares no quorum). Taken only when `pinned`; otherwise the log's
    /// own word (a terminal vote's `counted`) is all there is.
    pub terminal_approves: bool,
    /// Whether the fields above come from an Agentfile.
    pub pinned: bool,
}

/// The approvers an Agentfile pins, for re-verifying recorded votes.
#[derive(Clone, Debug)]
pub enum Approvers {
    /// `human_gates.approvers` and `threshold`.
    Listed {
        /// The approvers' keys.
        keys: Vec<DidKey>,
        /// How many must approve.
        threshold: usize,
    },
    /// `human_gates.approver_set`: every version of the set, verified as a
    /// chain from its pin. The log says which was in force
    /// (`approver_set_in_force`, `gate_triggered.approver_set_version`).
    Versions(Vec<SetVersion>),
}

/// One verified version of an approver set.
#[derive(Clone, Debug)]
pub struct SetVersion {
    /// Its number, from 1.
    pub version: u64,
    /// `sha256:<hex>` of its signed part.
    pub digest: String,
    /// Its approvers' keys.
    pub keys: Vec<DidKey>,
    /// How many must approve.
    pub threshold: usize,
}
