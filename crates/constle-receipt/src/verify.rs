//! Verifying a receipt offline: every part of it is bound by a signature
//! or a proof, so only an unedited receipt verifies.
//!
//! - the checkpoint, by the agent's key under the origin (the log key) and
//!   by each witness's cosignature, one per witness listed, in order, and
//!   no other signature line;
//! - each entry, by its inclusion proof against the checkpoint's root at
//!   the leaf index of its own `seq`, and by its signature by the DID;
//! - `agent`, `origin` and `did`, by the log key and the entries;
//! - `policy_digest`, by `run_started`; the run's bounds, by `run_finished`
//!   naming `run_started`; the tool lists, by their entries, in `seq`
//!   order between the two.
//!
//! With [`Pins`] (the Agentfile), the DID, origin and witnesses must be the
//! pinned ones and the quorum is the pinned one; without, they are the
//! receipt's own and every witness it lists must have cosigned.

use constle_audit::{Entry, parse_line, verify_signed_line};
use constle_identity::{DidKey, Name};
use constle_tlog::{
    InclusionProof, LogKey, Origin, SignedCheckpoint, TreeHead, VerifiedCheckpoint,
    VerifiedCosignature, WitnessKey, verify_cosignature, verify_inclusion,
};
use jiff::Timestamp;
use serde_json::Value;

use crate::error::{PinsError, VerifyError};
use crate::format::{Included, Receipt};

/// What the Agentfile says of the log: its key (origin and the agent's
/// DID), its witnesses, and how many of them must cosign.
#[derive(Clone, Debug)]
pub struct Pins {
    log_key: LogKey,
    witnesses: Vec<WitnessKey>,
    quorum: usize,
}

impl Pins {
    /// The pins of the log `log_key`, cosigned by `quorum` of `witnesses`.
    ///
    /// # Errors
    ///
    /// [`PinsError`] for a quorum above the witnesses' number or two
    /// witnesses of one name.
    pub fn new(
        log_key: LogKey,
        witnesses: Vec<WitnessKey>,
        quorum: usize,
    ) -> Result<Pins, PinsError> {
        if quorum > witnesses.len() {
            return Err(PinsError::Quorum {
                quorum,
                witnesses: witnesses.len(),
            });
        }
        for (index, witness) in witnesses.iter().enumerate() {
            if witnesses[..index]
                .iter()
                .any(|w| w.name() == witness.name())
            {
                return Err(PinsError::DuplicateWitness {
                    name: witness.name().to_owned(),
                });
            }
        }
        Ok(Pins {
            log_key,
            witnesses,
            quorum,
        })
    }

    /// The log's key.
    pub fn log_key(&self) -> &LogKey {
        &self.log_key
    }

    /// The witnesses.
    pub fn witnesses(&self) -> &[WitnessKey] {
        &self.witnesses
    }

    /// How many cosignatures a receipt needs: the quorum, and at least one
    /// (a checkpoint no witness cosigned is only the agent's key's word).
    pub fn needed(&self) -> usize {
        self.quorum.max(1)
    }
}

/// One entry of the run, as the receipt shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunEntry {
    /// Its `seq`, also its leaf index.
    pub seq: u64,
    /// When it was recorded.
    pub ts: Timestamp,
}

/// One tool list a server offered the agent during the run
/// (`mcp_tools_offered`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolsOffered {
    /// Its entry's `seq`.
    pub seq: u64,
    /// The server's id.
    pub server: String,
    /// The tools' names, in the order the agent got them.
    pub tools: Vec<String>,
    /// `sha256:` of the JCS bytes of the tools array the agent got.
    pub digest: String,
}

/// A receipt that verified. Made only by [`Receipt::verify`].
#[derive(Clone, Debug)]
pub struct VerifiedReceipt {
    receipt: Receipt,
    log_key: LogKey,
    policy_digest: String,
    started: RunEntry,
    finished: RunEntry,
    exit_status: Option<i64>,
    tools: Vec<ToolsOffered>,
    checkpoint: VerifiedCheckpoint,
    cosignatures: Vec<VerifiedCosignature>,
    quorum: usize,
    pinned: bool,
}

