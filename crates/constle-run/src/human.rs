//! Human gates in a run: a gated call is put to the host terminal and the
//! signed webhook at once, the first decision wins, and the decision is on
//! disk in the audit log before the MCP gate forwards or refuses the call.
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

use constle_audit::{AuditError, AuditLog, Event, EventError};
use constle_human_gate::{
    DenialReason, HostTty, NO_TERMINAL_MESSAGE, NoDecisionReason, PendingRequest, PromptRequest,
    RequestError, TerminalOutcome, TimeoutAction, Verdict, WebhookClient, WebhookOutcome,
    WebhookUrl, ask_terminal,
};
use constle_identity::DidKey;
use constle_manifest::{Manifest, OnTimeout};
use constle_mcp_gate::{Approval, ApprovalFuture, Approver, Shutoff, ToolCall};
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
            on_timeout: gates.on_timeout,
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

/// What the MCP gate does once the decision is on disk.
pub(crate) enum Action {
    Forward,
    /// Refuse, telling the agent why.
    Refuse(&'static str),
    /// Refuse and end the run.
    Abort,
}

/// What ended the wait.
pub(crate) enum Outcome {
    Terminal(TerminalOutcome),
    Webhook(Verdict),
    /// The deadline, with what the webhook last saw if there is one.
    Timeout(Option<NoDecisionReason>),
}

impl Inner {
    async fn decide(&self, call: &ToolCall) -> Result<Approval, GateFailure> {
        let arguments = call.arguments.clone().map_or(Value::Null, Value::Object);
        let expires_at = jiff::Timestamp::now()
            + jiff::SignedDuration::try_from(self.timeout).unwrap_or(jiff::SignedDuration::MAX);
        let deadline = Instant::now() + self.timeout;
        let (decided, action) = match &self.mode {
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
                let outcome = self
                    .race(pending, approver, webhook.as_ref(), deadline)
                    .await;
                self.conclude(&subject, outcome)?
            }
            Mode::Quorum(quorum) => {
                quorum
                    .decide(self, call, arguments, expires_at, deadline)
                    .await?
            }
        };
        // On disk before the gate acts on it.
        self.record(decided).await?;
        Ok(self.act(call, action))
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

    /// Both channels at once; the first decision wins and the other channel
    /// is dropped mid-wait, which decides nothing.
    async fn race(
        &self,
        pending: PendingRequest,
        approver: &DidKey,
        webhook: Option<&(WebhookClient, WebhookUrl)>,
        deadline: Instant,
    ) -> Outcome {
        let prompt = PromptRequest::new(&pending, self.timeout, timeout_action(self.on_timeout));
        let outcome = tokio::select! {
            outcome = self.ask_terminal(&prompt, deadline) => outcome,
            outcome = ask_webhook(webhook, pending, approver, deadline) => outcome,
        };
        self.tell_terminal(&outcome).await;
        outcome
    }

    /// Resolves only on a decision; a terminal that cannot decide leaves
    /// the wait to the webhook and the deadline.
    pub(crate) async fn ask_terminal(&self, prompt: &PromptRequest, deadline: Instant) -> Outcome {
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
            decided => Outcome::Terminal(decided),
        }
    }

    /// Closes a prompt another channel (or the clock) answered, so the
    /// terminal never shows a question that no longer counts.
    async fn tell_terminal(&self, outcome: &Outcome) {
        let note = match outcome {
            Outcome::Terminal(_) => return,
            Outcome::Webhook(Verdict::Approved(_)) => "approved through the webhook",
            Outcome::Webhook(_) => "denied through the webhook",
            Outcome::Timeout(_) => "no decision before the deadline",
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

    /// The audit entry for `outcome`, and what the gate does.
    fn conclude(
        &self,
        subject: &Map<String, Value>,
        outcome: Outcome,
    ) -> Result<(Event, Action), EventError> {
        Ok(match outcome {
            Outcome::Terminal(TerminalOutcome::Approved) => (
                event("gate_approved", subject)?.with("decided_by", "terminal")?,
                Action::Forward,
            ),
            Outcome::Terminal(_) => (
                event("gate_denied", subject)?
                    .with("decided_by", "terminal")?
                    .with("reason", DenialReason::Denied.audit_reason())?,
                Action::Refuse("denied at the terminal"),
            ),
            Outcome::Webhook(Verdict::Approved(approval)) => (
                event(
                    "gate_approved",
                    &merged(subject, approval.record().audit_fields()),
                )?,
                Action::Forward,
            ),
            Outcome::Webhook(Verdict::Denied(denial)) => {
                // Only a decision whose every check passed carries the
                // signed fields; any other is recorded by its reason alone.
                let fields = match denial.record() {
                    Some(record) => merged(subject, record.audit_fields()),
                    None => merged(subject, channel_webhook()),
                };
                (
                    event("gate_denied", &fields)?
                        .with("reason", denial.reason().audit_reason())?,
                    Action::Refuse("denied through the webhook"),
                )
            }
            Outcome::Timeout(webhook) => {
                let mut timeout = event("gate_timeout", subject)?
                    .with("on_timeout", on_timeout_word(self.on_timeout))?
                    .with("timeout_seconds", self.timeout.as_secs() as i64)?;
                if let Some(reason) = webhook {
                    timeout = timeout.with("webhook", reason.to_string())?;
                }
                let action = match self.on_timeout {
                    OnTimeout::Proceed => Action::Forward,
                    OnTimeout::Abort => Action::Abort,
                };
                (timeout, action)
            }
        })
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

/// Resolves at the latest at the deadline.
async fn ask_webhook(
    webhook: Option<&(WebhookClient, WebhookUrl)>,
    pending: PendingRequest,
    approver: &DidKey,
    deadline: Instant,
) -> Outcome {
    let Some((client, url)) = webhook else {
        tokio::time::sleep_until(deadline).await;
        return Outcome::Timeout(None);
    };
    match client
        .ask(url, pending, approver, deadline, POLL_INTERVAL)
        .await
    {
        WebhookOutcome::Decided(verdict) => Outcome::Webhook(verdict),
        WebhookOutcome::NoDecision(reason) => Outcome::Timeout(Some(reason)),
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

pub(crate) fn timeout_action(on_timeout: OnTimeout) -> TimeoutAction {
    match on_timeout {
        OnTimeout::Abort => TimeoutAction::Abort,
        OnTimeout::Proceed => TimeoutAction::Proceed,
    }
}

pub(crate) fn on_timeout_word(on_timeout: OnTimeout) -> &'static str {
    match on_timeout {
        OnTimeout::Abort => "abort",
        OnTimeout::Proceed => "proceed",
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
