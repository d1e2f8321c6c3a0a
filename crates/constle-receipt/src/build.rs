//! Building a run's receipt from its agent's log files.
//!
//! A run is a `run_started` entry and the `run_finished` that names it
//! (`run_started_seq`), with no other run's start or end between them (so
//! every entry between is the run's). Its checkpoint is the first
//! `checkpoint` entry after `run_finished` whose tree covers
//! `run_finished` and that the pinned quorum of witnesses cosigned
//! (`checkpoint_cosigned` entries of its size and root), as docs/spec/log-checkpoints.md
//! §6 has the run write them. What is built is verified against the pins
//! before it is returned.

use std::collections::HashMap;
use std::path::Path;

use constle_audit::LineError;
use constle_tlog::{
    Cosigned, Hash, LogTree, SignedCheckpoint, VerifiedCheckpoint, WitnessKey, verify_cosignature,
};
use serde_json::Value;

use crate::error::BuildError;
use crate::format::{Included, Receipt};
use crate::log::{
    CHECKPOINT, Kept, LogLines, RUN_FINISHED, RUN_STARTED, ReadFailure, TOOLS_OFFERED,
};
use crate::verify::{Pins, VerifiedReceipt};

/// Which run to make the receipt of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// The latest run that has one: finished, and covered by a checkpoint
    /// with the quorum's cosignatures.
    Latest,
    /// The run whose `run_started` entry has this `seq`.
    StartedAt(u64),
}

/// Builds the receipt of `run` from the log in `dir` of the agent `pins`
/// names, verified against `pins`.
///
/// # Errors
///
/// [`BuildError`] saying why the run has no receipt (not finished, no
/// checkpoint after it, not enough cosignatures, …) or the log cannot be
/// read.
pub fn build(dir: &Path, pins: &Pins, run: Run) -> Result<VerifiedReceipt, BuildError> {
    if pins.witnesses().is_empty() {
        return Err(BuildError::NoWitnesses);
    }
    let agent = pins.log_key().origin().agent();
    let log = LogLines::read(dir, agent, |_| true).map_err(|failure| match failure {
        ReadFailure::Files(err) => BuildError::Files(err),
        ReadFailure::Line { seq, source } => BuildError::Line { seq, source },
    })?;
    let checkpoints = Checkpoints::read(&log, pins);
    let starts: Vec<&Kept> = log.of(RUN_STARTED).collect();
    if let Run::StartedAt(seq) = run {
        let started = starts
            .iter()
            .find(|k| k.entry.seq == seq)
            .ok_or(BuildError::NoSuchRun { seq })?;
        return receipt_of(&log, &checkpoints, pins, started);
    }
    // The latest run with a receipt; if none, why the latest finished one
    // has none (a run still going on says nothing of the one before it).
    let mut unfinished = None;
    let mut failed = None;
    for started in starts.iter().rev() {
        match receipt_of(&log, &checkpoints, pins, started) {
            Ok(receipt) => return Ok(receipt),
            Err(err @ BuildError::Unfinished { .. }) => drop(unfinished.get_or_insert(err)),
            Err(err) => drop(failed.get_or_insert(err)),
        }
    }
    Err(failed.or(unfinished).unwrap_or(BuildError::NoRun))
}

/// The receipt of the run `started` begins.
fn receipt_of(
    log: &LogLines,
    checkpoints: &Checkpoints,
    pins: &Pins,
    started: &Kept,
) -> Result<VerifiedReceipt, BuildError> {
    let start = started.entry.seq;
    let finished = log
        .of(RUN_FINISHED)
        .find(|k| {
            k.entry
                .fields
                .get("run_started_seq")
                .and_then(Value::as_u64)
                == Some(start)
        })
        .ok_or(BuildError::Unfinished { started: start })?;
    let end = finished.entry.seq;
    let during = |k: &&Kept| (start + 1..end).contains(&k.entry.seq);
    if let Some(other) = log.of(RUN_STARTED).chain(log.of(RUN_FINISHED)).find(during) {
        return Err(BuildError::Overlap {
            started: start,
            finished: end,
            other: other.entry.seq,
        });
    }
    let policy_digest = started
        .entry
        .fields
        .get("policy_digest")
        .and_then(Value::as_str)
        .ok_or(BuildError::NoPolicyDigest { seq: start })?;
    let witnessed = checkpoints.covering(start, end, pins.needed())?;
    let size = witnessed.checkpoint.head().size;
    let include = |kept: &Kept| included(&log.tree, kept, size);
    let mut note = witnessed.checkpoint.signed().as_bytes().to_vec();
    for (_, line) in &witnessed.cosignatures {
        note.extend_from_slice(line.as_bytes());
        note.push(b'\n');
    }
    let origin = pins.log_key().origin();
    let receipt = Receipt {
        agent: origin.agent().to_string(),
        did: pins.log_key().did().to_string(),
        origin: origin.to_string(),
        policy_digest: policy_digest.to_owned(),
        run_started: include(started)?,
        run_finished: include(finished)?,
        tools_offered: log
            .of(TOOLS_OFFERED)
            .filter(during)
            .map(include)
            .collect::<Result<_, _>>()?,
        checkpoint: String::from_utf8_lossy(&note).into_owned(),
        witnesses: witnessed
            .cosignatures
            .iter()
            .map(|(key, _)| key.vkey())
            .collect(),
    };
    receipt.verify(Some(pins)).map_err(BuildError::Unverifiable)
}

