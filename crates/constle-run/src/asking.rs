//! What the v1 and v2 human gates share: the channels a call is put to
//! (the host terminal, the audit log, the run's shutoff), why a call could
//! not be put to a person at all, and how a settled call is acted on and
//! recorded.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use constle_approval::RequestError;
use constle_approval::rules::{
    Action, Approved, Approvers, Denied, Input, OnTimeout, Rule, Settled, TerminalAnswer,
};
use constle_approval::{DecisionRecord, DenialReason};
use constle_audit::catalogue::{
    GateApprovedQuorum, GateApprovedTerminal, GateApprovedWebhook, GateDeniedTerminal,
    GateDeniedUnverified, GateDeniedVote, GateDeniedWebhook, GateSubject, GateTimeout,
    GateTimeoutV2, OrOmitted, SignedDecision,
};
use constle_audit::{AuditError, AuditLog, Event};
use constle_human_gate::{
    HostTty, NO_TERMINAL_MESSAGE, PromptRequest, TerminalOutcome, ask_terminal,
};
use constle_mcp_gate::{Approval, Shutoff, ToolCall};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::events;
use crate::output::OutputHold;
use crate::stop::{GateStop, GateStops};

/// How often the webhook is polled for a decision.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The channels of one run's human gates.
pub(crate) struct Inner {
    pub(crate) agent: String,
    pub(crate) timeout: Duration,
    pub(crate) on_timeout: OnTimeout,
    pub(crate) terminal: Option<Mutex<HostTty>>,
    /// Held while the terminal asks, so that the agent's output cannot sit
    /// beside the question.
    pub(crate) hold: OutputHold,
    pub(crate) said_no_terminal: AtomicBool,
    pub(crate) log: Arc<AuditLog>,
    /// Thrown on an abort, before the refusal is answered.
    pub(crate) shutoff: Shutoff,
    pub(crate) stops: GateStops,
}

