//! Agent-to-agent messages for Constle: signed, replay-proof envelopes.
//!
//! Agents run in a sandbox and hold no keys. When an agent sends a message
//! to a peer, the host signs it for the agent with the agent's DID key
//! ([`sign_envelope`]) and delivers it ([`A2aClient::deliver`]) to the
//! peer's listener. A [`Listener`] (axum, `POST /a2a/v1/messages`) accepts
//! an envelope only if
//!
//! 1. it is strict JSON in exactly the specified shape, within the size
//!    limit ([`Envelope::from_slice`]);
//! 2. its sender is a declared peer, its Ed25519 signature verifies
//!    (`verify_strict`) over [`DOMAIN`] and the RFC 8785 form of the
//!    envelope minus `sig`, it is addressed to this agent, and it was issued
//!    within ±5 minutes of the local clock ([`Envelope::verify`]);
//! 3. its `msg_id` was never seen from that sender, which the
//!    [`ReplayStore`] (embedded under `$CONSTLE_HOME/a2a/replay/<did>/`, or
//!    Redis) records durably before the message is accepted. If the store
//!    cannot answer, the listener refuses with a retryable 503.
//!
//! Accepted messages go into an [`Inbox`] the agent reads through
//! [`sandbox_router`] (`GET /inbox/next`, `POST /outbox`); every acceptance
//! and refusal is reported as a [`ListenerEvent`] for the audit log.
//!
//! The wire format and its test vectors: `docs/spec/a2a-envelope.md`.
//!
//! ```
//! use constle_a2a::{Envelope, MAX_ENVELOPE_BYTES, sign_envelope};
//! use constle_identity::SigningIdentity;
//!
//! let alice = SigningIdentity::generate();
//! let bob = SigningIdentity::generate();
//! let now = jiff::Timestamp::now();
//! let sent = sign_envelope(&alice, bob.did(), serde_json::json!({"text": "hi"}), now)?;
//!
//! // On Bob's side, from the wire:
//! let received = Envelope::from_slice(&sent.to_bytes(), MAX_ENVELOPE_BYTES)?;
//! let verified = received.verify(bob.did(), |peer| peer == alice.did(), now)?;
//! assert_eq!(verified.body()["text"], "hi");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod body;
mod client;
mod embedded;
mod envelope;
mod inbox;
mod listener;
mod redis_store;
mod replay;
mod sandbox;
mod seen;
#[cfg(test)]
mod vectors;

use std::time::Duration;

pub use body::{DISCARD_FOR, MAX_DISCARDED_BYTES};
pub use client::{A2aClient, DeliverError, Delivery, PeerUrl, PeerUrlError, deliver};
pub use envelope::{
    CLOCK_SKEW, DOMAIN, Envelope, EnvelopeError, MAX_ENVELOPE_BYTES, MAX_SAFE_INTEGER, MsgId,
    VerifiedEnvelope, sign_envelope,
};
pub use inbox::{DEFAULT_INBOX_CAPACITY, Inbox, InboxMessage};
pub use listener::{EventSink, Listener, ListenerConfig, ListenerEvent, MESSAGES_PATH};
pub use replay::ReplayStore;
pub use sandbox::{
    INBOX_NEXT_PATH, MAX_OUTBOX_BYTES, OUTBOX_PATH, Outbox, OutboxEvent, OutboxSink, sandbox_router,
};
pub use seen::{REPLAY_MARGIN, ReplayError, Seen};

/// Why a listener refused an envelope. Each has its own HTTP status and a
/// stable reason code ([`Refusal::code`]), sent as `{"error": code, …}`.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// 400 `a2a_malformed`: not strict JSON, or not an envelope.
    #[error("malformed envelope: {0}")]
    Malformed(String),
    /// 413 `a2a_too_large`.
    #[error("the envelope is {len} bytes or more, more than the limit of {max}")]
    TooLarge {
        /// Its size in bytes (at least this much was read).
        len: usize,
        /// The limit.
        max: usize,
    },
    /// 403 `a2a_unknown_sender`: `from` is not a declared peer.
    #[error("the sender is not a declared peer")]
    UnknownSender,
    /// 401 `a2a_bad_signature`.
    #[error("the signature does not verify under the sender's key")]
    BadSignature,
    /// 403 `a2a_wrong_addressee`: `to` is not this agent.
    #[error("the envelope is addressed to another agent")]
    WrongAddressee,
    /// 400 `a2a_too_old`: issued more than 5 minutes ago by this clock.
    #[error("the envelope was issued more than 5 minutes ago")]
    TooOld,
    /// 400 `a2a_from_the_future`: issued more than 5 minutes ahead of this clock.
    #[error("the envelope was issued more than 5 minutes in the future")]
    FromTheFuture,
    /// 409 `a2a_replayed`: this sender's `msg_id` was accepted before.
    #[error("this message id was already accepted from this sender")]
    Replayed,
    /// 503 `a2a_replay_store_unavailable`, with `Retry-After`: the seen ids
    /// could not be read or written, so nothing is accepted.
    #[error("the replay store is unavailable: {0}")]
    ReplayStoreUnavailable(String),
    /// 503 `a2a_inbox_full`, with `Retry-After`: the agent has not read its
    /// inbox. Nothing was recorded; the same envelope may be sent again.
    #[error("the agent's inbox is full")]
    InboxFull,
    /// 503 `a2a_in_flight`, with `Retry-After`: another attempt at this
    /// `msg_id` holds it and has not settled (Redis store). Nothing was
    /// recorded for this one; resent later, it is accepted, or refused as a
    /// replay if the other attempt delivered it.
    #[error("another delivery of this message id is still being settled")]
    InFlight,
}

/// How long a sender should wait before retrying a 503.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

impl Refusal {
    /// The stable reason code.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "a2a_malformed",
            Refusal::TooLarge { .. } => "a2a_too_large",
            Refusal::UnknownSender => "a2a_unknown_sender",
            Refusal::BadSignature => "a2a_bad_signature",
            Refusal::WrongAddressee => "a2a_wrong_addressee",
            Refusal::TooOld => "a2a_too_old",
            Refusal::FromTheFuture => "a2a_from_the_future",
            Refusal::Replayed => "a2a_replayed",
            Refusal::ReplayStoreUnavailable(_) => "a2a_replay_store_unavailable",
            Refusal::InboxFull => "a2a_inbox_full",
            Refusal::InFlight => "a2a_in_flight",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Malformed(_) | Refusal::TooOld | Refusal::FromTheFuture => 400,
            Refusal::BadSignature => 401,
            Refusal::UnknownSender | Refusal::WrongAddressee => 403,
            Refusal::Replayed => 409,
            Refusal::TooLarge { .. } => 413,
            Refusal::ReplayStoreUnavailable(_) | Refusal::InboxFull | Refusal::InFlight => 503,
        }
    }

    /// Whether sending the same envelope again may succeed (the 503s).
    pub fn is_retryable(&self) -> bool {
        self.status() == 503
    }
}