/// A checkpoint the log records, with the pinned witnesses' cosignatures
/// of it the log records (key and line), in the log's order.
struct Witnessed {
    checkpoint: VerifiedCheckpoint,
    cosignatures: Vec<(WitnessKey, String)>,
}

/// Every `checkpoint` entry of the log, each read once: the checkpoint
/// with its cosignatures, or what is wrong with it.
struct Checkpoints(Vec<(u64, Result<Witnessed, Problem>)>);

/// What is wrong with a recorded checkpoint, said when a run needs it.
enum Problem {
    Refused(String),
    Rewritten(u64),
}

impl Checkpoints {
    fn read(log: &LogLines, pins: &Pins) -> Checkpoints {
        // By size and root: the checkpoint text a cosignature is of.
        let mut cosigned: HashMap<(u64, Hash), Vec<&Cosigned>> = HashMap::new();
        for recorded in &log.recorded.cosigned {
            let head = recorded.head;
            cosigned
                .entry((head.size, head.root))
                .or_default()
                .push(recorded);
        }
        let read = |kept: &Kept| {
            let checkpoint = recorded_checkpoint(log, pins, kept)?;
            let head = checkpoint.head();
            let candidates = cosigned
                .get(&(head.size, head.root))
                .map_or(&[][..], Vec::as_slice);
            let cosignatures = recorded_cosignatures(candidates, pins, &checkpoint);
            Ok(Witnessed {
                checkpoint,
                cosignatures,
            })
        };
        Checkpoints(log.of(CHECKPOINT).map(|k| (k.entry.seq, read(k))).collect())
    }

    /// The first checkpoint recorded after the run's end (`end`) that
    /// covers it and has `needed` cosignatures.
    fn covering(&self, start: u64, end: u64, needed: usize) -> Result<&Witnessed, BuildError> {
        let mut best = None;
        for (seq, read) in self.0.iter().filter(|(seq, _)| *seq > end) {
            let witnessed = match read {
                Ok(witnessed) => witnessed,
                Err(Problem::Refused(detail)) => {
                    return Err(BuildError::Checkpoint {
                        seq: *seq,
                        detail: detail.clone(),
                    });
                }
                Err(Problem::Rewritten(size)) => {
                    return Err(BuildError::Rewritten {
                        seq: *seq,
                        size: *size,
                    });
                }
            };
            if witnessed.checkpoint.head().size <= end {
                continue;
            }
            if witnessed.cosignatures.len() >= needed {
                return Ok(witnessed);
            }
            best = best.max(Some(witnessed.cosignatures.len()));
        }
        Err(match best {
            None => BuildError::NoCheckpoint {
                started: start,
                finished: end,
            },
            Some(best) => BuildError::NotWitnessed {
                started: start,
                finished: end,
                best,
                needed,
            },
        })
    }
}

/// The checkpoint a `checkpoint` entry records: signed by the pinned key
/// alone, and whose root is the log's at its size.
fn recorded_checkpoint(
    log: &LogLines,
    pins: &Pins,
    kept: &Kept,
) -> Result<VerifiedCheckpoint, Problem> {
    let refused = |detail: &str| Problem::Refused(detail.to_owned());
    let note = kept
        .entry
        .fields
        .get("note")
        .and_then(Value::as_str)
        .ok_or_else(|| refused("it has no `note`"))?;
    let checkpoint = SignedCheckpoint::parse(note.as_bytes())
        .and_then(|signed| signed.verify(pins.log_key()))
        .map_err(|err| refused(&err.to_string()))?;
    if checkpoint.signed().signature_lines().count() != 1 {
        return Err(refused("its note holds other signatures than the agent's"));
    }
    let head = checkpoint.head();
    match log.tree.root_at(head.size) {
        Ok(root) if root == head.root => Ok(checkpoint),
        Ok(_) => Err(Problem::Rewritten(head.size)),
        Err(err) => Err(refused(&format!("it covers {} entries: {err}", head.size))),
    }
}

/// Of the `checkpoint_cosigned` entries of `checkpoint`'s size and root,
/// the first by each pinned witness that verifies, in the log's order.
/// Others (a witness not pinned, one that does not verify) are not the
/// checkpoint's.
fn recorded_cosignatures(
    candidates: &[&Cosigned],
    pins: &Pins,
    checkpoint: &VerifiedCheckpoint,
) -> Vec<(WitnessKey, String)> {
    let mut found: Vec<(WitnessKey, String)> = Vec::new();
    for recorded in candidates {
        let Some(key) = pins
            .witnesses()
            .iter()
            .find(|w| w.name() == recorded.witness)
        else {
            continue;
        };
        let line = recorded.line.strip_suffix('\n').unwrap_or(&recorded.line);
        if found.iter().all(|(k, _)| k != key) && verify_cosignature(checkpoint, key, line).is_ok()
        {
            found.push((key.clone(), line.to_owned()));
        }
    }
    found
}

/// `kept`'s line with its inclusion proof in the tree of `size`, which
/// holds it (`size` is past the run's end).
fn included(tree: &LogTree, kept: &Kept, size: u64) -> Result<Included, BuildError> {
    let seq = kept.entry.seq;
    let proof = tree
        .inclusion_proof(seq, size)
        .map_err(|source| BuildError::Proof { seq, source })?;
    match constle_json::parse(&kept.line) {
        Ok(Value::Object(entry)) => Ok(Included {
            entry,
            proof: proof.hashes().to_vec(),
        }),
        _ => Err(BuildError::Line {
            seq,
            source: LineError::Malformed("not a JSON object".into()),
        }),
    }
}
