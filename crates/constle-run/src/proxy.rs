//! The egress proxy of one sandbox: Squid, the door bridged to it, and the
//! task writing its decisions to the audit log.
//!
//! The door's server starts at once and Squid behind it, so the sandbox
//! can start while Squid does: a connection that arrives first waits for
//! Squid rather than failing. Squid that cannot start ends the run as it
//! would have before the sandbox started (see [`Proxy::trouble`]).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use constle_audit::catalogue::{NetworkAllowed, NetworkBlocked};
use constle_audit::{AuditError, AuditLog, Event};
use constle_egress::{EgressError, EgressPolicy, NetworkEvent, Squid};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::bridge;
use crate::channel::NameSink;
use crate::doors::{self, OpenDoor};
use crate::error::RunError;
use crate::events::record;
use crate::hidden::private_dir;
use crate::names::Names;
use crate::options::RunOptions;

/// Where a sandbox finds its proxy.
pub(crate) const PROXY_LISTEN: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3128);

/// The egress proxy of one sandbox (the agent's, or a stdio server's).
pub(crate) struct Proxy {
    bridge: JoinHandle<()>,
    /// The sandbox's resolver and captured connections, which go through
    /// this proxy.
    names: Names,
    squid: Starting,
    log: Arc<AuditLog>,
    server: Option<String>,
    _dir: tempfile::TempDir,
}

/// Squid on its way up, or up.
enum Starting {
    Pending {
        start: JoinHandle<Result<Squid, EgressError>>,
        target: watch::Sender<Option<SocketAddr>>,
    },
    Ready {
        squid: Box<Squid>,
        /// `None` once it has finished and its result was taken.
        recorder: Option<JoinHandle<Result<(), AuditError>>>,
    },
    /// Squid did not start; the error was taken.
    Failed,
}

/// Why a proxy stopped working.
pub(crate) enum ProxyTrouble {
    /// It never started.
    NotStarted(RunError),
    Died(String),
    NotRecorded(String),
    /// The sandbox's name service failed (an event it could not record).
    NamesFailed(String),
}

impl Proxy {
    /// Opens the sandbox's door to the proxy (`proxy`, for a stdio server
    /// too, whose decisions are recorded with its id) and starts Squid
    /// behind it. The door goes to the sandbox's
    /// [`Channel`](crate::channel::Channel).
    pub(crate) fn start(
        policy: &EgressPolicy,
        options: &RunOptions,
        log: &Arc<AuditLog>,
        server: Option<&str>,
    ) -> Result<(Proxy, OpenDoor), RunError> {
        let dir = private_dir("constle-squid-")?;
        let (target, address) = watch::channel(None);
        let names = Names::start(policy, address.clone(), log, server);
        let (door, listener) = doors::open("proxy".into(), PROXY_LISTEN);
        let bridge = bridge::forward(listener, address);
        let (run_dir, policy) = (dir.path().to_path_buf(), policy.clone());
        let hosts_file = options.hosts_file.clone();
        let start =
            tokio::spawn(
                async move { Squid::start(&run_dir, &policy, hosts_file.as_deref()).await },
            );
        let proxy = Proxy {
            bridge,
            names,
            squid: Starting::Pending { start, target },
            log: Arc::clone(log),
            server: server.map(str::to_owned),
            _dir: dir,
        };
        Ok((proxy, door))
    }

    /// What the sandbox's launcher sets up for the name service, and where
    /// the network channel hands its sockets.
    pub(crate) fn name_service(&self) -> (constle_sandbox::NameService, NameSink) {
        self.names.spec()
    }