impl VerifiedReceipt {
    /// The receipt itself, as read.
    pub fn receipt(&self) -> &Receipt {
        &self.receipt
    }

    /// The agent.
    pub fn agent(&self) -> &Name {
        self.log_key.origin().agent()
    }

    /// The agent's key, which signed the checkpoint and every entry.
    pub fn did(&self) -> &DidKey {
        self.log_key.did()
    }

    /// The log's origin.
    pub fn origin(&self) -> &Origin {
        self.log_key.origin()
    }

    /// `sha256:` of the Agentfile's text the run recorded.
    pub fn policy_digest(&self) -> &str {
        &self.policy_digest
    }

    /// The run's first entry, `run_started`.
    pub fn started(&self) -> &RunEntry {
        &self.started
    }

    /// The run's last entry, `run_finished`.
    pub fn finished(&self) -> &RunEntry {
        &self.finished
    }

    /// The exit status `run_finished` records, if it records one.
    pub fn exit_status(&self) -> Option<i64> {
        self.exit_status
    }

    /// The tool lists the servers offered, in `seq` order.
    pub fn tools(&self) -> &[ToolsOffered] {
        &self.tools
    }

    /// The checkpoint's size and root.
    pub fn head(&self) -> TreeHead {
        self.checkpoint.head()
    }

    /// The cosignatures, in the checkpoint's order.
    pub fn cosignatures(&self) -> &[VerifiedCosignature] {
        &self.cosignatures
    }

    /// The quorum the cosignatures were checked against.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Whether the keys and quorum came from an Agentfile ([`Pins`]), not
    /// from the receipt itself.
    pub fn pinned(&self) -> bool {
        self.pinned
    }
}

impl Receipt {
    /// Verifies the receipt offline (see the module docs), against `pins`
    /// when given.
    ///
    /// # Errors
    ///
    /// [`VerifyError`] naming the first part that failed.
    pub fn verify(&self, pins: Option<&Pins>) -> Result<VerifiedReceipt, VerifyError> {
        let log_key = self.log_key(pins)?;
        // What costs only hashing first (the entries in the tree the
        // checkpoint claims, how they fit together), the signatures that
        // make the claim good after: an edit is found soon either way.
        let signed =
            SignedCheckpoint::parse(self.checkpoint.as_bytes()).map_err(VerifyError::Checkpoint)?;
        let head = signed.claimed_head();
        let started = included("run_started", &self.run_started, head)?;
        let finished = included("run_finished", &self.run_finished, head)?;
        let offered: Vec<Shown> = (self.tools_offered.iter().enumerate())
            .map(|(index, line)| included(&format!("tools_offered[{index}]"), line, head))
            .collect::<Result<_, _>>()?;
        let agent = log_key.origin().agent().as_str();
        placed(&started, "run_started", agent)?;
        placed(&finished, "run_finished", agent)?;
        let tools = offered
            .iter()
            .map(|shown| tools_offered(shown, agent))
            .collect::<Result<Vec<_>, _>>()?;
        let (started, finished) = (&started, &finished);
        self.run_bounds(&started.entry, &finished.entry, &tools)?;
        let recorded = started
            .entry
            .fields
            .get("policy_digest")
            .and_then(Value::as_str);
        if recorded != Some(self.policy_digest.as_str()) {
            return Err(VerifyError::PolicyDigest {
                found: self.policy_digest.clone(),
                recorded: recorded.unwrap_or("null").to_owned(),
            });
        }
        let witnesses = self.witness_keys(&log_key, pins)?;
        let checkpoint = signed.verify(&log_key).map_err(VerifyError::Checkpoint)?;
        let cosignatures = cosignatures(&checkpoint, &witnesses)?;
        let quorum = pins.map_or(witnesses.len().max(1), Pins::needed);
        if cosignatures.len() < quorum {
            return Err(VerifyError::QuorumMissed {
                cosigned: cosignatures.len(),
                quorum,
            });
        }
        for shown in [started, finished].into_iter().chain(&offered) {
            verify_signed_line(&shown.bytes, log_key.did()).map_err(|source| {
                VerifyError::Entry {
                    part: shown.part.clone(),
                    source,
                }
            })?;
        }
        Ok(VerifiedReceipt {
            receipt: self.clone(),
            policy_digest: self.policy_digest.clone(),
            started: RunEntry {
                seq: started.entry.seq,
                ts: started.entry.ts,
            },
            exit_status: finished
                .entry
                .fields
                .get("exit_status")
                .and_then(Value::as_i64),
            finished: RunEntry {
                seq: finished.entry.seq,
                ts: finished.entry.ts,
            },
            tools,
            checkpoint,
            cosignatures,
            quorum,
            pinned: pins.is_some(),
            log_key,
        })
    }

