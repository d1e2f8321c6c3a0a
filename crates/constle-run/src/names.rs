//! The name service of one sandbox with egress (the agent's, or a stdio MCP
//! server's; `egress: none` has none, so a lookup there is refused by the
//! kernel at once, nothing listening on port 53): the service
//! ([`constle_capture`]) of the sockets each launch's network channel
//! ([`crate::channel::Channel`]) hands it, recording into the audit log:
//! `dns_resolved` once a name, `dns_refused` and `capture_refused`
//! for every refusal, paced like the gates' refusals so a flood slows the
//! agent's lookups and drops nothing.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use constle_audit::catalogue::{CaptureRefused, DnsRefused, DnsResolved};
use constle_audit::{AuditLog, Event};
use constle_capture::{CancellationToken, CaptureError, Limits, Sockets};
use constle_dns::Resolver;
use constle_egress::EgressPolicy;
use constle_mcp_gate::Pace;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::channel::{NameSink, failure};
use crate::events::record;

/// The placeholder ranges, routed to the sandbox's loopback.
fn local_routes() -> Vec<(IpAddr, u8)> {
    let (v4, v4_prefix) = constle_dns::PLACEHOLDER_IPV4;
    let (v6, v6_prefix) = constle_dns::PLACEHOLDER_IPV6;
    vec![(v4.into(), v4_prefix), (v6.into(), v6_prefix)]
}

/// The name service of a sandbox's launches (one for the agent, one per
/// session for a stdio server).
pub(crate) struct Names {
    sink: NameSink,
    /// Why the service failed, once it has.
    failed: watch::Receiver<Option<String>>,
    closing: CancellationToken,
    task: JoinHandle<()>,
}

/// What each launch's service shares.
struct Shared {
    policy: EgressPolicy,
    proxy: watch::Receiver<Option<SocketAddr>>,
    recorder: Arc<NameLog>,
    closing: CancellationToken,
}

impl Names {
    /// Starts, in a task, the service of each launch's sockets (see
    /// [`Names::spec`]), each sandbox with a resolver of its own: names
    /// `policy` allows resolve, and captured connections go through the
    /// proxy at `proxy`'s address. Events name `server` when the sandbox
    /// is a stdio MCP server's.
    pub(crate) fn start(
        policy: &EgressPolicy,
        proxy: watch::Receiver<Option<SocketAddr>>,
        log: &Arc<AuditLog>,
        server: Option<&str>,
    ) -> Names {
        let (sink, launches) = mpsc::unbounded_channel();
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
            if let Err(why) = serve_launches(launches, shared).await {
                let _ = fail.send(Some(why));
            }
        });
        Names {
            sink,
            failed,
            closing,
            task,
        }
    }

    /// What the sandbox's launcher sets up for the service, and where its
    /// network channel hands the sockets.
    pub(crate) fn spec(&self) -> (constle_sandbox::NameService, NameSink) {
        let service = constle_sandbox::NameService {
            local_routes: local_routes(),
        };
        (service, self.sink.clone())
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
        failure(&self.failed)
    }
}

impl Drop for Names {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long the end of a run waits for the refusals still to be recorded.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Serves each launch's sockets as they arrive, until one service fails
/// (why), or until closed and every service is done.
async fn serve_launches(
    mut launches: mpsc::UnboundedReceiver<(constle_sandbox::NameSockets, CancellationToken)>,
    shared: Shared,
) -> Result<(), String> {
    let mut serving = JoinSet::new();
    loop {
        tokio::select! {
            () = shared.closing.cancelled() => {
                while let Some(ended) = serving.join_next().await {
                    ended.map_err(|e| e.to_string())??;
                }
                return Ok(());
            }
            Some((sockets, ended)) = launches.recv() => {
                serving.spawn(serve(capture_sockets(sockets), &shared, ended));
            }
            Some(ended) = serving.join_next() => {
                ended.map_err(|e| format!("the name service ended: {e}"))??;
            }
        }
    }
}

/// A launch's sockets, as the service takes them.
fn capture_sockets(sockets: constle_sandbox::NameSockets) -> Sockets {
    Sockets {
        dns_udp: vec![sockets.dns_udp],
        dns_tcp: vec![sockets.dns_tcp],
        capture: vec![sockets.capture_v4, sockets.capture_v6],
        syn_watch: vec![sockets.syn_v4, sockets.syn_v6],
    }
}

/// Serves one sandbox's sockets until that fails (why), or the service is
/// closed or the launch `ended`: then what its SYN watches hold is
/// recorded, and its sockets are closed.
fn serve(
    sockets: Sockets,
    shared: &Shared,
    ended: CancellationToken,
) -> impl Future<Output = Result<(), String>> + Send + use<> {
    let resolver = Resolver::new(Some(&shared.policy));
    let closing = shared.closing.child_token();
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
        Limits {
            captured_connections: crate::descriptors::shares().captured_connections,
            ..Limits::default()
        },
        closing.clone(),
    );
    async move {
        tokio::pin!(served);
        let served = tokio::select! {
            served = &mut served => served,
            () = ended.cancelled() => {
                closing.cancel();
                served.await
            }
        };
        served.map_err(|error| match error {
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
