//! Agent-to-agent messaging in a run. With `a2a.listen`, the host listens
//! for signed envelopes from the declared peers and puts the accepted ones in
//! an inbox; with peers that have a URL, the agent can send. Either way the
//! agent reaches both through one door, `CONSTLE_A2A_URL`
//! (`GET /inbox/next`, `POST /outbox`), and the host signs for it: the key
//! never enters the sandbox. Every acceptance, refusal and delivery goes
//! into the audit log.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;

use constle_a2a::{
    A2aClient, Inbox, Listener, ListenerConfig, ListenerEvent, Outbox, OutboxEvent, PeerUrl,
    Refusal, ReplayStore, sandbox_router,
};
use constle_audit::catalogue::{A2aAccepted, A2aRefused, A2aSent};
use constle_audit::{AuditLog, Event};
use constle_identity::{DidKey, KeyKind, KeyStore};
use constle_manifest::{A2a, Manifest};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::doors::{self, OpenDoor};
use crate::error::RunError;

/// Where the agent finds its inbox and outbox inside the sandbox: beside
/// the proxy's port, clear of the model gates' (from 4000) and the MCP
/// gates' (from 4100), so a run may have all of them.
const A2A_LISTEN: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3129);

/// The running A2A parts of a run. Dropping them stops serving.
pub(crate) struct A2aLink {
    door: Option<OpenDoor>,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
}

impl A2aLink {
    /// Starts the listener (with `a2a.listen`) and the agent's inbox and
    /// outbox; `None` without an `a2a` section.
    pub(crate) async fn start(
        manifest: &Manifest,
        home: &Path,
        log: &Arc<AuditLog>,
    ) -> Result<Option<A2aLink>, RunError> {
        let (Some(a2a), Some(identity)) = (&manifest.a2a, &manifest.identity) else {
            return Ok(None);
        };
        let failed = |what: String| RunError::A2a(what);
        let signer = KeyStore::open(home)
            .and_then(|store| store.find(KeyKind::Agent, &identity.did))
            .map_err(|err| failed(format!("cannot load the agent key: {err}")))?;
        let inbox = Inbox::default();
        let mut tasks = Vec::new();
        if let Some(listen) = a2a.listen {
            let listener = listener(a2a, &identity.did, home, inbox.clone(), log).await?;
            let tcp = TcpListener::bind(listen)
                .await
                .map_err(|err| failed(format!("a2a.listen: cannot listen on {listen}: {err}")))?;
            tasks.push(tokio::spawn(listener.serve(tcp)));
        }
        let client = A2aClient::new().map_err(|err| failed(err.to_string()))?;
        let log = Arc::clone(log);
        let outbox = Outbox::new(Arc::new(signer), peer_urls(a2a)?, client)
            .on_send(move |sent| submit(&log, sent_event(&sent)));
        let (door, listener) = doors::open("a2a".into(), A2A_LISTEN);
        let router = sandbox_router(inbox, Some(outbox));
        tasks.push(tokio::spawn(
            async move { axum::serve(listener, router).await },
        ));
        Ok(Some(A2aLink {
            door: Some(door),
            tasks,
        }))
    }

    /// The door to put into the sandbox (taken once).
    pub(crate) fn take_door(&mut self) -> Option<OpenDoor> {
        self.door.take()
    }

    /// `CONSTLE_A2A_URL`.
    pub(crate) fn env(&self) -> (String, String) {
        ("CONSTLE_A2A_URL".into(), format!("http://{A2A_LISTEN}"))
    }
}

impl Drop for A2aLink {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The listener for `me`, its seen ids in `a2a.replay` or under `home`.
pub async fn listener(
    a2a: &A2a,
    me: &DidKey,
    home: &Path,
    inbox: Inbox,
    log: &Arc<AuditLog>,
) -> Result<Listener, RunError> {
    let replay = match &a2a.replay {
        Some(url) => ReplayStore::redis(url.as_str(), me).await,
        None => ReplayStore::embedded(home, me).await,
    }
    .map_err(|err| RunError::A2a(format!("the replay store cannot be opened: {err}")))?;
    let peers = a2a.peers.iter().map(|p| p.did.clone());
    let log = Arc::clone(log);
    let config = ListenerConfig::new(me.clone(), peers, replay, inbox)
        .on_event(move |event| submit(&log, listener_event(&event)));
    Ok(Listener::new(config))
}

/// The declared peers the agent can send to: those with a URL.
fn peer_urls(a2a: &A2a) -> Result<Vec<(DidKey, PeerUrl)>, RunError> {
    a2a.peers
        .iter()
        .filter_map(|peer| peer.url.as_ref().map(|url| (peer, url)))
        .map(|(peer, url)| {
            PeerUrl::parse(url.as_str())
                .map(|url| (peer.did.clone(), url))
                .map_err(|err| RunError::A2a(format!("a2a.peers: {}: {err}", peer.did)))
        })
        .collect()
}

/// The audit write happens on the log's writer; the listener does not wait.
fn submit(log: &AuditLog, event: Event) {
    drop(log.submit(event));
}

/// `a2a_accepted` or `a2a_refused`, with what the envelope claims.
pub fn listener_event(event: &ListenerEvent) -> Event {
    let msg_id = event.msg_id.as_ref().map(|m| m.as_str().to_owned());
    let from = event.from.as_ref().map(ToString::to_string);
    let issued_at = event.issued_at.map(constle_audit::format_timestamp);
    let remote = event.remote.map(|remote| remote.to_string()).into();
    if event.accepted {
        let accepted = A2aAccepted {
            status: event.status,
            msg_id,
            from,
            issued_at,
            remote,
        };
        return accepted.into();
    }
    // The sender is told only to retry; the log keeps what the store said
    // (a file that could not be read, shrank or vanished, a Redis timeout).
    let detail = match &event.refusal {
        Some(Refusal::ReplayStoreUnavailable(detail)) => Some(detail.clone()),
        _ => None,
    };
    A2aRefused {
        status: event.status,
        msg_id,
        from,
        issued_at,
        reason: event.reason().to_owned(),
        detail: detail.into(),
        remote,
    }
    .into()
}

fn sent_event(sent: &OutboxEvent) -> Event {
    A2aSent {
        to: sent.to.to_string(),
        msg_id: sent.msg_id.as_str().to_owned(),
        delivered: sent.delivered,
        status: sent.status,
        reason: sent.reason.clone(),
    }
    .into()
}
