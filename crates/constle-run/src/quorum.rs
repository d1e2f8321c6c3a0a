//! Human gates with several approvers (`human_gates.approvers`, protocol
//! v2): a gated call is put to every webhook and the terminal at once, each
//! decision that arrives is checked, fed to the approval rules
//! ([`constle_approval::rules`]) and recorded as they say (`gate_vote`),
//! until they settle the call: `threshold` distinct approvers approving,
//! one verified denial, a denial at the terminal, or the deadline
//! (`on_timeout`).

use constle_approval::quorum::{Approver, BallotRequest, Binding, RejectedVote, VerifiedVote};
use constle_approval::rules::{Approvers, Input, Record, Settled, Settlement, TerminalVote};
use constle_audit::Event;
use constle_audit::catalogue::{
    ApproverSetInForce, GateSubject, GateTriggeredV2, GateVoteCounted, GateVoteRejected,
    GateVoteTerminal, OrOmitted, SignedVote,
};
use constle_human_gate::{PromptRequest, WebhookClient, WebhookUrl};
use constle_identity::DidKey;
use std::path::{Path, PathBuf};

use constle_approver_set::{ApproverSets, InForce, SetPin, store_dir};
use constle_manifest::{ApproverSetRef, Manifest, Quorum, QuorumSource};
use constle_mcp_gate::ToolCall;
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use serde_json::Value;
use tokio::time::Instant;

use crate::asking::{
    CHANNEL_WEBHOOK, Concluded, GateFailure, Heard, Inner, POLL_INTERVAL, VERSION_2, subject_fields,
};
use crate::error::RunError;

/// The approvers of a run and what every request of theirs is bound to.
pub(crate) struct QuorumGate {
    source: Source,
    terminal_approves: bool,
    webhooks: Vec<(WebhookClient, WebhookUrl)>,
    agent_did: Option<String>,
    policy_digest: String,
}

/// Where the approvers come from.
enum Source {
    Listed(InForceNow),
    /// Loaded again for every gated call, so a version that revokes a key
    /// is in force from the next call on.
    Set {
        dir: PathBuf,
        pin: SetPin,
        store: PathBuf,
        /// The version last recorded as in force.
        recorded: tokio::sync::Mutex<Option<u64>>,
    },
}

/// Who decides one call.
#[derive(Clone)]
struct InForceNow {
    approvers: Vec<Approver>,
    keys: Vec<DidKey>,
    threshold: usize,
    /// The set version, when they come from one: its number and digest.
    version: Option<(u64, String)>,
}

impl InForceNow {
    fn of_set(set: &InForce) -> InForceNow {
        let approvers = set.approvers().iter().map(|a| Approver {
            did: a.did.to_string(),
            label: a.label.to_string(),
        });
        InForceNow {
            approvers: approvers.collect(),
            keys: set.approvers().iter().map(|a| a.did.clone()).collect(),
            threshold: set.threshold(),
            version: Some((set.version(), set.digest().to_string())),
        }
    }
}

/// Loads the set `set` names (the Agentfile's), checking it against and
/// recording it in `$CONSTLE_HOME` (`home`): what a run checks before
/// anything starts, and each gated call again.
pub(crate) fn load_set(set: &ApproverSetRef, home: &Path) -> Result<InForce, RunError> {
    let pin = SetPin::parse(&set.pin).map_err(|e| RunError::ApproverSet(e.to_string()))?;
    ApproverSets::load(
        &set.dir,
        &pin,
        &store_dir(home, &pin),
        jiff::Timestamp::now(),
    )
    .map_err(|e| RunError::ApproverSet(e.to_string()))
}

