//! Human gates in a run: a gated call is put to the host terminal and the
//! signed webhook at once, what they say is fed to the approval rules
//! ([`constle_approval::rules`], which settle the call: for one approver
//! the first decision wins), and the outcome is on disk in the audit log
//! before the MCP gate forwards or refuses the call.
//!
//! Every gated call writes `gate_triggered`, then exactly one of
//! `gate_approved`, `gate_denied` or `gate_timeout`. A timeout under
//! `on_timeout: abort` also ends the run: every MCP gate of the run is
//! closed (their shared [`Shutoff`]) before the agent is told, so nothing
//! it sends next reaches any server, and then the run hears of it
//! ([`GateStop::Timeout`]).

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use constle_approval::rules::{
    Action, Approved, Approvers, Denied, Input, OnTimeout, Rule, Settled, Settlement,
    TerminalAnswer,
};
use constle_approval::{DenialReason, PendingRequest, RequestError};
use constle_audit::{AuditError, AuditLog, Event, EventError};
use constle_human_gate::{
    HostTty, NO_TERMINAL_MESSAGE, PromptRequest, TerminalOutcome, WebhookClient, WebhookOutcome,
    WebhookUrl, ask_terminal,
};
use constle_identity::DidKey;
use constle_manifest::Manifest;
use constle_mcp_gate::{Approval, ApprovalFuture, Approver, Shutoff, ToolCall};
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use serde_json::{Map, Value};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::RunError;
use crate::output::OutputHold;
use crate::quorum::QuorumGate;
use crate::stop::{GateStop, GateStops};

/// How often the webhook is polled for a decision.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The human gates of one run, shared by the MCP gates of all its servers
/// (one terminal, one prompt at a time).
#[derive(Clone)]
pub(crate) struct HumanGate(Arc<Inner>);

pub(crate) struct Inner {
    pub(crate) agent: String,
    /// Who decides: one key (protocol v1), or several and a threshold (v2).
    pub(crate) mode: Mode,
    pub(crate) timeout: Duration,
    pub(crate) on_timeout: OnTimeout,
    pub(crate) terminal: Option<Mutex<HostTty>>,
    /// Held while the terminal asks, so that the agent's output cannot sit
    /// beside the question.
    pub(crate) hold: OutputHold,
    said_no_terminal: AtomicBool,
    pub(crate) log: Arc<AuditLog>,
    /// Thrown on an abort, before the refusal is answered.
    shutoff: Shutoff,
    stops: GateStops,
}