    /// The log key the receipt names, which must be the pinned one.
    fn log_key(&self, pins: Option<&Pins>) -> Result<LogKey, VerifyError> {
        let did = DidKey::parse(&self.did).map_err(|err| VerifyError::Did(err.to_string()))?;
        let origin = Origin::parse(&self.origin).map_err(VerifyError::Origin)?;
        if origin.agent().as_str() != self.agent {
            return Err(VerifyError::AgentNotOrigins {
                agent: self.agent.clone(),
                origin: self.origin.clone(),
            });
        }
        if let Some(pinned) = pins.map(Pins::log_key) {
            let differs = |what, pinned: &str, found: &str| VerifyError::NotPinned {
                what,
                pinned: pinned.to_owned(),
                found: found.to_owned(),
            };
            if pinned.did() != &did {
                return Err(differs("did", pinned.did().as_str(), did.as_str()));
            }
            if pinned.origin() != &origin {
                return Err(differs("origin", pinned.origin().as_str(), origin.as_str()));
            }
        }
        Ok(LogKey::new(origin, &did))
    }

    /// The witnesses the receipt lists: each once, none named like the
    /// log, each one of the pinned ones.
    fn witness_keys(
        &self,
        log_key: &LogKey,
        pins: Option<&Pins>,
    ) -> Result<Vec<WitnessKey>, VerifyError> {
        let mut keys: Vec<WitnessKey> = Vec::with_capacity(self.witnesses.len());
        for (index, vkey) in self.witnesses.iter().enumerate() {
            let key = WitnessKey::from_vkey(vkey)
                .map_err(|source| VerifyError::WitnessKey { index, source })?;
            if key.name() == log_key.origin().as_str()
                || keys.iter().any(|k| k.name() == key.name())
            {
                return Err(VerifyError::DuplicateWitness {
                    name: key.name().to_owned(),
                });
            }
            if pins.is_some_and(|p| !p.witnesses.contains(&key)) {
                return Err(VerifyError::UnknownWitness { vkey: vkey.clone() });
            }
            keys.push(key);
        }
        Ok(keys)
    }

    /// `run_finished` names `run_started`, and the tool lists lie between
    /// them in `seq` order.
    fn run_bounds(
        &self,
        started: &Entry,
        finished: &Entry,
        tools: &[ToolsOffered],
    ) -> Result<(), VerifyError> {
        let named = finished
            .fields
            .get("run_started_seq")
            .and_then(Value::as_u64);
        if named != Some(started.seq) {
            return Err(VerifyError::Misplaced {
                part: "run_finished".into(),
                seq: finished.seq,
                detail: format!(
                    "it ends the run started at entry {named:?}, not at entry {}",
                    started.seq
                ),
            });
        }
        let mut previous = started.seq;
        for (index, list) in tools.iter().enumerate() {
            if list.seq <= previous || list.seq >= finished.seq {
                return Err(VerifyError::Misplaced {
                    part: format!("tools_offered[{index}]"),
                    seq: list.seq,
                    detail: format!(
                        "not in seq order between run_started (entry {}) and run_finished (entry {})",
                        started.seq, finished.seq
                    ),
                });
            }
            previous = list.seq;
        }
        Ok(())
    }
}