impl QuorumGate {
    pub(crate) fn new(
        manifest: &Manifest,
        quorum: &Quorum,
        home: &Path,
        webhooks: Vec<(WebhookClient, WebhookUrl)>,
    ) -> Result<QuorumGate, RunError> {
        let source = match &quorum.source {
            QuorumSource::Listed {
                approvers,
                threshold,
            } => {
                let listed = approvers.iter().map(|a| Approver {
                    did: a.did.to_string(),
                    label: a.label.clone(),
                });
                Source::Listed(InForceNow {
                    approvers: listed.collect(),
                    keys: approvers.iter().map(|a| a.did.clone()).collect(),
                    threshold: *threshold,
                    version: None,
                })
            }
            QuorumSource::Set(set) => {
                let pin =
                    SetPin::parse(&set.pin).map_err(|e| RunError::ApproverSet(e.to_string()))?;
                Source::Set {
                    dir: set.dir.clone(),
                    store: store_dir(home, &pin),
                    pin,
                    recorded: tokio::sync::Mutex::new(None),
                }
            }
        };
        Ok(QuorumGate {
            source,
            terminal_approves: quorum.terminal_approves,
            webhooks,
            agent_did: manifest.identity.as_ref().map(|i| i.did.to_string()),
            policy_digest: manifest.policy_digest.to_string(),
        })
    }

    /// The approvers in force now: a set loaded again (a failure refuses
    /// the call), and `approver_set_in_force` recorded when its version is
    /// new to the run.
    async fn in_force(
        &self,
        gate: &Inner,
    ) -> Result<std::borrow::Cow<'_, InForceNow>, GateFailure> {
        let (dir, pin, store, recorded) = match &self.source {
            Source::Listed(listed) => return Ok(std::borrow::Cow::Borrowed(listed)),
            Source::Set {
                dir,
                pin,
                store,
                recorded,
            } => (dir, pin, store, recorded),
        };
        let set = ApproverSets::load(dir, pin, store, jiff::Timestamp::now())
            .map_err(|e| GateFailure::ApproverSet(e.to_string()))?;
        let mut recorded = recorded.lock().await;
        if *recorded != Some(set.version()) {
            let in_force = ApproverSetInForce {
                version: set.version(),
                digest: set.digest().to_string(),
                threshold: set.threshold(),
                approvers: set.approvers().iter().map(|a| a.did.to_string()).collect(),
            };
            gate.record(in_force.into()).await?;
            *recorded = Some(set.version());
        }
        Ok(std::borrow::Cow::Owned(InForceNow::of_set(&set)))
    }

    /// Asks and counts until the rules settle the call.
    pub(crate) async fn decide(
        &self,
        gate: &Inner,
        call: &ToolCall,
        arguments: Value,
        expires_at: jiff::Timestamp,
        deadline: Instant,
    ) -> Result<Concluded, GateFailure> {
        let binding = Binding {
            agent: gate.agent.clone(),
            agent_did: self.agent_did.clone(),
            server: call.server.clone(),
            tool: call.tool.clone(),
            policy_digest: self.policy_digest.clone(),
            expires_at,
        };
        let now = self.in_force(gate).await?;
        let request = BallotRequest::new(binding, arguments, &now.approvers, now.threshold)?;
        let subject = subject_fields(
            request.request_id().as_str(),
            call,
            &request.subject_digest().to_string(),
        );
        let channels = serde_json::json!({
            "terminal": gate.terminal.is_some(),
            "webhooks": self.webhooks.len(),
        });
        let triggered = GateTriggeredV2 {
            subject: subject.clone(),
            expires_at: request.expires_at().to_owned(),
            channels,
            version: VERSION_2,
            threshold: now.threshold,
            approvers: labelled(&now.approvers),
            policy_digest: self.policy_digest.clone(),
            approver_set_version: now.version.as_ref().map(|(v, _)| *v),
        };
        gate.record(triggered.into()).await?;
        let settled = self.count(gate, &now, &request, &subject, deadline).await?;
        Ok(Concluded {
            subject,
            settled,
            threshold: Some(now.threshold),
        })
    }

    /// Every channel at once, each vote recorded as it arrives, until the
    /// rules settle the call.
    async fn count(
        &self,
        gate: &Inner,
        now: &InForceNow,
        request: &BallotRequest,
        subject: &GateSubject,
        deadline: Instant,
    ) -> Result<Settled, GateFailure> {
        let prompt = PromptRequest::for_ballot(request, gate.timeout, gate.on_timeout);
        let mut channels: FuturesUnordered<Heard<'_>> = self
            .webhooks
            .iter()
            .map(|(client, url)| {
                Box::pin(async move {
                    let ballot = client
                        .ballot(url, request, &now.keys, deadline, POLL_INTERVAL)
                        .await;
                    vec![match ballot {
                        Ok(ballot) => Input::Vote(ballot),
                        Err(nothing) => Input::NoDecision(nothing.to_string()),
                    }]
                }) as Heard<'_>
            })
            .collect();
        channels.push(Box::pin(async {
            vec![Input::Terminal(gate.ask_terminal(&prompt, deadline).await)]
        }));
        let mut settlement = Settlement::new(gate.rule(Approvers::Quorum {
            threshold: now.threshold,
            terminal_approves: self.terminal_approves,
        }));
        let sleep = tokio::time::sleep_until(deadline);
        tokio::pin!(sleep);
        loop {
            let heard = tokio::select! {
                heard = channels.next() => heard,
                () = &mut sleep => None,
            };
            for input in heard.unwrap_or_else(|| vec![Input::Deadline]) {
                let step = settlement.step(input);
                if let Some(record) = &step.record {
                    self.write(gate, subject, record).await?;
                }
                // The approvals so far, reported to every endpoint (spec
                // §14): best effort, a report changes nothing.
                if let Some(approved) = &step.report {
                    let report = request.votes_report(approved, &now.approvers);
                    for (client, url) in &self.webhooks {
                        let report = report.clone();
                        channels.push(Box::pin(async move {
                            client.report_votes(url, request, &report).await;
                            Vec::new()
                        }));
                    }
                }
                if let Some(settled) = step.settled {
                    return Ok(settled);
                }
            }
        }
    }

    /// Writes what the rules said to record, before anything else moves.
    async fn write(
        &self,
        gate: &Inner,
        subject: &GateSubject,
        record: &Record,
    ) -> Result<(), GateFailure> {
        let entry = match record {
            Record::Vote(vote) => counted_vote(subject, vote),
            Record::Rejected(rejected) => rejected_vote(subject, rejected),
            Record::Terminal(TerminalVote::Approved) => terminal_vote(subject, "approved", None),
            Record::Terminal(TerminalVote::ApprovedNotCounted) => {
                terminal_vote(subject, "approved", Some(false))
            }
            Record::Terminal(TerminalVote::Denied) => terminal_vote(subject, "denied", None),
        };
        gate.record(entry).await?;
        if let Record::Terminal(TerminalVote::ApprovedNotCounted) = record {
            gate.note_terminal("an approval here does not count (terminal_approves: false)")
                .await;
        }
        Ok(())
    }
}

