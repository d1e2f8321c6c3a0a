//! The name service of one sandbox with egress (the agent's, or a stdio MCP
//! server's; `egress: none` has none, so a lookup there is refused by the
//! kernel at once, nothing listening on port 53):
//! the channel its launcher sends the sandbox's network-namespace sockets
//! over, and their service ([`constle_capture`]), recording into the audit
//! log: `dns_resolved` once a name, `dns_refused` and `capture_refused`
//! for every refusal, paced like the gates' refusals so a flood slows the
//! agent's lookups and drops nothing.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use constle_audit::catalogue::{CaptureRefused, DnsRefused, DnsResolved};
use constle_audit::{AuditLog, Event};
use constle_capture::{CancellationToken, CaptureError, Limits, Sockets};
use constle_dns::Resolver;
use constle_egress::EgressPolicy;
use constle_mcp_gate::Pace;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::error::{RunError, io};
use crate::events::record;

/// The placeholder ranges, routed to the sandbox's loopback.
fn local_routes() -> Vec<(IpAddr, u8)> {
    let (v4, v4_prefix) = constle_dns::PLACEHOLDER_IPV4;
    let (v6, v6_prefix) = constle_dns::PLACEHOLDER_IPV6;
    vec![(v4.into(), v4_prefix), (v6.into(), v6_prefix)]
}

/// The name service of a sandbox's launches (one for the agent, one per
/// session for a stdio server), from before the first launcher starts.
pub(crate) struct Names {
    channel: PathBuf,
    launches: Launches,
    /// Why the service failed, once it has.
    failed: watch::Receiver<Option<String>>,
    closing: CancellationToken,
    task: JoinHandle<()>,
}

/// Tells the service which launcher it is to take sockets from next.
#[derive(Clone)]
pub(crate) struct Launches(mpsc::UnboundedSender<u32>);

impl Launches {
    /// The sandbox's launcher was started as `pid`: only a launcher so
    /// announced may hand over sockets, once.
    pub(crate) fn launched(&self, pid: Option<u32>) {
        if let Some(pid) = pid {
            let _ = self.0.send(pid);
        }
    }
}

/// What each launch's service shares.
struct Shared {
    policy: EgressPolicy,
    proxy: watch::Receiver<Option<SocketAddr>>,
    recorder: Arc<NameLog>,
    closing: CancellationToken,
}

impl Names {
    /// Binds the channel under `sockets` and waits, in a task, for each
    /// announced launcher's sockets, then serves them, each sandbox with a
    /// resolver of its own: names `policy` allows resolve, and captured
    /// connections go through the proxy at `proxy`'s address. Events name
    /// `server` when the sandbox is a stdio MCP server's.
    pub(crate) fn start(
        policy: &EgressPolicy,
        proxy: watch::Receiver<Option<SocketAddr>>,
        sockets: &Path,
        log: &Arc<AuditLog>,
        server: Option<&str>,
    ) -> Result<Names, RunError> {
        let channel = match server {
            None => sockets.join("names.sock"),
            Some(id) => sockets.join(format!("names-{id}.sock")),
        };
        let listener = UnixListener::bind(&channel)
            .map_err(io(format!("cannot bind {}", channel.display())))?;
        let (launches, pids) = mpsc::unbounded_channel();
        let closing = CancellationToken::new();
        let shared = Shared {
            closing: closing.clone(),
            policy: policy.clone(),
            proxy,
            recorder: Arc::new(NameLog {
                log: Arc::clone(log),
                pace: Pace::for_refusals(),
                server: server.map(str::to_owned),
            }),
        };
        let (fail, failed) = watch::channel(None);
        let task = tokio::spawn(async move {
            if let Err(why) = serve_launches(listener, pids, shared).await {
                let _ = fail.send(Some(why));
            }
        });
        Ok(Names {
            channel,
            launches: Launches(launches),
            failed,
            closing,
            task,
        })
    }

    /// What the sandbox's spec asks its launcher to set up.
    pub(crate) fn spec(&self) -> constle_sandbox::NameService {
        constle_sandbox::NameService {
            channel: self.channel.clone(),
            local_routes: local_routes(),
        }
    }

    /// Where to announce each launcher.
    pub(crate) fn launches(&self) -> Launches {
        self.launches.clone()
    }

    /// Takes no new query or connection, and those open end; what the
    /// SYN watches still hold is recorded ([`Names::stop`] waits for it).
    pub(crate) fn close(&self) {
        self.closing.cancel();
    }

    /// Closes, and waits (at most [`DRAIN_GRACE`]) until every attempt
    /// refused before is recorded.
    pub(crate) async fn stop(mut self) {
        self.close();
        let _ = tokio::time::timeout(DRAIN_GRACE, &mut self.task).await;
    }

    /// Resolves when the service fails, with why (an event that could not
    /// be recorded, a socket that failed); never once it was closed.
    pub(crate) fn failure(&self) -> impl Future<Output = String> + Send + use<> {
        let mut failed = self.failed.clone();
        async move {
            // The guard is not held across an await: the future stays Send.
            let why = failed
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|why| why.clone());
            match why {
                Some(why) => why,
                None => std::future::pending().await,
            }
        }
    }
}

