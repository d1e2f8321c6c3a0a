//! The agent's inbox: a bounded queue of accepted messages.

use std::sync::Arc;

use constle_identity::DidKey;
use jiff::Timestamp;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::envelope::{MsgId, VerifiedEnvelope, format_time};

/// The default number of unread messages an inbox holds.
pub const DEFAULT_INBOX_CAPACITY: usize = 1024;

/// A message the listener accepted, as the agent reads it (`GET
/// /inbox/next`): `{"msg_id", "from", "to", "issued_at", "received_at",
/// "body"}`.
#[derive(Debug, Clone)]
pub struct InboxMessage {
    msg_id: MsgId,
    from: DidKey,
    to: DidKey,
    issued_at: Timestamp,
    received_at: Timestamp,
    body: Value,
}

impl InboxMessage {
    pub(crate) fn accepted(envelope: &VerifiedEnvelope, received_at: Timestamp) -> InboxMessage {
        InboxMessage {
            msg_id: envelope.msg_id().clone(),
            from: envelope.from().clone(),
            to: envelope.to().clone(),
            issued_at: envelope.issued_at(),
            received_at,
            body: envelope.body().clone(),
        }
    }

    /// The message id.
    pub fn msg_id(&self) -> &MsgId {
        &self.msg_id
    }

    /// The sender, whose signature was verified.
    pub fn from(&self) -> &DidKey {
        &self.from
    }

    /// The addressee: this agent.
    pub fn to(&self) -> &DidKey {
        &self.to
    }

    /// When the sender issued it.
    pub fn issued_at(&self) -> Timestamp {
        self.issued_at
    }

    /// When the listener accepted it.
    pub fn received_at(&self) -> Timestamp {
        self.received_at
    }

    /// The body.
    pub fn body(&self) -> &Value {
        &self.body
    }

    /// The JSON the agent reads.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "msg_id": self.msg_id.as_str(),
            "from": self.from.as_str(),
            "to": self.to.as_str(),
            "issued_at": format_time(self.issued_at),
            "received_at": self.received_at.to_string(),
            "body": self.body,
        })
    }
}

/// A bounded queue of accepted messages, shared by the listener (which
/// fills it) and the agent's side (which reads it). Cloning shares it.
///
/// The listener reserves a place before it records a message's id, so a
/// full inbox refuses with a retryable 503 and no message is ever recorded
/// as seen and then dropped.
#[derive(Debug, Clone)]
pub struct Inbox {
    tx: mpsc::Sender<InboxMessage>,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<InboxMessage>>>,
    capacity: usize,
}

impl Default for Inbox {
    fn default() -> Inbox {
        Inbox::new(DEFAULT_INBOX_CAPACITY)
    }
}

impl Inbox {
    /// An empty inbox holding at most `capacity` (at least 1) unread messages.
    pub fn new(capacity: usize) -> Inbox {
        let capacity = capacity.max(1);
        let (tx, rx) = mpsc::channel(capacity);
        Inbox {
            tx,
            rx: Arc::new(tokio::sync::Mutex::new(rx)),
            capacity,
        }
    }

    /// The next message, if one is waiting (and no [`Inbox::wait`] is
    /// under way).
    pub fn pop(&self) -> Option<InboxMessage> {
        self.rx.try_lock().ok()?.try_recv().ok()
    }

    /// The next message, waiting for one. Cancel-safe: dropping the future
    /// loses no message.
    pub async fn wait(&self) -> InboxMessage {
        let mut rx = self.rx.lock().await;
        match rx.recv().await {
            Some(message) => message,
            // Unreachable: `self` holds a sender. Wait forever rather than panic.
            None => std::future::pending().await,
        }
    }

    /// How many messages are waiting.
    pub fn len(&self) -> usize {
        self.capacity - self.tx.capacity()
    }

    /// Whether no message is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A reserved place, or `None` if the inbox is full.
    pub(crate) fn reserve(&self) -> Option<mpsc::OwnedPermit<InboxMessage>> {
        self.tx.clone().try_reserve_owned().ok()
    }
}
