//! Human gates for Constle: the signed webhook channel and the terminal
//! prompt.
//!
//! A gated MCP `tools/call` waits at the gate until a person decides. This
//! crate holds the parts of that wait that can be checked byte for byte, as
//! specified in `docs/spec/human-gates-webhook.md`:
//!
//! - [`subject_digest`]: what a decision pins — SHA-256 over the RFC 8785
//!   canonical JSON of `{"server","tool","arguments"}`, shown as
//!   `sha256:<64 hex>` ([`SubjectDigest`]).
//! - [`PendingRequest`]: one gated call with its freshly minted, unguessable
//!   [`RequestId`] and the POST body sent to the decision endpoint.
//! - [`verify_decision`]: checks a decision body in the specification's
//!   order (signature, request id, digest, the word `approved`). It consumes
//!   the request, so a decision is used once, and only it can make the
//!   [`VerifiedApproval`] that [`Verdict::Approved`] carries. Every failed
//!   check is a [`Denial`] with its audit reason; a body that is not a
//!   decision at all ([`MalformedDecision`]) hands the request back.
//! - [`WebhookClient::ask`] (and [`ask`]): POST, then poll
//!   `GET <url>/<request_id>/decision` until a decision or the deadline.
//!   Unreachable endpoints, unexpected statuses and malformed or oversized
//!   bodies are [`WebhookOutcome::NoDecision`]; `on_timeout` decides then.
//! - [`render_prompt`] and [`ask_terminal`]: the terminal channel. The prompt
//!   escapes everything the agent controls; an answer there is an unsigned
//!   local action ([`TerminalOutcome::Approved`] is recorded with
//!   `decided_by: terminal`), and arguments too large to show can be denied
//!   there but never approved. [`open_host_tty`] opens the host's
//!   `/dev/tty`, never the agent's standard input.
//!
//! ```
//! use constle_human_gate::{PendingRequest, Verdict, signed_message, verify_decision};
//! use constle_identity::SigningIdentity;
//! use base64::Engine as _;
//!
//! let approver = SigningIdentity::generate();
//! let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(300);
//! let args = serde_json::json!({"invoice_id": "INV-0042"});
//! let request = PendingRequest::new("invoice-processor", "accounting", "pay_invoice", args, expires)?;
//!
//! // What the decision endpoint sends back once a person approves.
//! let (id, digest) = (request.request_id().to_string(), request.subject_digest().to_string());
//! let signature = approver.sign(signed_message(&id, "approved", &digest).as_bytes());
//! let body = serde_json::json!({
//!     "request_id": id, "decision": "approved", "subject_digest": digest,
//!     "signature": base64::engine::general_purpose::STANDARD.encode(signature.to_bytes()),
//! });
//!
//! let verdict = verify_decision(request, approver.did(), body.to_string().as_bytes());
//! assert!(matches!(verdict, Ok(Verdict::Approved(_))));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`quorum`] is version 2 (`docs/spec/human-gates-webhook-v2.md`): several
//! approvers and a threshold, each decision bound to the whole call, a
//! salted digest. Both documents' test vectors are recomputed by this
//! crate's unit tests.
//!
//! What this crate does not do: match tool names, race the two channels or
//! write the audit log. It prints nothing except the prompt on the terminal
//! it is handed, and it never puts the webhook URL (which often carries a
//! secret) in a message.

#![forbid(unsafe_code)]

mod client;
mod decision;
pub mod quorum;
mod request;
mod subject;
mod terminal;
#[cfg(test)]
mod vectors;
#[cfg(test)]
mod vectors_v2;

pub use client::{
    ClientError, NoDecisionReason, WebhookClient, WebhookOutcome, WebhookUrl, WebhookUrlError, ask,
};
pub use decision::{
    DecisionRecord, Denial, DenialReason, MAX_DECISION_BYTES, MalformedDecision, Undecided,
    Verdict, VerifiedApproval, signed_message, verify_decision,
};
pub use request::{PendingRequest, REQUEST_ID_PREFIX, RequestError, RequestId};
pub use subject::{SubjectDigest, SubjectError, canonical_subject, subject_digest};
#[cfg(unix)]
pub use terminal::{HostTty, open_host_tty};
pub use terminal::{
    MAX_ATTEMPTS, MAX_SHOWN_BYTES, MAX_SHOWN_LINES, NO_TERMINAL_MESSAGE, PromptRequest,
    TerminalOutcome, TimeoutAction, ask_terminal, escape, render_prompt,
};
