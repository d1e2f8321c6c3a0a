//! The MCP gates of one run: one per declared server, each serving its own
//! Unix socket, relayed into the sandbox on 127.0.0.1, and announced to the
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
use constle_manifest::{Manifest, ServerId};
use constle_mcp_gate::{Gate, ServerPolicy};
use constle_sandbox::Relay;
use tokio::net::UnixListener;
use tokio::task::JoinHandle;

use crate::error::{RunError, io};
use crate::human::{GateAbort, GateAborts, HumanGate};
use crate::output::OutputHold;
use crate::spend::SpendMeter;

/// The first port the relays of the MCP gates listen on inside the
/// sandbox; server `n` (in Agentfile order) gets `MCP_BASE_PORT + n`.
const MCP_BASE_PORT: u16 = 4100;

/// One gate per declared server, in Agentfile order, not yet serving.
pub(crate) struct PreparedGates(Vec<(ServerId, Gate)>);

impl PreparedGates {
    /// Builds the gate of every declared server; the first that cannot be
    /// built (its URL, its HTTP client, a header without a usable value)
    /// is the error.
    pub(crate) fn new(manifest: &Manifest) -> Result<PreparedGates, RunError> {
        let gates = manifest.mcp.servers.iter().map(|server| {
            let policy = ServerPolicy::new(server, &manifest.human_gates);
            let gate =
                Gate::new(server, policy, &host_var).map_err(|source| RunError::McpGate {
                    server: server.id.to_string(),
                    source,
                })?;
            Ok((server.id.clone(), gate))
        });
        gates.collect::<Result<_, _>>().map(PreparedGates)
    }
}

/// The running gates. Dropping them stops serving.
pub(crate) struct McpGates {
    relays: Vec<Relay>,
    env: BTreeMap<String, String>,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
    aborts: Option<GateAborts>,
}

impl McpGates {
    /// Binds one socket per prepared gate under `sockets` and starts the
    /// gate. Gated calls go to the human gates (with `terminal` as the host
    /// terminal, if there is one, holding the agent's output back with
    /// `hold` while it asks); priced calls to `meter`.
    pub(crate) fn start(
        prepared: PreparedGates,
        manifest: &Manifest,
        sockets: &Path,
        log: &Arc<AuditLog>,
        terminal: Option<constle_human_gate::HostTty>,
        hold: &OutputHold,
        meter: Option<SpendMeter>,
    ) -> Result<McpGates, RunError> {
        let human = HumanGate::new(
            manifest.name.as_str(),
            &manifest.human_gates,
            log,
            terminal.map(|tty| (tty, hold.clone())),
        );
        let (human, aborts) = human.unzip();
        let mut gates = McpGates {
            relays: Vec::new(),
            env: BTreeMap::new(),
            tasks: Vec::new(),
            aborts,
        };
        for ((id, mut gate), port) in prepared.0.into_iter().zip(MCP_BASE_PORT..) {
            if let Some(human) = &human {
                gate = gate.with_approver(human.clone());
            }
            if let Some(meter) = &meter {
                gate = gate.with_meter(meter.clone());
            }
            let name = format!("mcp-{id}");
            let socket = sockets.join(format!("{name}.sock"));
            let listener = UnixListener::bind(&socket)
                .map_err(io(format!("cannot bind {}", socket.display())))?;
            gates.tasks.push(tokio::spawn(gate.serve(listener)));
            let listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
            gates
                .env
                .insert(id.env_var(), format!("http://{listen}/mcp"));
            gates.relays.push(Relay {
                name,
                listen,
                host_socket: socket,
            });
        }
        Ok(gates)
    }

    /// The relays to put into the sandbox.
    pub(crate) fn relays(&self) -> &[Relay] {
        &self.relays
    }

    /// `CONSTLE_MCP_<ID>_URL` for each server.
    pub(crate) fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    /// Resolves when a gated call timed out under `on_timeout: abort`;
    /// never, when no call is gated.
    pub(crate) async fn aborted(&mut self) -> GateAbort {
        match self.aborts.as_mut() {
            Some(aborts) => match aborts.recv().await {
                Some(abort) => abort,
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }
}

/// A variable of constle's own environment. One that is not Unicode is
/// read lossily, so the replacement character makes it an unusable header
/// value, and the gate says so, rather than call it unset.
fn host_var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
}

impl Drop for McpGates {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