impl Drop for Names {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long the end of a run waits for the refusals still to be recorded.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Takes each announced launcher's sockets (a connection from anyone else
/// is dropped) and serves them, until one service fails (why), or until
/// closed and every service is done.
async fn serve_launches(
    listener: UnixListener,
    mut pids: mpsc::UnboundedReceiver<u32>,
    shared: Shared,
) -> Result<(), String> {
    let mut expected = HashSet::new();
    let mut serving = JoinSet::new();
    loop {
        tokio::select! {
            () = shared.closing.cancelled() => {
                while let Some(ended) = serving.join_next().await {
                    ended.map_err(|e| e.to_string())??;
                }
                return Ok(());
            }
            Some(pid) = pids.recv() => {
                expected.insert(pid);
            }
            accepted = listener.accept() => {
                let (stream, _) = accepted
                    .map_err(|e| format!("the name service's channel failed: {e}"))?;
                let peer = stream.peer_cred().ok().and_then(|cred| cred.pid());
                let Some(pid) = peer.and_then(|pid| u32::try_from(pid).ok()) else { continue };
                if !announced(pid, &mut expected, &mut pids).await {
                    continue;
                }
                serving.spawn(serve(receive(stream).await?, &shared));
            }
            Some(ended) = serving.join_next() => {
                ended.map_err(|e| format!("the name service ended: {e}"))??;
            }
        }
    }
}

/// How long a connection waits for its launcher to be announced: the pid
/// is sent the moment the spawn returns, long before the launcher connects.
const ANNOUNCE_WAIT: Duration = Duration::from_secs(1);

/// Whether `pid` was announced (and is no longer expected), waiting a
/// little for an announcement still on its way.
async fn announced(
    pid: u32,
    expected: &mut HashSet<u32>,
    pids: &mut mpsc::UnboundedReceiver<u32>,
) -> bool {
    let wait = async {
        while !expected.contains(&pid) {
            match pids.recv().await {
                Some(announced) => expected.insert(announced),
                None => return,
            };
        }
    };
    let _ = tokio::time::timeout(ANNOUNCE_WAIT, wait).await;
    expected.remove(&pid)
}

/// The sockets a launcher sends on `stream`.
async fn receive(stream: tokio::net::UnixStream) -> Result<Sockets, String> {
    let stream = stream
        .into_std()
        .and_then(|s| s.set_nonblocking(false).map(|()| s))
        .map_err(|e| format!("the name service's channel failed: {e}"))?;
    let sockets = tokio::task::spawn_blocking(move || constle_sandbox::receive_sockets(&stream))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot receive the sandbox's sockets: {e}"))?;
    Ok(Sockets {
        dns_udp: vec![sockets.dns_udp],
        dns_tcp: vec![sockets.dns_tcp],
        capture: vec![sockets.capture_v4, sockets.capture_v6],
        syn_watch: vec![sockets.syn_v4, sockets.syn_v6],
    })
}

/// Serves one sandbox's sockets until that fails (why) or is closed.
fn serve(
    sockets: Sockets,
    shared: &Shared,
) -> impl Future<Output = Result<(), String>> + Send + use<> {
    let resolver = Resolver::new(Some(&shared.policy));
    let recorder = Arc::clone(&shared.recorder);
    let record = move |event| {
        let recorder = Arc::clone(&recorder);
        async move { recorder.record(event).await }
    };
    let served = constle_capture::serve(
        sockets,
        resolver,
        shared.proxy.clone(),
        record,
        Limits::default(),
        shared.closing.clone(),
    );
    async move {
        served.await.map_err(|error| match error {
            CaptureError::Record(why) => why,
            error => error.to_string(),
        })
    }
}

/// Records the service's events for one sandbox.
struct NameLog {
    log: Arc<AuditLog>,
    pace: Pace,
    server: Option<String>,
}

impl NameLog {
    async fn record(&self, event: constle_capture::Event) -> Result<(), String> {
        let server = self.server.clone().into();
        let event: Event = match event {
            constle_capture::Event::Named(answered) => {
                let (ipv4, ipv6) = answered
                    .address
                    .and_then(constle_dns::placeholders)
                    .ok_or("a name was answered without a placeholder")?;
                DnsResolved {
                    name: answered.name.to_string(),
                    ipv4: ipv4.to_string(),
                    ipv6: ipv6.to_string(),
                    server,
                }
                .into()
            }
            constle_capture::Event::NameRefused(refused) => {
                tokio::time::sleep_until(self.pace.turn()).await;
                DnsRefused {
                    name: refused.name,
                    qtype: refused.qtype.map(|q| q.to_string()),
                    reason: refused.reason.as_str().to_owned(),
                    server,
                }
                .into()
            }
            constle_capture::Event::PortRefused {
                address,
                name,
                port,
            } => {
                tokio::time::sleep_until(self.pace.turn()).await;
                CaptureRefused {
                    address: address.to_string(),
                    port,
                    name: name.map(|n| n.to_string()),
                    server,
                }
                .into()
            }
            _ => return Ok(()),
        };
        record(&self.log, event)
            .await
            .map_err(|e| format!("cannot record what the sandbox's name service did: {e}"))
    }
}
