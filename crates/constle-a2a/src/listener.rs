//! The inbound side: `POST /a2a/v1/messages`.

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use constle_identity::DidKey;
use jiff::Timestamp;

use crate::body::{BodyError, read_limited};
use crate::envelope::{Envelope, MAX_ENVELOPE_BYTES, MsgId};
use crate::inbox::{Inbox, InboxMessage};
use crate::replay::ReplayStore;
use crate::seen::Seen;
use crate::{RETRY_AFTER, Refusal};

/// The listener's path.
pub const MESSAGES_PATH: &str = "/a2a/v1/messages";

/// Receives every [`ListenerEvent`]. Called on the listener's tasks: keep
/// it short (write an audit line, send on a channel).
pub type EventSink = Arc<dyn Fn(ListenerEvent) + Send + Sync>;

/// One acceptance or refusal, for the audit log (`a2a_accepted`,
/// `a2a_refused`).
///
/// `msg_id`, `from` and `issued_at` are as the envelope claims them (absent
/// if it could not be parsed); `from` is proven only when `accepted`, or when
/// the refusal came after the signature check (`a2a_wrong_addressee`,
/// `a2a_too_old`, `a2a_from_the_future`, `a2a_replayed`, `a2a_in_flight`,
/// the other 503s).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ListenerEvent {
    /// Whether the message went into the inbox.
    pub accepted: bool,
    /// `None` when accepted; otherwise why not (its `code()` is the stable reason).
    pub refusal: Option<Refusal>,
    /// The HTTP status answered.
    pub status: u16,
    /// The message id.
    pub msg_id: Option<MsgId>,
    /// The sender.
    pub from: Option<DidKey>,
    /// When the sender says it issued the envelope.
    pub issued_at: Option<Timestamp>,
    /// When the listener received it.
    pub received_at: Timestamp,
    /// The TCP peer, when the server was started with connect info (as
    /// [`Listener::serve`] does).
    pub remote: Option<SocketAddr>,
}

impl ListenerEvent {
    /// `"a2a_accepted"`, or the refusal's reason code.
    pub fn reason(&self) -> &'static str {
        self.refusal.as_ref().map_or("a2a_accepted", Refusal::code)
    }
}

/// What a [`Listener`] needs.
pub struct ListenerConfig {
    me: DidKey,
    peers: HashSet<DidKey>,
    replay: ReplayStore,
    inbox: Inbox,
    max_envelope_bytes: usize,
    on_event: Option<EventSink>,
}

impl ListenerConfig {
    /// Listen as `me`, accepting envelopes from `peers` only, remembering
    /// ids in `replay` and delivering into `inbox`.
    pub fn new(
        me: DidKey,
        peers: impl IntoIterator<Item = DidKey>,
        replay: ReplayStore,
        inbox: Inbox,
    ) -> ListenerConfig {
        ListenerConfig {
            me,
            peers: peers.into_iter().collect(),
            replay,
            inbox,
            max_envelope_bytes: MAX_ENVELOPE_BYTES,
            on_event: None,
        }
    }

    /// Report every acceptance and refusal to `sink`.
    pub fn on_event(mut self, sink: impl Fn(ListenerEvent) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(sink));
        self
    }

    /// Refuse envelopes larger than `max` bytes with 413 (default
    /// [`MAX_ENVELOPE_BYTES`]).
    pub fn max_envelope_bytes(mut self, max: usize) -> Self {
        self.max_envelope_bytes = max;
        self
    }
}

/// The A2A listener. Cloning shares it.
#[derive(Clone)]
pub struct Listener {
    shared: Arc<ListenerConfig>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("me", &self.shared.me)
            .field("peers", &self.shared.peers.len())
            .field("replay", &self.shared.replay)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// A listener with this configuration.
    pub fn new(config: ListenerConfig) -> Listener {
        Listener {
            shared: Arc::new(config),
        }
    }

    /// The inbox it delivers into.
    pub fn inbox(&self) -> &Inbox {
        &self.shared.inbox
    }

    /// A router with [`MESSAGES_PATH`], to serve alone or merge into
    /// another. Serve it with `into_make_service_with_connect_info::<SocketAddr>()`
    /// for [`ListenerEvent::remote`].
    pub fn router(&self) -> Router {
        Router::new()
            .route(MESSAGES_PATH, post(handle))
            .with_state(self.clone())
    }

    /// Serves [`Listener::router`] on `tcp` until the process ends or the
    /// listener fails.
    ///
    /// # Errors
    ///
    /// An I/O error from the server.
    pub async fn serve(self, tcp: tokio::net::TcpListener) -> std::io::Result<()> {
        self.serve_with_shutdown(tcp, std::future::pending()).await
    }

