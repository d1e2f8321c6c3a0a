//! The MCP gates of one run: one per declared server, each serving its own
//! door into the sandbox on 127.0.0.1, and announced to the
//! agent as `CONSTLE_MCP_<ID>_URL`. The servers' real URLs, and the values
//! of the headers declared for them, stay here.
//!
//! The gates are built before anything of the run starts
//! ([`PreparedGates`]), since building one reads its headers' values from
//! constle's environment: a secret that is unset or unusable stops the run
//! before the audit log, the proxy or the sandbox exist.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;

use constle_audit::AuditLog;
use constle_manifest::{Manifest, McpTransport, ServerId};
use constle_mcp_gate::{Gate, ServerPolicy, Shutoff};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::doors::{self, OpenDoor};
use crate::error::RunError;
use crate::human::HumanGate;
use crate::output::OutputHold;
use crate::refusals::GateLog;
use crate::spend::SpendMeter;
use crate::stdio::StdioServers;
use crate::stop::{GateStop, GateStopped};

/// The first port the doors of the MCP gates listen on inside the
/// sandbox; server `n` (in Agentfile order) gets `MCP_BASE_PORT + n`.
const MCP_BASE_PORT: u16 = 4100;

/// One gate per declared server, in Agentfile order, not yet serving.
pub(crate) struct PreparedGates(Vec<(ServerId, Prepared)>);

/// A URL server's gate, built; a stdio server's policy, whose gate is
/// built once its bridge (and with it the server) has started.
enum Prepared {
    Built(Gate),
    AwaitingBridge(ServerPolicy),
}

impl PreparedGates {
    /// Builds the gate of every declared URL server; the first that cannot
    /// be built (its URL, its HTTP client, a header without a usable value)
    /// is the error.
    pub(crate) fn new(manifest: &Manifest) -> Result<PreparedGates, RunError> {
        let gates = manifest.mcp.servers.iter().map(|server| {
            let policy = ServerPolicy::new(server, &manifest.human_gates);
            if let McpTransport::Stdio(_) = server.transport {
                return Ok((server.id.clone(), Prepared::AwaitingBridge(policy)));
            }
            let gate =
                Gate::new(server, policy, &host_var).map_err(|source| RunError::McpGate {
                    server: server.id.to_string(),
                    source,
                })?;
            Ok((server.id.clone(), Prepared::Built(gate)))
        });
        gates.collect::<Result<_, _>>().map(PreparedGates)
    }

    /// Every gate built: each stdio server's forwarding through its bridge
    /// in `stdio`, started by now.
    pub(crate) fn bridged(self, stdio: &StdioServers) -> Result<BridgedGates, RunError> {
        let gates = self.0.into_iter().map(|(id, prepared)| {
            let gate = match prepared {
                Prepared::Built(gate) => gate,
                Prepared::AwaitingBridge(policy) => {
                    let (bridge, secrets) = stdio.bridge(id.as_str()).ok_or_else(|| {
                        RunError::Sandbox(format!("MCP server {id} was not started"))
                    })?;
                    Gate::with_transport(policy, bridge.clone()).withholding(secrets.to_vec())
                }
            };
            Ok((id, gate))
        });
        gates.collect::<Result<_, _>>().map(BridgedGates)
    }
}

/// Every declared server's gate, in Agentfile order, ready to serve.
pub(crate) struct BridgedGates(Vec<(ServerId, Gate)>);

/// The running gates. Dropping them stops accepting connections; closing
/// them ([`McpGates::close`]) stops every one of them forwarding.
pub(crate) struct McpGates {
    doors: Vec<OpenDoor>,
    env: BTreeMap<String, String>,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
    stopped: GateStopped,
    shutoff: Shutoff,
}

impl McpGates {
    /// Opens one door per gate and starts the gate on it.
    /// Gated calls go to the human gates (with `terminal` as the host
    /// terminal, if there is one, and the hold that keeps the agent's
    /// output back while it asks); priced calls to `meter`; every request a gate
    /// refuses itself to the audit log (`mcp_refused`), and every distinct
    /// tool list it shows the agent (`mcp_tools_offered`). All of them share
    /// one [`Shutoff`], thrown when a timeout aborts the run or a refusal or
    /// tool list cannot be recorded.
    pub(crate) fn start(
        ready: BridgedGates,
        manifest: &Manifest,
        home: &Path,
        log: &Arc<AuditLog>,
        terminal: Option<(constle_human_gate::HostTty, OutputHold)>,
        meter: Option<SpendMeter>,
    ) -> Result<McpGates, RunError> {
        let shutoff = Shutoff::new();
        let (stops, stopped) = mpsc::unbounded_channel();
        let human = HumanGate::new(manifest, home, log, terminal, &shutoff, &stops)?;
        let records = GateLog::new(log, &shutoff, &stops);
        let mut gates = McpGates {
            doors: Vec::new(),
            env: BTreeMap::new(),
            tasks: Vec::new(),
            stopped,
            shutoff: shutoff.clone(),
        };
        for ((id, gate), port) in ready.0.into_iter().zip(MCP_BASE_PORT..) {
            let mut gate = gate
                .with_recorder(records.clone())
                .with_shutoff(shutoff.clone());
            if let Some(human) = &human {
                gate = gate.with_approver(human.clone());
            }
            if let Some(meter) = &meter {
                gate = gate.with_meter(meter.clone());
            }
            let listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
            let (door, listener) = doors::open(format!("mcp-{id}"), listen);
            gates.tasks.push(tokio::spawn(gate.serve(listener)));
            gates.doors.push(door);
            gates
                .env
                .insert(id.env_var(), format!("http://{listen}/mcp"));
        }
        Ok(gates)
    }

    /// The doors to put into the sandbox (taken once).
    pub(crate) fn take_doors(&mut self) -> Vec<OpenDoor> {
        std::mem::take(&mut self.doors)
    }

    /// `CONSTLE_MCP_<ID>_URL` for each server.
    pub(crate) fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    /// Closes every gate: from now on nothing is forwarded to any server,
    /// whatever is still on its way from the sandbox. `why` is what the
    /// agent is told; a reason given earlier stays.
    pub(crate) fn close(&self, why: &str) {
        self.shutoff.close(why);
    }

    /// Resolves when the gates end the run: a gated call timed out under
    /// `on_timeout: abort`, or a refusal could not be recorded (every gate
    /// is closed by then).
    pub(crate) async fn stopped(&mut self) -> GateStop {
        match self.stopped.recv().await {
            Some(stop) => stop,
            // The gates are gone, and nothing can stop the run from here.
            None => std::future::pending().await,
        }
    }
}

/// A variable of constle's own environment. One that is not Unicode is
/// read lossily, so the replacement character makes it an unusable header
/// value, and the gate says so, rather than call it unset.
pub(crate) fn host_var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
}

impl Drop for McpGates {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
