//! The human-gate votes a log records (protocol v2, several approvers),
//! checked again: each verified `gate_vote` must verify by its own
//! signature over its own members, be signed by an approver the Agentfile
//! names, and be for the policy its run recorded in `run_started`; each
//! `gate_approved` by a quorum must have the verified approvals before it.
//! So a log writer cannot relabel a vote (another tool, server or policy),
//! edit it, or approve a call with fewer votes than it says.

use std::collections::{BTreeSet, HashMap};

use constle_human_gate::quorum::verify_recorded_vote;
use constle_identity::DidKey;
use serde_json::Value;

use crate::entry::Entry;
use crate::verify::FindingCode;

/// What one file's votes have shown so far.
pub(crate) struct Votes<'a> {
    /// The approvers the Agentfile names, when it pins them.
    approvers: Option<&'a [DidKey]>,
    /// The threshold the Agentfile sets, when it pins one.
    threshold: Option<usize>,
    /// The policy digest of the run the entries belong to.
    policy: Option<String>,
    /// Per request id, who approved it (approver keys, or `terminal`).
    approvals: HashMap<String, BTreeSet<String>>,
}

impl<'a> Votes<'a> {
    pub(crate) fn new(approvers: Option<&'a [DidKey]>, threshold: Option<usize>) -> Votes<'a> {
        Votes {
            approvers,
            threshold,
            policy: None,
            approvals: HashMap::new(),
        }
    }

    /// Whether entries named `event` are read here (their fields must be
    /// parsed).
    pub(crate) fn reads(event: &str) -> bool {
        matches!(event, "run_started" | "gate_vote" | "gate_approved")
    }

    /// What is wrong with `entry`, if it is a vote or a quorum's approval.
    pub(crate) fn check(&mut self, entry: &Entry) -> Option<(FindingCode, String)> {
        let text = |key: &str| entry.fields.get(key).and_then(Value::as_str);
        match entry.event.as_str() {
            "run_started" => {
                self.policy = text("policy_digest").map(str::to_owned);
                None
            }
            "gate_vote" if entry.fields.get("verified") == Some(&Value::Bool(true)) => {
                self.signed_vote(entry)
            }
            "gate_vote" if text("decided_by") == Some("terminal") => {
                let counted = entry.fields.get("counted") != Some(&Value::Bool(false));
                if counted && text("decision") == Some("approved") {
                    self.approved(text("request_id")?, "terminal".into());
                }
                None
            }
            "gate_approved" if text("decided_by") == Some("quorum") => self.quorum(entry),
            _ => None,
        }
    }

    fn signed_vote(&mut self, entry: &Entry) -> Option<(FindingCode, String)> {
        let Ok((key, fields)) = verify_recorded_vote(&entry.fields) else {
            let detail = "the vote's signature does not verify over its own members".into();
            return Some((FindingCode::ApprovalSignatureInvalid, detail));
        };
        if self.approvers.is_some_and(|a| !a.contains(&key)) {
            let detail =
                format!("the vote is signed by {key}, which is not an approver of the Agentfile");
            return Some((FindingCode::ApprovalSignatureInvalid, detail));
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

    fn approved(&mut self, request: &str, by: String) {
        self.approvals
            .entry(request.to_owned())
            .or_default()
            .insert(by);
    }

    fn quorum(&self, entry: &Entry) -> Option<(FindingCode, String)> {
        let request = entry
            .fields
            .get("request_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let recorded = entry.fields.get("threshold").and_then(Value::as_u64);
        let threshold = match (self.threshold, recorded) {
            (Some(pinned), _) => pinned,
            (None, Some(k)) => usize::try_from(k).unwrap_or(usize::MAX),
            (None, None) => usize::MAX,
        };
        let votes = self.approvals.get(request).map_or(0, BTreeSet::len);
        (votes < threshold).then(|| {
            let detail = format!(
                "request {request} is recorded as approved by a quorum of {threshold}, but the log holds {votes} verified approval(s) before it"
            );
            (FindingCode::QuorumUnproven, detail)
        })
    }
}