/// `gate_vote` for a decision whose every check passed: the signed members,
/// re-verifiable by `constle audit verify`.
fn counted_vote(subject: &GateSubject, vote: &VerifiedVote) -> Event {
    GateVoteCounted {
        subject: subject.clone(),
        signed: SignedVote(vote.audit_fields()),
        decided_by: "webhook".into(),
        verified: true,
    }
    .into()
}

/// `gate_vote` for a decision that failed a check: who it named (not
/// believed) and why; it counts for nothing.
fn rejected_vote(subject: &GateSubject, rejected: &RejectedVote) -> Event {
    GateVoteRejected {
        subject: subject.clone(),
        channel: CHANNEL_WEBHOOK.to_owned(),
        verified: false,
        approver: rejected.approver.clone(),
        reason: rejected.reason.audit_reason().to_owned(),
    }
    .into()
}

/// `gate_vote` for the terminal's answer; `counted: Some(false)` for an
/// approval that does not count.
fn terminal_vote(subject: &GateSubject, decision: &str, counted: Option<bool>) -> Event {
    GateVoteTerminal {
        subject: subject.clone(),
        decided_by: "terminal".into(),
        decision: decision.to_owned(),
        counted: OrOmitted(counted),
    }
    .into()
}

/// `[{did, label}]`, as `gate_triggered` records them.
fn labelled(approvers: &[Approver]) -> Value {
    let approvers = approvers
        .iter()
        .map(|a| serde_json::json!({"did": a.did, "label": a.label}));
    Value::Array(approvers.collect())
}
