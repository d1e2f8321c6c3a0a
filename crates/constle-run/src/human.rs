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

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use constle_approval::PendingRequest;
use constle_approval::rules::{Approvers, Input, OnTimeout, Settled, Settlement};
use constle_audit::AuditLog;
use constle_audit::catalogue::GateTriggered;
use constle_human_gate::{HostTty, PromptRequest, WebhookClient, WebhookOutcome, WebhookUrl};
use constle_identity::DidKey;
use constle_manifest::Manifest;
use constle_mcp_gate::{Approval, ApprovalFuture, Approver, Shutoff, ToolCall};
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::asking::{Concluded, GateFailure, Heard, Inner, POLL_INTERVAL, subject_fields};
use crate::error::RunError;
use crate::output::OutputHold;
use crate::quorum::QuorumGate;
use crate::stop::GateStops;

/// The human gates of one run, shared by the MCP gates of all its servers
/// (one terminal, one prompt at a time).
#[derive(Clone)]
pub(crate) struct HumanGate(Arc<Gate>);

/// One run's human gates: the channels they ask through, and who decides.
pub(crate) struct Gate {
    inner: Inner,
    /// Who decides: one key (protocol v1), or several and a threshold (v2).
    mode: Mode,
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
        Ok(Some(HumanGate(Arc::new(Gate { inner, mode }))))
    }
}

impl Gate {
    async fn decide(&self, call: &ToolCall) -> Result<Approval, GateFailure> {
        let arguments = call.arguments.clone().map_or(Value::Null, Value::Object);
        let expires_at = jiff::Timestamp::now()
            + jiff::SignedDuration::try_from(self.inner.timeout)
                .unwrap_or(jiff::SignedDuration::MAX);
        let deadline = Instant::now() + self.inner.timeout;
        let concluded = match &self.mode {
            Mode::Single { approver, webhook } => {
                let pending = PendingRequest::new(
                    &self.inner.agent,
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
                    "terminal": self.inner.terminal.is_some(),
                    "webhook": webhook.is_some(),
                });
                let triggered = GateTriggered {
                    subject: subject.clone(),
                    expires_at: constle_audit::format_timestamp(expires_at),
                    channels,
                };
                self.inner.record(triggered.into()).await?;
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
                    .decide(&self.inner, call, arguments, expires_at, deadline)
                    .await?
            }
        };
        // On disk before the gate acts on it.
        self.inner.record(self.inner.concluded(&concluded)).await?;
        Ok(self.inner.act(call, concluded.settled.action()))
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
        let prompt = PromptRequest::new(&pending, self.inner.timeout, self.inner.on_timeout);
        let mut settlement = Settlement::new(self.inner.rule(Approvers::One));
        let terminal: Heard<'_> = Box::pin(async {
            vec![Input::Terminal(
                self.inner.ask_terminal(&prompt, deadline).await,
            )]
        });
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
        self.inner.tell_terminal(&settled).await;
        settled
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