/// The cosignature of each witness, in order: the checkpoint's signature
/// lines are the agent's and then exactly one per witness.
fn cosignatures(
    checkpoint: &VerifiedCheckpoint,
    witnesses: &[WitnessKey],
) -> Result<Vec<VerifiedCosignature>, VerifyError> {
    let lines: Vec<&[u8]> = checkpoint.signed().signature_lines().collect();
    if lines.len() != witnesses.len() + 1 {
        return Err(VerifyError::SignatureLines {
            found: lines.len(),
            expected: witnesses.len() + 1,
        });
    }
    // The agent's line verified, and is none of the witnesses': so it is
    // the first, and every line is accounted for.
    witnesses
        .iter()
        .zip(&lines[1..])
        .map(|(witness, line)| {
            let failed = |source| VerifyError::Cosignature {
                witness: witness.name().to_owned(),
                source,
            };
            let line = std::str::from_utf8(line)
                .map_err(|_| failed(constle_tlog::CosignatureError::Malformed))?;
            verify_cosignature(checkpoint, witness, line).map_err(failed)
        })
        .collect()
}

/// One entry of the receipt: which part it is, its line, what it says.
struct Shown {
    part: String,
    bytes: Vec<u8>,
    entry: Entry,
}

/// The entry `line` shows, which is in the tree `head` at the index of its
/// `seq` (its signature is checked apart).
fn included(part: &str, line: &Included, head: TreeHead) -> Result<Shown, VerifyError> {
    let bytes = line.line();
    let entry = parse_line(&bytes).map_err(|err| VerifyError::Entry {
        part: part.to_owned(),
        source: err.into(),
    })?;
    let not_included = |source| VerifyError::NotIncluded {
        part: part.to_owned(),
        seq: entry.seq,
        source,
    };
    let proof =
        InclusionProof::new(entry.seq, head.size, line.proof.clone()).map_err(not_included)?;
    verify_inclusion(&bytes, &head, &proof).map_err(not_included)?;
    Ok(Shown {
        part: part.to_owned(),
        bytes,
        entry,
    })
}

/// `shown` is the agent's `event`.
fn placed(shown: &Shown, event: &str, agent: &str) -> Result<(), VerifyError> {
    let entry = &shown.entry;
    let misplaced = |detail: String| VerifyError::Misplaced {
        part: shown.part.clone(),
        seq: entry.seq,
        detail,
    };
    if entry.event != event {
        return Err(misplaced(format!(
            "it is a {} entry, not {event}",
            entry.event
        )));
    }
    if entry.agent != agent {
        return Err(misplaced(format!(
            "it is agent `{}`'s, not `{agent}`'s",
            entry.agent
        )));
    }
    Ok(())
}

/// What one `mcp_tools_offered` entry says.
fn tools_offered(shown: &Shown, agent: &str) -> Result<ToolsOffered, VerifyError> {
    placed(shown, "mcp_tools_offered", agent)?;
    let entry = &shown.entry;
    let text = |key| {
        entry
            .fields
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let tools = entry
        .fields
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|names| {
            names
                .iter()
                .map(|n| n.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>()
        });
    match (text("server"), tools, text("digest")) {
        (Some(server), Some(tools), Some(digest)) => Ok(ToolsOffered {
            seq: entry.seq,
            server,
            tools,
            digest,
        }),
        _ => Err(VerifyError::Misplaced {
            part: shown.part.clone(),
            seq: entry.seq,
            detail: "it lacks a `server`, `tools` (names) or `digest`".into(),
        }),
    }
}