/// Why a gated call could not even be put to a person. The call is
/// refused: a gate that cannot ask, or cannot record, never forwards; the
/// MCP gate records the refusal ([`Approval::Failed`]) with this error in
/// full, and the agent is told only [`GateFailure::for_agent`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum GateFailure {
    #[error("the request could not be built: {0}")]
    Request(#[from] RequestError),
    #[error("the decision could not be recorded: {0}")]
    Audit(#[from] AuditError),
    #[error("the approver set cannot be used: {0}")]
    ApproverSet(String),
}

impl GateFailure {
    /// What failed, as the agent may read it: the inner errors name host
    /// paths (the approver set, `$CONSTLE_HOME`, the audit log), so only a
    /// request that cannot be built, which is about the call's own
    /// arguments, says more than what failed.
    pub(crate) fn for_agent(&self) -> String {
        match self {
            GateFailure::Request(_) => self.to_string(),
            GateFailure::Audit(_) => "the decision could not be recorded".into(),
            GateFailure::ApproverSet(_) => "the approver set cannot be used".into(),
        }
    }
}

/// What a channel said, as the approval rules take it.
pub(crate) type Heard<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Input>> + Send + 'a>>;

/// Where a call's wait ended, and what the outcome entry adds for its
/// protocol version.
pub(crate) struct Concluded {
    pub(crate) subject: GateSubject,
    pub(crate) settled: Settled,
    /// `None` for version 1; the threshold for version 2.
    pub(crate) threshold: Option<usize>,
}

impl Inner {
    /// The rules a call of this run is settled by.
    pub(crate) fn rule(&self, approvers: Approvers) -> Rule {
        Rule {
            approvers,
            on_timeout: self.on_timeout,
        }
    }

    /// What the gate answers once the decision is on disk.
    pub(crate) fn act(&self, call: &ToolCall, action: Action) -> Approval {
        match action {
            Action::Forward => Approval::Approved,
            Action::Refuse(why) => refused(call, why),
            Action::Abort => {
                // Closed before the agent hears of the refusal: a call it
                // sends the moment the answer arrives, to any server, must
                // find every gate closed, not a run still being torn down.
                self.shutoff.close(format!(
                    "the run is stopping: tool {:?} of MCP server {:?} got no human \
                     decision in time (on_timeout: abort)",
                    call.tool, call.server
                ));
                let _ = self.stops.send(GateStop::Timeout {
                    server: call.server.clone(),
                    tool: call.tool.clone(),
                });
                refused(
                    call,
                    "no decision arrived in time (on_timeout: abort); the run is stopped",
                )
            }
        }
    }

    pub(crate) async fn record(&self, event: Event) -> Result<(), AuditError> {
        events::record(&self.log, event).await
    }

    /// Resolves only on a decision; a terminal that cannot decide leaves
    /// the wait to the webhook and the deadline.
    pub(crate) async fn ask_terminal(
        &self,
        prompt: &PromptRequest,
        deadline: Instant,
    ) -> TerminalAnswer {
        let Some(terminal) = &self.terminal else {
            if !self.said_no_terminal.swap(true, Ordering::Relaxed) {
                // Once per run, on constle's own stderr: nobody can answer here.
                let _ = writeln!(std::io::stderr().lock(), "constle: {NO_TERMINAL_MESSAGE}");
            }
            return std::future::pending().await;
        };
        let mut tty = terminal.lock().await;
        let _quiet = self.hold.hold().await;
        tty.discard_typeahead();
        match ask_terminal(&mut *tty, prompt, deadline).await {
            TerminalOutcome::NoAnswer => std::future::pending().await,
            TerminalOutcome::Approved => TerminalAnswer::Approved,
            _ => TerminalAnswer::Denied,
        }
    }

    /// Closes a prompt another channel (or the clock) answered, so the
    /// terminal never shows a question that no longer counts.
    pub(crate) async fn tell_terminal(&self, settled: &Settled) {
        let note = match settled {
            Settled::Approved(Approved::Terminal) | Settled::Denied(Denied::Terminal) => return,
            Settled::Approved(_) => "approved through the webhook",
            Settled::Denied(_) => "denied through the webhook",
            Settled::TimedOut(_) => "no decision before the deadline",
        };
        self.note_terminal(note).await;
    }

    /// A line under the prompt, when the terminal is not asking another
    /// call's question.
    pub(crate) async fn note_terminal(&self, note: &str) {
        // Locked by another call's prompt means this call's prompt, queued
        // behind it, was never shown: there is nothing to close.
        if let Some(mut tty) = self.terminal.as_ref().and_then(|t| t.try_lock().ok()) {
            let _ = tty.write_all(format!("\n   → {note}\n").as_bytes()).await;
            let _ = tty.flush().await;
        }
    }

    /// The audit entry that says how the call was settled. Version 2's
    /// (with a `threshold`) carry `version: 2`, and an approval or a
    /// timeout also the threshold and its tally.
    pub(crate) fn concluded(&self, concluded: &Concluded) -> Event {
        let Concluded {
            subject,
            settled,
            threshold,
        } = concluded;
        let subject = subject.clone();
        let version = OrOmitted(threshold.map(|_| VERSION_2));
        let denied = || DenialReason::Denied.audit_reason().to_owned();
        match settled {
            Settled::Approved(Approved::Terminal) => GateApprovedTerminal {
                subject,
                version,
                decided_by: "terminal".into(),
            }
            .into(),
            Settled::Approved(Approved::Webhook(approval)) => GateApprovedWebhook {
                subject,
                decided_by: "webhook".into(),
                signed: signed(approval.record()),
            }
            .into(),
            Settled::Approved(Approved::Quorum(quorum)) => GateApprovedQuorum {
                subject,
                version,
                decided_by: "quorum".into(),
                approvers: quorum
                    .votes()
                    .iter()
                    .map(|v| v.approver().as_str().to_owned())
                    .collect(),
                terminal: quorum.terminal(),
                threshold: OrOmitted(*threshold),
            }
            .into(),
            Settled::Denied(Denied::Terminal) => GateDeniedTerminal {
                subject,
                version,
                decided_by: "terminal".into(),
                reason: denied(),
            }
            .into(),
            Settled::Denied(Denied::Webhook(denial)) => {
                let reason = denial.reason().audit_reason().to_owned();
                // Only a decision whose every check passed carries the
                // signed fields; any other is recorded by its reason alone.
                match denial.record() {
                    Some(record) => GateDeniedWebhook {
                        subject,
                        decided_by: "webhook".into(),
                        signed: signed(record),
                        reason,
                    }
                    .into(),
                    None => GateDeniedUnverified {
                        subject,
                        channel: CHANNEL_WEBHOOK.to_owned(),
                        reason,
                    }
                    .into(),
                }
            }
            Settled::Denied(Denied::Vote(vote)) => GateDeniedVote {
                subject,
                version,
                decided_by: "webhook".into(),
                approver: vote.approver().as_str().to_owned(),
                reason: denied(),
            }
            .into(),
            Settled::TimedOut(timeout) => {
                let on_timeout = timeout.on_timeout.word().to_owned();
                let timeout_seconds = self.timeout.as_secs();
                match threshold {
                    None => GateTimeout {
                        subject,
                        on_timeout,
                        timeout_seconds,
                        webhook: OrOmitted(timeout.no_decision.first().cloned()),
                    }
                    .into(),
                    Some(threshold) => GateTimeoutV2 {
                        subject,
                        version: VERSION_2,
                        on_timeout,
                        timeout_seconds,
                        approvals: timeout.approvals,
                        webhooks: timeout.no_decision.clone(),
                        threshold: *threshold,
                    }
                    .into(),
                }
            }
        }
    }
}

/// A version 1 decision's signed members, as the log records them.
fn signed(record: &DecisionRecord) -> SignedDecision {
    SignedDecision {
        approver: record.approver().as_str().to_owned(),
        decision: record.decision().to_owned(),
        signature: record.signature().to_owned(),
    }
}

fn refused(call: &ToolCall, why: &str) -> Approval {
    Approval::Refused {
        message: format!(
            "tool {:?} of MCP server {:?} needs a human approval: {why}; \
             the Constle gate did not forward the call",
            call.tool, call.server
        ),
    }
}

/// `version` in a version 2 entry.
pub(crate) const VERSION_2: u64 = 2;

/// `channel` in an entry of a webhook decision that failed a check.
pub(crate) const CHANNEL_WEBHOOK: &str = "webhook";

/// The members every gate entry of one call shares.
pub(crate) fn subject_fields(request_id: &str, call: &ToolCall, digest: &str) -> GateSubject {
    GateSubject {
        request_id: request_id.to_owned(),
        server: call.server.clone(),
        tool: call.tool.clone(),
        subject_digest: digest.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which variant `failure` is: a variant added to [`GateFailure`] must
    /// be added here, and to the examples below.
    fn variant(failure: &GateFailure) -> usize {
        match failure {
            GateFailure::Request(_) => 0,
            GateFailure::Audit(_) => 1,
            GateFailure::ApproverSet(_) => 2,
        }
    }

    #[test]
    fn the_agent_reads_what_failed_never_a_host_path() {
        let home = "/root/.constle";
        let failures = [
            GateFailure::Request(RequestError::Random),
            GateFailure::Audit(AuditError::Io {
                path: format!("{home}/logs/agent-2026-01-01.jsonl").into(),
                message: "No space left on device".into(),
            }),
            GateFailure::ApproverSet(format!(
                "approver set /srv/approvers: cannot read {home}/approvers/sha256-1: gone"
            )),
        ];
        let mut seen: Vec<usize> = failures.iter().map(variant).collect();
        seen.dedup();
        assert_eq!(seen, [0, 1, 2], "every variant has an example");
        for failure in &failures {
            let told = failure.for_agent();
            for host in ["/root", ".constle", "/srv", "gone", "No space"] {
                assert!(!told.contains(host), "{failure:?}: {told}");
            }
            // The operator's record has it all.
            let detail = failure.to_string();
            assert!(detail.starts_with(&told), "{detail} / {told}");
        }
    }
}
