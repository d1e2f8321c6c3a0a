//! The human-gate votes a log records (protocol v2, several approvers),
//! checked again: each verified `gate_vote` must verify by its own
//! signature over its own members, be signed by an approver the Agentfile
//! names (with an approver set: an approver of the version in force for
//! that call), and be for the policy its run recorded in `run_started`;
//! each `gate_approved` by a quorum must have the verified approvals before
//! it, a terminal approval among them only when the Agentfile says it
//! counts (`terminal_approves`, never the log's own `counted`); each set
//! version the log names must be one the set verifies to. So a log writer
//! cannot relabel a vote (another tool, server or policy), edit it, count a
//! revoked key or a terminal approval, or approve a call with fewer votes
//! than it says.

use std::collections::{BTreeSet, HashMap};

use constle_approval::quorum::verify_recorded_vote;
use constle_identity::DidKey;
use serde_json::Value;

use crate::entry::Entry;
use crate::finding::FindingCode;
use crate::trust::{Approvers, SetVersion};

/// What one file's votes have shown so far.
pub(crate) struct Votes<'a> {
    /// Who may approve, when the Agentfile pins it.
    pinned: Option<&'a Approvers>,
    /// Whether a terminal approval counts, when the Agentfile pins it.
    terminal_approves: Option<bool>,
    /// The policy digest of the run the entries belong to.
    policy: Option<String>,
    /// Per request id, the set version in force for it.
    versions: HashMap<String, u64>,
    /// Per request id, who approved it (approver keys, or `terminal`).
    approvals: HashMap<String, BTreeSet<String>>,
    /// The request ids approved at the terminal where that does not count.
    uncounted_terminal: BTreeSet<String>,
}

/// A finding about one entry.
type Problem = Option<(FindingCode, String)>;