/// Who decides a gated call.
pub(crate) enum Mode {
    /// `approver_pubkey`, and the first usable webhook (protocol v1, byte
    /// for byte as the seed has it).
    Single {
        approver: DidKey,
        webhook: Option<(WebhookClient, WebhookUrl)>,
    },
    /// `approvers` and `threshold`: every usable webhook asked at once
    /// (protocol v2).
    Quorum(QuorumGate),
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
    #[error("the decision could not be recorded: {0}")]
    Event(#[from] EventError),
    #[error("the approver set cannot be used: {0}")]
    ApproverSet(String),
}

impl GateFailure {
    /// What failed, as the agent may read it: the inner errors name host
    /// paths (the approver set, `$CONSTLE_HOME`, the audit log), so only a
    /// request that cannot be built, which is about the call's own
    /// arguments, says more than what failed.
    fn for_agent(&self) -> String {
        match self {
            GateFailure::Request(_) => self.to_string(),
            GateFailure::Audit(_) | GateFailure::Event(_) => {
                "the decision could not be recorded".into()
            }
            GateFailure::ApproverSet(_) => "the approver set cannot be used".into(),
        }
    }
}

impl HumanGate {
    /// The gates the Agentfile declares, or `None` when no call is gated.
    /// The webhook is the first `notify` entry whose variable holds a usable
    /// URL; without one, only the terminal (and `on_timeout`) decide. An
    /// abort throws `shutoff`, then says so on `stops`.
    pub(crate) fn new(
        manifest: &Manifest,
        home: &Path,
        log: &Arc<AuditLog>,
        terminal: Option<(HostTty, OutputHold)>,
        shutoff: &Shutoff,
        stops: &GateStops,
    ) -> Result<Option<HumanGate>, RunError> {
        let gates = &manifest.human_gates;
        if !gates.is_active() {
            return Ok(None);
        }
        let mut webhooks = gates
            .notify
            .iter()
            .filter_map(|notify| WebhookUrl::from_env(notify.url_secret_ref.as_str()).ok())
            .filter_map(|url| Some((WebhookClient::new().ok()?, url)));
        let mode = match (&gates.approver_pubkey, &gates.quorum) {
            (Some(approver), _) => Mode::Single {
                approver: approver.clone(),
                webhook: webhooks.next(),
            },
            (None, Some(quorum)) => {
                Mode::Quorum(QuorumGate::new(manifest, quorum, home, webhooks.collect())?)
            }
            (None, None) => return Ok(None),
        };
        let (terminal, hold) = terminal.unzip();
        let inner = Inner {
            agent: manifest.name.to_string(),
            mode,
            timeout: gates.approval_timeout(),
            on_timeout: match gates.on_timeout {
                constle_manifest::OnTimeout::Abort => OnTimeout::Abort,
                constle_manifest::OnTimeout::Proceed => OnTimeout::Proceed,
            },
            terminal: terminal.map(Mutex::new),
            hold: hold.unwrap_or_default(),
            said_no_terminal: AtomicBool::new(false),
            log: Arc::clone(log),
            shutoff: shutoff.clone(),
            stops: stops.clone(),
        };
        Ok(Some(HumanGate(Arc::new(inner))))
    }
}

impl Approver for HumanGate {
    fn decide<'a>(&'a self, call: &'a ToolCall) -> ApprovalFuture<'a> {
        Box::pin(async move {
            self.0
                .decide(call)
                .await
                .unwrap_or_else(|failure| Approval::Failed {
                    message: format!(
                        "tool {:?} of MCP server {:?} needs a human decision and {}, \
                         so the Constle gate did not forward the call",
                        call.tool,
                        call.server,
                        failure.for_agent()
                    ),
                    detail: failure.to_string(),
                })
        })
    }
}

/// What a channel said, as the approval rules take it.
pub(crate) type Heard<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Input>> + Send + 'a>>;

/// Where a call's wait ended, and what the outcome entry adds for its
/// protocol version.
pub(crate) struct Concluded {
    pub(crate) subject: Map<String, Value>,
    pub(crate) settled: Settled,
    /// `None` for version 1; the threshold for version 2.
    pub(crate) threshold: Option<usize>,
}

impl Inner {
    async fn decide(&self, call: &ToolCall) -> Result<Approval, GateFailure> {
        let arguments = call.arguments.clone().map_or(Value::Null, Value::Object);
        let expires_at = jiff::Timestamp::now()
            + jiff::SignedDuration::try_from(self.timeout).unwrap_or(jiff::SignedDuration::MAX);
        let deadline = Instant::now() + self.timeout;
        let concluded = match &self.mode {
            Mode::Single { approver, webhook } => {
                let pending = PendingRequest::new(
                    &self.agent,
                    &call.server,
                    &call.tool,
                    arguments,
                    expires_at,
                )?;
                let subject = subject_fields(
                    pending.request_id().as_str(),
                    call,
                    &pending.subject_digest().to_string(),
                );
                let channels = serde_json::json!({
                    "terminal": self.terminal.is_some(),
                    "webhook": webhook.is_some(),
                });
                let triggered = event("gate_triggered", &subject)?
                    .with("expires_at", constle_audit::format_timestamp(expires_at))?
                    .with("channels", channels)?;
                self.record(triggered).await?;
                let settled = self
                    .race(pending, approver, webhook.as_ref(), deadline)
                    .await;
                Concluded {
                    subject,
                    settled,
                    threshold: None,
                }
            }
            Mode::Quorum(quorum) => {
                quorum
                    .decide(self, call, arguments, expires_at, deadline)
                    .await?
            }
        };
        // On disk before the gate acts on it.
        self.record(self.concluded(&concluded)?).await?;
        Ok(self.act(call, concluded.settled.action()))
    }

    /// The rules a call of this run is settled by.
    pub(crate) fn rule(&self, approvers: Approvers) -> Rule {
        Rule {
            approvers,
            on_timeout: self.on_timeout,
        }
    }

    /// What the gate answers once the decision is on disk.
    fn act(&self, call: &ToolCall, action: Action) -> Approval {
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
        self.log.submit(event).written().await.map(|_| ())
    }