    /// Like [`Listener::serve`], stopping gracefully when `signal` completes.
    ///
    /// # Errors
    ///
    /// An I/O error from the server.
    pub async fn serve_with_shutdown(
        self,
        tcp: tokio::net::TcpListener,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let app = self
            .router()
            .into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(tcp, app).with_graceful_shutdown(signal).await
    }

    /// Checks one envelope as the HTTP handler does, delivers it into the
    /// inbox if accepted, and reports the event. For callers with their own
    /// transport; the bytes are the request body.
    ///
    /// # Errors
    ///
    /// The [`Refusal`], already reported.
    pub async fn receive(
        &self,
        bytes: &[u8],
        remote: Option<SocketAddr>,
    ) -> Result<InboxMessage, Refusal> {
        let received_at = Timestamp::now();
        let mut event = ListenerEvent {
            accepted: false,
            refusal: None,
            status: 202,
            msg_id: None,
            from: None,
            issued_at: None,
            received_at,
            remote,
        };
        let result = self.check(bytes, received_at, &mut event).await;
        if let Err(refusal) = &result {
            event.status = refusal.status();
            event.refusal = Some(refusal.clone());
        } else {
            event.accepted = true;
        }
        self.report(event);
        result
    }

    async fn check(
        &self,
        bytes: &[u8],
        now: Timestamp,
        event: &mut ListenerEvent,
    ) -> Result<InboxMessage, Refusal> {
        let config = &self.shared;
        let envelope = Envelope::from_slice(bytes, config.max_envelope_bytes)?;
        event.msg_id = Some(envelope.msg_id().clone());
        event.from = Some(envelope.from().clone());
        event.issued_at = Some(envelope.issued_at());
        let verified = envelope.verify(&config.me, |did| config.peers.contains(did), now)?;
        // A place in the inbox first: an id is never recorded for a message
        // that then has nowhere to go.
        let place = config.inbox.reserve().ok_or(Refusal::InboxFull)?;
        match config.replay.remember(&verified, now).await {
            Ok(Seen::New) => {
                let message = InboxMessage::accepted(&verified, now);
                place.send(message.clone());
                Ok(message)
            }
            Ok(Seen::Before) => Err(Refusal::Replayed),
            Ok(Seen::InFlight) => Err(Refusal::InFlight),
            Err(err) => Err(Refusal::ReplayStoreUnavailable(err.to_string())),
        }
    }

    fn report(&self, event: ListenerEvent) {
        if let Some(sink) = &self.shared.on_event {
            sink(event);
        }
    }

    fn refuse_early(&self, refusal: Refusal, remote: Option<SocketAddr>) -> Response {
        self.report(ListenerEvent {
            accepted: false,
            status: refusal.status(),
            refusal: Some(refusal.clone()),
            msg_id: None,
            from: None,
            issued_at: None,
            received_at: Timestamp::now(),
            remote,
        });
        refusal_response(&refusal)
    }
}

/// The JSON answer to a refusal: `{"error": code, "message": text}`, with
/// `Retry-After` on 503.
pub(crate) fn refusal_response(refusal: &Refusal) -> Response {
    let status =
        StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    // The 503 detail names a path or a Redis host: keep it for the audit
    // event, not for the sender.
    let message = match refusal {
        Refusal::ReplayStoreUnavailable(_) => {
            "the replay store is unavailable; retry later".to_owned()
        }
        other => other.to_string(),
    };
    let body = serde_json::json!({"error": refusal.code(), "message": message});
    let mut response = (status, axum::Json(body)).into_response();
    if refusal.is_retryable() {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(RETRY_AFTER.as_secs()),
        );
    }
    response
}

async fn handle(State(listener): State<Listener>, request: axum::extract::Request) -> Response {
    let remote = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr);
    let (parts, body) = request.into_parts();
    let max = listener.shared.max_envelope_bytes;
    let bytes = match read_limited(&parts.headers, body, max).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge { len }) => {
            return listener.refuse_early(Refusal::TooLarge { len, max }, remote);
        }
        Err(BodyError::Unreadable) => {
            let refusal = Refusal::Malformed("the request body could not be read".to_owned());
            return listener.refuse_early(refusal, remote);
        }
    };
    // Run the check on its own task, so that a sender hanging up cannot stop
    // it between recording the id and delivering the message.
    let worker = listener.clone();
    let task = tokio::spawn(async move { worker.receive(&bytes, remote).await });
    match task.await {
        Ok(Ok(message)) => (
            StatusCode::ACCEPTED,
            axum::Json(serde_json::json!({"accepted": true, "msg_id": message.msg_id().as_str()})),
        )
            .into_response(),
        Ok(Err(refusal)) => refusal_response(&refusal),
        Err(_) => refusal_response(&Refusal::ReplayStoreUnavailable(
            "the listener's worker task stopped".to_owned(),
        )),
    }
}