    /// Waits until Squid accepts connections; from then on the bridge
    /// forwards to it and its decisions are recorded. Cancel-safe.
    pub(crate) async fn ready(&mut self) -> Result<(), RunError> {
        let Starting::Pending { start, .. } = &mut self.squid else {
            return match self.squid {
                Starting::Failed => Err(RunError::Sandbox("the proxy did not start".into())),
                _ => Ok(()),
            };
        };
        let started = start.await;
        let Starting::Pending { target, .. } = std::mem::replace(&mut self.squid, Starting::Failed)
        else {
            return Ok(());
        };
        let mut squid = match started {
            Ok(squid) => squid?,
            Err(err) => {
                return Err(RunError::Sandbox(format!(
                    "the proxy's start failed: {err}"
                )));
            }
        };
        let mut events = squid
            .take_events()
            .ok_or_else(|| RunError::Sandbox("the proxy's events were already taken".into()))?;
        let (log, server) = (Arc::clone(&self.log), self.server.clone());
        let recorder = tokio::spawn(async move {
            while let Some(decision) = events.recv().await {
                record(&log, network_event(&decision, server.as_deref())).await?;
            }
            Ok(())
        });
        let _ = target.send(Some(squid.addr()));
        self.squid = Starting::Ready {
            squid: Box::new(squid),
            recorder: Some(recorder),
        };
        Ok(())
    }

    /// How long Squid took from its spawn to accepting connections, once
    /// it has (zero before).
    pub(crate) fn ready_after(&self) -> Duration {
        match &self.squid {
            Starting::Ready { squid, .. } => squid.start_latency(),
            Starting::Pending { .. } | Starting::Failed => Duration::ZERO,
        }
    }

    /// Resolves when the proxy stops working: Squid did not start, exited,
    /// or its decisions can no longer be recorded.
    pub(crate) async fn trouble(&mut self) -> ProxyTrouble {
        tokio::select! {
            why = self.names.failure() => ProxyTrouble::NamesFailed(why),
            trouble = self.squid_trouble() => trouble,
        }
    }

    async fn squid_trouble(&mut self) -> ProxyTrouble {
        if let Err(err) = self.ready().await {
            return ProxyTrouble::NotStarted(err);
        }
        let Starting::Ready { squid, recorder } = &mut self.squid else {
            return std::future::pending().await;
        };
        let Some(running) = recorder.as_mut() else {
            return ProxyTrouble::Died(exit_description(squid.exited().await));
        };
        tokio::select! {
            status = squid.exited() => ProxyTrouble::Died(exit_description(status)),
            result = running => {
                // The recorder only ends early when the audit log fails or
                // Squid's log closed because Squid is going away.
                *recorder = None;
                match recorded(result) {
                    Err(err) => ProxyTrouble::NotRecorded(err.to_string()),
                    Ok(()) => ProxyTrouble::Died(exit_description(squid.exited().await)),
                }
            }
        }
    }

    /// Takes no new connection; those open end with the sandbox, and Squid
    /// still logs them.
    pub(crate) fn close(&self) {
        self.bridge.abort();
        self.names.close();
    }

    /// Stops Squid and waits until every decision it logged is recorded.
    /// A start still under way (the agent can be done before Squid is
    /// ready, and then nothing went through it) is abandoned: Squid's
    /// start leaves nothing behind when dropped.
    pub(crate) async fn stop(self) -> Result<(), RunError> {
        self.bridge.abort();
        self.names.stop().await;
        match self.squid {
            Starting::Pending { start, .. } => {
                start.abort();
                let _ = start.await;
                Ok(())
            }
            Starting::Ready { squid, recorder } => {
                squid.stop().await;
                match recorder {
                    Some(recorder) => recorded(recorder.await),
                    None => Ok(()),
                }
            }
            Starting::Failed => Ok(()),
        }
    }
}

fn exit_description(status: std::io::Result<ExitStatus>) -> String {
    status.map_or_else(|e| e.to_string(), |s| s.to_string())
}

fn recorded(
    result: Result<Result<(), AuditError>, tokio::task::JoinError>,
) -> Result<(), RunError> {
    match result {
        Ok(recorded) => Ok(recorded?),
        Err(err) => Err(RunError::Sandbox(format!(
            "the proxy's audit recorder failed: {err}"
        ))),
    }
}

/// `network_allowed` or `network_blocked`.
fn network_event(decision: &NetworkEvent, server: Option<&str>) -> Event {
    let fields = NetworkAllowed {
        host: decision.host.clone(),
        port: decision.port,
        squid: decision.squid_result.clone(),
        address: decision.resolved.map(|a| a.to_string()),
        reason: decision.reason.clone(),
        requested_at: constle_audit::format_timestamp(decision.started),
        server: server.map(str::to_owned).into(),
    };
    match decision.allowed {
        true => fields.into(),
        false => NetworkBlocked(fields).into(),
    }
}
