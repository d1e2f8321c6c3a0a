//! The name service of one sandbox with egress (the agent's, or a stdio MCP
//! server's; `egress: none` has none, so a lookup there is refused by the
//! kernel at once, nothing listening on port 53):
//! the channel its launcher sends the sandbox's network-namespace sockets
//! over, and their service ([`constle_capture`]), recording into the audit
//! log: `dns_resolved` once a name, `dns_refused` and `capture_refused`
//! for every refusal, paced like the gates' refusals so a flood slows the
//! agent's lookups and drops nothing.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use constle_audit::catalogue::{CaptureRefused, DnsRefused, DnsResolved};
use constle_audit::{AuditLog, Event};
use constle_capture::{CaptureError, Limits, Sockets};
use constle_dns::Resolver;
use constle_egress::EgressPolicy;
use constle_mcp_gate::Pace;
use tokio::net::UnixListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::error::{RunError, io};
use crate::events::record;

/// The placeholder ranges, routed to the sandbox's loopback.
fn local_routes() -> Vec<(IpAddr, u8)> {
    let (v4, v4_prefix) = constle_dns::PLACEHOLDER_IPV4;
    let (v6, v6_prefix) = constle_dns::PLACEHOLDER_IPV6;
    vec![(v4.into(), v4_prefix), (v6.into(), v6_prefix)]
}

/// A sandbox's name service, from before its launcher starts.
pub(crate) struct Names {
    channel: PathBuf,
    launcher: Option<oneshot::Sender<u32>>,
    /// Why the service failed, once it has.
    failed: watch::Receiver<Option<String>>,
    task: JoinHandle<()>,
}

impl Names {
    /// Binds the channel under `sockets` and waits, in a task, for the
    /// launcher's sockets, then serves them: names `policy` allows
    /// resolve, and captured connections go through the proxy at `proxy`'s
    /// address. Events name `server`
    /// when the sandbox is a stdio MCP server's.
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
        let listener = StdUnixListener::bind(&channel)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(UnixListener::from_std)
            .map_err(io(format!("cannot bind {}", channel.display())))?;
        let (launcher, pid) = oneshot::channel();
        let resolver = Resolver::new(Some(policy));
        let recorder = NameLog {
            log: Arc::clone(log),
            pace: Pace::for_refusals(),
            server: server.map(str::to_owned),
        };
        let (fail, failed) = watch::channel(None);
        let task = tokio::spawn(async move {
            let why = match receive(listener, pid).await {
                Ok(sockets) => serve(sockets, resolver, proxy, recorder).await,
                Err(err) => err,
            };
            let _ = fail.send(Some(why));
        });
        Ok(Names {
            channel,
            launcher: Some(launcher),
            failed,
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

    /// Only the launcher with this pid may hand over the sockets.
    pub(crate) fn launched(&mut self, pid: Option<u32>) {
        if let (Some(launcher), Some(pid)) = (self.launcher.take(), pid) {
            let _ = launcher.send(pid);
        }
    }

    /// Takes no new query or connection; those open end.
    pub(crate) fn close(&self) {
        self.task.abort();
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

/// The first connection from the launcher (checked by its pid) on the
/// channel, and the sockets it sends.
async fn receive(listener: UnixListener, pid: oneshot::Receiver<u32>) -> Result<Sockets, String> {
    let Ok(pid) = pid.await else {
        return std::future::pending().await;
    };
    loop {
        let (stream, _) = listener
            .accept()
            .await
            .map_err(|e| format!("the name service's channel failed: {e}"))?;
        let peer = stream.peer_cred().ok().and_then(|cred| cred.pid());
        if peer != i32::try_from(pid).ok() {
            continue;
        }
        let stream = stream
            .into_std()
            .and_then(|s| s.set_nonblocking(false).map(|()| s))
            .map_err(|e| format!("the name service's channel failed: {e}"))?;
        let sockets =
            tokio::task::spawn_blocking(move || constle_sandbox::receive_sockets(&stream))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cannot receive the sandbox's sockets: {e}"))?;
        return Ok(Sockets {
            dns_udp: vec![sockets.dns_udp],
            dns_tcp: vec![sockets.dns_tcp],
            capture: vec![sockets.capture_v4, sockets.capture_v6],
            syn_watch: vec![sockets.syn_v4, sockets.syn_v6],
        });
    }
}

async fn serve(
    sockets: Sockets,
    resolver: Resolver,
    proxy: watch::Receiver<Option<SocketAddr>>,
    recorder: NameLog,
) -> String {
    let recorder = Arc::new(recorder);
    let record = move |event| {
        let recorder = Arc::clone(&recorder);
        async move { recorder.record(event).await }
    };
    match constle_capture::serve(sockets, resolver, proxy, record, Limits::default()).await {
        Ok(never) => match never {},
        Err(CaptureError::Record(why)) => why,
        Err(err) => err.to_string(),
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
