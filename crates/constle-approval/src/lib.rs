//! Approval rules for Constle's human gates, with no I/O: what a decision
//! pins, how a decision or a vote is checked, and how a gated call is
//! settled.
//!
//! A gated MCP `tools/call` waits at the gate until a person decides. This
//! crate holds every part of that wait that can be checked byte for byte,
//! as specified in `docs/spec/human-gates-webhook.md` (version 1, one
//! approver) and `docs/spec/human-gates-webhook-v2.md` (version 2, several
//! approvers and a threshold), and the rules that turn what arrives into an
//! outcome. The channels themselves (the webhook client, the terminal
//! prompt) are `constle-human-gate`'s; the audit log is the caller's.
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
//! - [`quorum`]: version 2. Each decision is bound to the whole call, the
//!   digest is salted, and [`quorum::verify_vote`] checks each vote;
//!   [`quorum::verify_recorded_vote`] checks one again from the audit log.
//! - [`rules`]: the step function that settles a call. Feed it what the
//!   channels said ([`rules::Input`]); it says what to record and, once,
//!   how the call is settled ([`rules::Settled`]) and what the gate does
//!   ([`rules::Action`]), `on_timeout` included.
//!
//! Both documents' test vectors are recomputed by this crate's unit tests.
//!
//! ```
//! use constle_approval::{PendingRequest, Verdict, signed_message, verify_decision};
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
//! What this crate does not do: send or receive anything, read a clock
//! (the caller passes `now` and says when the deadline passed) or write
//! the audit log. The only thing it takes from the operating system is
//! randomness, for request ids and salts.

#![forbid(unsafe_code)]

mod decision;
pub mod quorum;
mod request;
pub mod rules;
mod subject;
#[cfg(test)]
mod vectors;
#[cfg(test)]
mod vectors_v2;

pub use decision::{
    DecisionRecord, Denial, DenialReason, MAX_DECISION_BYTES, MalformedDecision, Undecided,
    Verdict, VerifiedApproval, signed_message, verify_decision,
};
pub use request::{PendingRequest, REQUEST_ID_PREFIX, RequestError, RequestId};
pub use subject::{SubjectDigest, SubjectError, canonical_subject, subject_digest};