    /// Both channels at once, until the rules settle the call (the first
    /// decision does); the other channel is dropped mid-wait, which decides
    /// nothing.
    async fn race(
        &self,
        pending: PendingRequest,
        approver: &DidKey,
        webhook: Option<&(WebhookClient, WebhookUrl)>,
        deadline: Instant,
    ) -> Settled {
        let prompt = PromptRequest::new(&pending, self.timeout, self.on_timeout);
        let mut settlement = Settlement::new(self.rule(Approvers::One));
        let terminal: Heard<'_> =
            Box::pin(async { vec![Input::Terminal(self.ask_terminal(&prompt, deadline).await)] });
        let webhook: Heard<'_> = Box::pin(ask_webhook(webhook, pending, approver, deadline));
        let mut channels = FuturesUnordered::from_iter([terminal, webhook]);
        let settled = loop {
            let heard = channels
                .next()
                .await
                .unwrap_or_else(|| vec![Input::Deadline]);
            // Version 1 records no votes, only the outcome.
            let settled = heard
                .into_iter()
                .find_map(|input| settlement.step(input).settled);
            if let Some(settled) = settled {
                break settled;
            }
        };
        // The terminal is free again before it is told.
        drop(channels);
        self.tell_terminal(&settled).await;
        settled
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
    async fn tell_terminal(&self, settled: &Settled) {
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
    fn concluded(&self, concluded: &Concluded) -> Result<Event, EventError> {
        let Concluded {
            subject,
            settled,
            threshold,
        } = concluded;
        let first = match threshold {
            None => event(outcome_name(settled), subject)?,
            Some(_) => event(outcome_name(settled), subject)?.with("version", 2)?,
        };
        let tally = |entry: Event| match threshold {
            None => Ok(entry),
            Some(threshold) => entry.with("threshold", *threshold),
        };
        match settled {
            Settled::Approved(Approved::Terminal) => first.with("decided_by", "terminal"),
            Settled::Approved(Approved::Webhook(approval)) => event(
                outcome_name(settled),
                &merged(subject, approval.record().audit_fields()),
            ),
            Settled::Approved(Approved::Quorum(quorum)) => {
                let approvers: Vec<&str> = quorum
                    .votes()
                    .iter()
                    .map(|v| v.approver().as_str())
                    .collect();
                tally(
                    first
                        .with("decided_by", "quorum")?
                        .with("approvers", approvers)?
                        .with("terminal", quorum.terminal())?,
                )
            }
            Settled::Denied(Denied::Terminal) => first
                .with("decided_by", "terminal")?
                .with("reason", DenialReason::Denied.audit_reason()),
            Settled::Denied(Denied::Webhook(denial)) => {
                // Only a decision whose every check passed carries the
                // signed fields; any other is recorded by its reason alone.
                let fields = match denial.record() {
                    Some(record) => merged(subject, record.audit_fields()),
                    None => merged(subject, channel_webhook()),
                };
                event(outcome_name(settled), &fields)?
                    .with("reason", denial.reason().audit_reason())
            }
            Settled::Denied(Denied::Vote(vote)) => first
                .with("decided_by", "webhook")?
                .with("approver", vote.approver().as_str())?
                .with("reason", DenialReason::Denied.audit_reason()),
            Settled::TimedOut(timeout) => {
                let entry = first
                    .with("on_timeout", timeout.on_timeout.word())?
                    .with("timeout_seconds", self.timeout.as_secs() as i64)?;
                match (threshold, timeout.no_decision.first()) {
                    (None, None) => Ok(entry),
                    (None, Some(webhook)) => entry.with("webhook", webhook.as_str()),
                    (Some(_), _) => tally(
                        entry
                            .with("approvals", timeout.approvals)?
                            .with("webhooks", timeout.no_decision.as_slice())?,
                    ),
                }
            }
        }
    }
}

/// The audit event that records `settled`.
fn outcome_name(settled: &Settled) -> &'static str {
    match settled {
        Settled::Approved(_) => "gate_approved",
        Settled::Denied(_) => "gate_denied",
        Settled::TimedOut(_) => "gate_timeout",
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

/// Resolves at the latest at the deadline: without a decision, that the
/// deadline passed (the client says so only then).
async fn ask_webhook(
    webhook: Option<&(WebhookClient, WebhookUrl)>,
    pending: PendingRequest,
    approver: &DidKey,
    deadline: Instant,
) -> Vec<Input> {
    let Some((client, url)) = webhook else {
        tokio::time::sleep_until(deadline).await;
        return vec![Input::Deadline];
    };
    match client
        .ask(url, pending, approver, deadline, POLL_INTERVAL)
        .await
    {
        WebhookOutcome::Decided(verdict) => vec![Input::Decision(verdict)],
        WebhookOutcome::NoDecision(reason) => {
            vec![Input::NoDecision(reason.to_string()), Input::Deadline]
        }
    }
}

/// The members every gate entry of one call shares.
pub(crate) fn subject_fields(
    request_id: &str,
    call: &ToolCall,
    digest: &str,
) -> Map<String, Value> {
    let mut fields = Map::new();
    let mut put = |key: &str, value: &str| fields.insert(key.to_owned(), Value::from(value));
    put("request_id", request_id);
    put("server", &call.server);
    put("tool", &call.tool);
    put("subject_digest", digest);
    fields
}

pub(crate) fn merged(subject: &Map<String, Value>, more: Map<String, Value>) -> Map<String, Value> {
    let mut fields = subject.clone();
    fields.extend(more);
    fields
}

pub(crate) fn channel_webhook() -> Map<String, Value> {
    Map::from_iter([("channel".to_owned(), Value::from("webhook"))])
}

pub(crate) fn event(name: &str, fields: &Map<String, Value>) -> Result<Event, EventError> {
    fields
        .iter()
        .try_fold(Event::new(name)?, |event, (key, value)| {
            event.with(key, value.clone())
        })
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
            GateFailure::Event(_) => 2,
            GateFailure::ApproverSet(_) => 3,
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
            GateFailure::Event(EventError::ReservedField(format!("{home}/x"))),
            GateFailure::ApproverSet(format!(
                "approver set /srv/approvers: cannot read {home}/approvers/sha256-1: gone"
            )),
        ];
        let mut seen: Vec<usize> = failures.iter().map(variant).collect();
        seen.dedup();
        assert_eq!(seen, [0, 1, 2, 3], "every variant has an example");
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