impl<'a> Votes<'a> {
    /// `terminal_approves` is the Agentfile's, `None` when nothing is
    /// pinned (each terminal vote's `counted` is then taken).
    pub(crate) fn new(pinned: Option<&'a Approvers>, terminal_approves: Option<bool>) -> Votes<'a> {
        Votes {
            pinned,
            terminal_approves,
            policy: None,
            versions: HashMap::new(),
            approvals: HashMap::new(),
            uncounted_terminal: BTreeSet::new(),
        }
    }

    /// Whether entries named `event` are read here (their fields must be
    /// parsed).
    pub(crate) fn reads(event: &str) -> bool {
        matches!(
            event,
            "run_started"
                | "approver_set_in_force"
                | "gate_triggered"
                | "gate_vote"
                | "gate_approved"
        )
    }

    /// What is wrong with `entry`, if it is one of the entries read here.
    pub(crate) fn check(&mut self, entry: &Entry) -> Problem {
        let text = |key: &str| entry.fields.get(key).and_then(Value::as_str);
        match entry.event.as_str() {
            "run_started" => {
                self.policy = text("policy_digest").map(str::to_owned);
                None
            }
            "approver_set_in_force" => self.set_version(entry),
            "gate_triggered" => {
                let version = entry
                    .fields
                    .get("approver_set_version")
                    .and_then(Value::as_u64);
                if let (Some(request), Some(version)) = (text("request_id"), version) {
                    self.versions.insert(request.to_owned(), version);
                }
                None
            }
            "gate_vote" if entry.fields.get("verified") == Some(&Value::Bool(true)) => {
                self.signed_vote(entry)
            }
            "gate_vote" if text("decided_by") == Some("terminal") => {
                if text("decision") == Some("approved") {
                    self.terminal_approved(entry, text("request_id")?);
                }
                None
            }
            "gate_approved" if text("decided_by") == Some("quorum") => self.quorum(entry),
            _ => None,
        }
    }

    /// The set version an `approver_set_in_force` names must be one of the
    /// verified versions, digest and all.
    fn set_version(&self, entry: &Entry) -> Problem {
        let Some(Approvers::Versions(versions)) = self.pinned else {
            return None;
        };
        let version = entry.fields.get("version").and_then(Value::as_u64);
        let digest = entry.fields.get("digest").and_then(Value::as_str);
        let known = versions
            .iter()
            .any(|v| Some(v.version) == version && Some(v.digest.as_str()) == digest);
        (!known).then(|| {
            let detail = format!(
                "approver set version {} ({}) is not one the set directory verifies to",
                version.map_or("?".into(), |v| v.to_string()),
                digest.unwrap_or("no digest")
            );
            (FindingCode::ApproverSetUnknown, detail)
        })
    }

    fn signed_vote(&mut self, entry: &Entry) -> Problem {
        let Ok((key, fields)) = verify_recorded_vote(&entry.fields) else {
            let detail = "the vote's signature does not verify over its own members".into();
            return Some((FindingCode::ApprovalSignatureInvalid, detail));
        };
        if let Some(why) = self.not_an_approver(&fields.request_id, &key) {
            return Some((FindingCode::ApprovalSignatureInvalid, why));
        }
        if let Some(policy) = self.policy.as_ref().filter(|p| **p != fields.policy_digest) {
            let detail = format!(
                "the vote is for policy {}, its run's is {policy}",
                fields.policy_digest
            );
            return Some((FindingCode::VoteMismatch, detail));
        }
        if fields.decision == "approved" {
            self.approved(&fields.request_id, key.to_string());
        }
        None
    }

    /// Why `key` may not vote on `request`, if it may not.
    fn not_an_approver(&self, request: &str, key: &DidKey) -> Option<String> {
        match self.pinned? {
            Approvers::Listed { keys, .. } => (!keys.contains(key)).then(|| {
                format!("the vote is signed by {key}, which is not an approver of the Agentfile")
            }),
            Approvers::Versions(versions) => match self.version_of(request, versions) {
                Some(v) if v.keys.contains(key) => None,
                Some(v) => Some(format!(
                    "the vote is signed by {key}, which is not an approver of set version {} (in force for this call)",
                    v.version
                )),
                None => Some(format!(
                    "the log names no verified approver set version for request {request}"
                )),
            },
        }
    }

    fn version_of<'v>(&self, request: &str, versions: &'v [SetVersion]) -> Option<&'v SetVersion> {
        let number = self.versions.get(request)?;
        versions.iter().find(|v| v.version == *number)
    }

    /// An approval at the terminal counts when the Agentfile says so; only
    /// an unpinned check takes the log's word (`counted`).
    fn terminal_approved(&mut self, entry: &Entry, request: &str) {
        let recorded = entry.fields.get("counted") != Some(&Value::Bool(false));
        match self.terminal_approves.unwrap_or(recorded) {
            true => self.approved(request, "terminal".into()),
            false => {
                self.uncounted_terminal.insert(request.to_owned());
            }
        }
    }

    fn approved(&mut self, request: &str, by: String) {
        self.approvals
            .entry(request.to_owned())
            .or_default()
            .insert(by);
    }

    fn quorum(&self, entry: &Entry) -> Problem {
        let request = entry
            .fields
            .get("request_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let recorded = entry.fields.get("threshold").and_then(Value::as_u64);
        let threshold = match self.pinned {
            Some(Approvers::Listed { threshold, .. }) => Some(*threshold),
            Some(Approvers::Versions(versions)) => {
                self.version_of(request, versions).map(|v| v.threshold)
            }
            None => None,
        };
        let threshold = threshold
            .or(recorded.and_then(|k| usize::try_from(k).ok()))
            .unwrap_or(usize::MAX);
        let votes = self.approvals.get(request).map_or(0, BTreeSet::len);
        (votes < threshold).then(|| {
            let terminal = match self.uncounted_terminal.contains(request) {
                true => match self.terminal_approves {
                    Some(_) => " (and an approval at the terminal, which does not count: the Agentfile says terminal_approves: false)",
                    None => " (and an approval at the terminal it records as not counted)",
                },
                false => "",
            };
            let detail = format!(
                "request {request} is recorded as approved by a quorum of {threshold}, but the log holds {votes} verified approval(s) before it{terminal}"
            );
            (FindingCode::QuorumUnproven, detail)
        })
    }
}
