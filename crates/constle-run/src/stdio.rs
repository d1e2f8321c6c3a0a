//! The stdio MCP servers of one run (`mcp.servers[].command`): each in a
//! sandbox of its own, built like the agent's, behind a [`StdioBridge`]
//! that its gate forwards through. This module wires: the bridge decides
//! nothing, the gate holds the policy.
//!
//! For each server: its environment from the host variables its
//! `env_secret_refs` name (read before anything starts), its work directory
//! (declared, or an empty private one for the run), an egress proxy of its
//! own when it declares `network.allowed_hosts`, a Unix socket per
//! process whose one connection is the server's stdin and stdout, its
//! stderr appended to a bounded file under `$CONSTLE_HOME`, and every
//! start and end of a process in the audit log.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use constle_audit::catalogue::{McpServerExited, McpServerNotStarted, McpServerStarted};
use constle_audit::{AuditError, AuditLog, Event};
use constle_egress::EgressPolicy;
use constle_hostids::HostId;
use constle_manifest::{Manifest, McpServer, StdioServer};
use constle_mcp_gate::DEFAULT_RESPONSE_TIMEOUT;
use constle_mcp_stdio::{Launch, LaunchFuture, Process, ServerEvent, StdioBridge};
use constle_sandbox::{CommandIo, Private, SandboxSpec};
use constle_workdir::Workdir;
use tokio::io::AsyncReadExt as _;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::channel::{self, Channel, Launches};
use crate::error::{RunError, io};
use crate::events::record;
use crate::hidden::{private_dir, server_private};
use crate::limits::{RunLimits, ServerLimits, tmpfs_sizes};
use crate::options::RunOptions;
use crate::proxy::{PROXY_LISTEN, Proxy, ProxyTrouble};
use crate::workdir::{self, Dir, WorkdirChecked};

/// The most of a run's stderr kept per server; the rest is dropped (and
/// said so in the file).
const MAX_STDERR_BYTES: u64 = 8 << 20;

/// How long a server's sandbox may take to connect its stdin and stdout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The environments of the stdio servers, read from the host. The values
/// are secrets: never shown, [`fmt::Debug`] included.
pub(crate) struct Secrets(BTreeMap<String, BTreeMap<String, String>>);

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secrets(…)")
    }
}

impl Secrets {
    /// Every stdio server's `env_secret_refs`, from this process's
    /// environment; the first variable that is not set is an error naming
    /// it (and never anything's value).
    pub(crate) fn read(manifest: &Manifest) -> Result<Secrets, RunError> {
        let mut all = BTreeMap::new();
        for (server, stdio) in manifest.mcp.stdio_servers() {
            let mut env = BTreeMap::new();
            for (name, host) in &stdio.env_secret_refs {
                let value = std::env::var(host.as_str()).map_err(|_| RunError::SecretUnset {
                    server: server.id.to_string(),
                    variable: host.to_string(),
                })?;
                env.insert(name.to_string(), value);
            }
            all.insert(server.id.to_string(), env);
        }
        Ok(Secrets(all))
    }
}

/// What the run shares with every server's sandbox.
pub(crate) struct Context<'a> {
    pub manifest: &'a Manifest,
    /// The constle executable, `$CONSTLE_HOME` (where the stderr files
    /// go) and the hosts file for the servers' proxies.
    pub options: &'a RunOptions,
    /// The paths no sandbox may show: `$CONSTLE_HOME`, the Agentfile, the
    /// hosts file.
    pub private: &'a [Private],
    /// The run's private directory for sockets.
    pub sockets: &'a Path,
    /// The run's quarantine, for what a server leaves in its declared work
    /// directory.
    pub quarantine: &'a Path,
    pub log: &'a Arc<AuditLog>,
}

/// The running stdio servers. [`StdioServers::stop`] ends them.
pub(crate) struct StdioServers {
    servers: Vec<Running>,
}

struct Running {
    id: String,
    bridge: StdioBridge,
    /// The values of its `env_secret_refs`, which its gate keeps from the
    /// agent.
    secrets: Vec<String>,
    /// The declared work directory, checked and locked for the run (a
    /// default one is fresh, private, and removed after the run).
    workdir: Option<Workdir>,
    /// Where what the server leaves there is set aside.
    quarantine: PathBuf,
    /// Its egress proxy, with `network.allowed_hosts`, and the channel
    /// each of its sandboxes' doors and name service arrive on.
    proxy: Option<(Proxy, Channel)>,
    /// Its cgroups, with `sandbox.limits`.
    limits: ServerLimits,
    log: Arc<AuditLog>,
    recorder: JoinHandle<Result<(), AuditError>>,
    flush: oneshot::Sender<()>,
    /// The work directory of the run (a default one) and the stage, kept
    /// until the run ends.
    _dirs: Vec<tempfile::TempDir>,
    /// Its processes' host id, held until the run ends (root only).
    _host_id: Option<HostId>,
}

impl StdioServers {
    /// Starts every stdio server of the run, in a sandbox of its own, with
    /// its environment from `secrets`. A server that cannot be started
    /// fails the run before the agent starts.
    pub(crate) async fn start(
        cx: &Context<'_>,
        mut secrets: Secrets,
    ) -> Result<StdioServers, RunError> {
        let mut servers = Vec::new();
        for (server, stdio) in cx.manifest.mcp.stdio_servers() {
            let env = secrets.0.remove(server.id.as_str()).unwrap_or_default();
            servers.push(Running::start(cx, server, stdio, env).await?);
        }
        Ok(StdioServers { servers })
    }

    /// The bridge of server `id`, when it is a stdio server, and the
    /// secrets of its environment.
    pub(crate) fn bridge(&self, id: &str) -> Option<(&StdioBridge, &[String])> {
        let server = self.servers.iter().find(|s| s.id == id)?;
        Some((&server.bridge, &server.secrets))
    }

    /// Resolves when a server's proxy stops working, with the server's id;
    /// never, when no server has one.
    pub(crate) async fn proxy_trouble(&mut self) -> (String, ProxyTrouble) {
        let troubles = self.servers.iter_mut().filter_map(|server| {
            let (proxy, _) = server.proxy.as_mut()?;
            let id = server.id.clone();
            Some(Box::pin(async move { (id, proxy.trouble().await) }))
        });
        let troubles: Vec<_> = troubles.collect();
        if troubles.is_empty() {
            return std::future::pending().await;
        }
        futures_util::future::select_all(troubles).await.0
    }

    /// Stops every server and waits until each is gone and its last
    /// events are recorded; then checks each declared work directory, as
    /// the agent's (into `workdirs`).
    pub(crate) async fn stop(self, workdirs: &mut Vec<WorkdirChecked>) -> Result<(), RunError> {
        let mut recorded = Ok(());
        for server in self.servers {
            server.bridge.stop().await;
            recorded = recorded.and(server.limits.end().await);
            if let Some(workdir) = server.workdir {
                let id = Dir::Server(server.id.as_str());
                match workdir::finish(workdir, &server.quarantine, &server.log, id).await {
                    Ok(checked) => workdirs.push(checked),
                    Err(err) => recorded = recorded.and(Err(err)),
                }
            }
            // After the server: Squid logs a tunnel when it closes.
            if let Some((proxy, _)) = server.proxy {
                recorded = recorded.and(proxy.stop().await);
            }
            let _ = server.flush.send(());
            let result = match server.recorder.await {
                Ok(result) => result.map_err(RunError::from),
                Err(err) => Err(RunError::Sandbox(format!(
                    "the recorder of MCP server {} failed: {err}",
                    server.id
                ))),
            };
            recorded = recorded.and(result);
        }
        recorded
    }
}

impl Running {
    async fn start(
        cx: &Context<'_>,
        server: &McpServer,
        stdio: &StdioServer,
        env: BTreeMap<String, String>,
    ) -> Result<Running, RunError> {
        let id = server.id.to_string();
        let mut dirs = Vec::new();
        let workdir = match &stdio.workdir {
            Some(dir) => dir.clone(),
            None => {
                let dir = private_dir(&format!("constle-mcp-{id}-"))?;
                let path = dir.path().to_path_buf();
                dirs.push(dir);
                path
            }
        };
        let stage = private_dir("constle-stage-")?;
        let host_id = HostId::allocate_if_privileged()?;
        let quarantine = workdir::quarantine_of(cx.quarantine, Dir::Server(&id));
        let held = match &stdio.workdir {
            Some(dir) => {
                Some(workdir::prepare(dir, host_id.as_ref(), cx.log, Dir::Server(&id)).await?)
            }
            None => None,
        };
        let limits = RunLimits::for_server(cx.manifest, &id)?;
        let proxy = match stdio.allowed_hosts.as_slice() {
            [] => None,
            hosts => {
                let policy = EgressPolicy::restricted(hosts.iter().cloned());
                let (mut proxy, door) = Proxy::start(&policy, cx.options, cx.log, Some(&id))?;
                let names = Some(proxy.name_service());
                let network = Channel::start(cx.sockets, Some(&id), vec![door], names)?;
                proxy.ready().await?;
                Some((proxy, network))
            }
        };
        let secrets = env.values().cloned().collect();
        let env = match proxy {
            Some(_) => constle_egress::client_env(PROXY_LISTEN.into(), env.into_iter()),
            None => env,
        };
        let spec = SandboxSpec {
            command: stdio.command.clone(),
            workdir,
            env,
            rootfs: None,
            stdio: CommandIo::Inherit,
            constle_exe: cx.options.constle_exe.clone(),
            private: server_private(cx.private, cx.manifest, &id),
            stage: stage.path().to_path_buf(),
            cgroup_procs: limits.procs_files(),
            host_id: host_id.as_ref().map(HostId::get),
            tmpfs: tmpfs_sizes(cx.manifest),
            workdir_inode: held.as_ref().map(Workdir::inode),
            etc_files: BTreeMap::new(),
            home: None,
            home_inode: None,
            network: proxy.as_ref().map(|(_, network)| network.spec()),
        };
        dirs.push(stage);
        spec.check_dirs()
            .map_err(|e| RunError::Sandbox(format!("MCP server {id} cannot run: {e}")))?;
        let stderr = Arc::new(StderrLog::create(
            &cx.options.home,
            cx.manifest.name.as_str(),
            &id,
        )?);
        let plan = Arc::new(LaunchPlan {
            id: id.clone(),
            spec,
            sockets: cx.sockets.to_path_buf(),
            starts: AtomicU32::new(0),
            stderr: Arc::clone(&stderr),
            launches: proxy.as_ref().map(|(_, network)| network.launches()),
        });
        let launch = SandboxLaunch(plan);
        let (events, received) = mpsc::unbounded_channel();
        let (flush, flushed) = oneshot::channel();
        let recorder = tokio::spawn(record_events(
            Arc::clone(cx.log),
            id.clone(),
            stderr.path.display().to_string(),
            received,
            flushed,
        ));
        let bridge = StdioBridge::start(&id, launch, DEFAULT_RESPONSE_TIMEOUT, events)
            .await
            .map_err(|e| RunError::Sandbox(format!("MCP server {id} could not start: {e}")))?;
        let limits = ServerLimits::watch(limits, cx.log, &id);
        Ok(Running {
            id,
            bridge,
            secrets,
            workdir: held,
            quarantine,
            proxy,
            limits,
            log: Arc::clone(cx.log),
            recorder,
            flush,
            _dirs: dirs,
            _host_id: host_id,
        })
    }
}

/// Writes a server's events to the audit log, in order, until told to
/// flush what is left.
async fn record_events(
    log: Arc<AuditLog>,
    server: String,
    stderr: String,
    mut events: mpsc::UnboundedReceiver<ServerEvent>,
    mut flush: oneshot::Receiver<()>,
) -> Result<(), AuditError> {
    loop {
        let next = tokio::select! {
            biased;
            next = events.recv() => next,
            _ = &mut flush => None,
        };
        let Some(next) = next else { break };
        record_event(&log, &server, &stderr, &next).await?;
    }
    while let Ok(next) = events.try_recv() {
        record_event(&log, &server, &stderr, &next).await?;
    }
    Ok(())
}

async fn record_event(
    log: &AuditLog,
    server: &str,
    stderr: &str,
    happened: &ServerEvent,
) -> Result<(), AuditError> {
    match server_event(server, stderr, happened) {
        Some(event) => record(log, event).await,
        None => Ok(()),
    }
}

/// `mcp_server_started`, `mcp_server_not_started` or `mcp_server_exited`;
/// `None` for a kind of server event the catalogue has no entry for yet.
fn server_event(server: &str, stderr: &str, happened: &ServerEvent) -> Option<Event> {
    let server = server.to_owned();
    Some(match happened {
        ServerEvent::Started { pid } => McpServerStarted {
            server,
            pid: *pid,
            stderr: stderr.to_owned(),
        }
        .into(),
        ServerEvent::NotStarted { error } => McpServerNotStarted {
            server,
            error: error.clone(),
        }
        .into(),
        ServerEvent::Exited { cause, status } => McpServerExited {
            server,
            reason: cause.as_str().to_owned(),
            exit_code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
        }
        .into(),
        _ => return None,
    })
}

/// How to start one server's process, again and again.
struct LaunchPlan {
    id: String,
    /// The sandbox, without its channel (each process gets its own socket).
    spec: SandboxSpec,
    sockets: PathBuf,
    starts: AtomicU32,
    stderr: Arc<StderrLog>,
    /// Where each launcher is announced to the network channel, with
    /// egress.
    launches: Option<Launches>,
}

struct SandboxLaunch(Arc<LaunchPlan>);

impl Launch for SandboxLaunch {
    fn launch(&self) -> LaunchFuture {
        let plan = Arc::clone(&self.0);
        Box::pin(async move { plan.launch().await })
    }
}

impl LaunchPlan {
    /// One process: a socket for its channel, the sandbox spawned with a
    /// lifeline (as the agent's) and its stderr to the log, then the one
    /// connection its init makes.
    async fn launch(&self) -> io::Result<Process> {
        let n = self.starts.fetch_add(1, Ordering::Relaxed);
        let socket = self.sockets.join(format!("mcp-{}-stdio-{n}.sock", self.id));
        let listener = UnixListener::bind(&socket)?;
        let mut spec = self.spec.clone();
        spec.stdio = CommandIo::Socket(socket.clone());
        let mut command = constle_sandbox::sandbox_command(&spec).map_err(io::Error::other)?;
        let (lifeline, held) = std::io::pipe()?;
        command
            .stdin(lifeline)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut command = tokio::process::Command::from(command);
        let mut child = command.kill_on_drop(true).spawn()?;
        // The command holds this process's copy of the lifeline's read end.
        drop(command);
        let launched = self.launches.as_ref().map(|l| l.launched(child.id()));
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(Arc::clone(&self.stderr).copy(stderr, child.id()));
        }
        let accepted = tokio::select! {
            accepted = tokio::time::timeout(CONNECT_TIMEOUT, constle_sandbox::accept_stdio(&listener)) => accepted,
            why = channel::failure_of(launched.as_ref()) => {
                return Err(io::Error::other(format!("its sandbox could not be given its network: {why}")));
            }
            status = child.wait() => {
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                return Err(io::Error::other(format!("its sandbox ended before the server started ({status})")));
            }
        };
        // One connection per process: nothing else may connect later.
        drop(listener);
        let _ = std::fs::remove_file(&socket);
        let stream = accepted.map_err(|_| {
            io::Error::other(format!(
                "its sandbox did not connect within {} s",
                CONNECT_TIMEOUT.as_secs()
            ))
        })??;
        let (output, input) = stream.into_split();
        Ok(Process {
            input: Box::pin(input),
            output: Box::pin(output),
            child,
            hold: Box::new((held, launched)),
        })
    }
}

/// A server's stderr for the run: `$CONSTLE_HOME/logs/mcp/<agent>-<time>-<pid>-<server>.stderr`,
/// mode 0600, the first [`MAX_STDERR_BYTES`] of it, every process's in turn.
struct StderrLog {
    path: PathBuf,
    file: Mutex<(std::fs::File, u64)>,
}

impl StderrLog {
    fn create(home: &Path, agent: &str, server: &str) -> Result<StderrLog, RunError> {
        let dir = home.join("logs").join("mcp");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io(format!("cannot create {}", dir.display())))?;
        let time = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ");
        let name = format!("{agent}-{time}-{}-{server}.stderr", std::process::id());
        let path = dir.join(name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io(format!("cannot create {}", path.display())))?;
        Ok(StderrLog {
            path,
            file: Mutex::new((file, 0)),
        })
    }

    /// Appends what `stderr` says, up to the bound, and reads the rest to
    /// its end so the server never blocks on it.
    async fn copy(self: Arc<Self>, mut stderr: tokio::process::ChildStderr, pid: Option<u32>) {
        let pid = pid.map_or_else(|| "?".to_string(), |p| p.to_string());
        self.append(format!("--- constle: server process {pid} started\n").as_bytes());
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match stderr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => self.append(&buf[..n]),
            }
        }
    }

    fn append(&self, bytes: &[u8]) {
        let mut guard = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let (file, written) = &mut *guard;
        if *written >= MAX_STDERR_BYTES {
            return;
        }
        let room = usize::try_from(MAX_STDERR_BYTES - *written).unwrap_or(usize::MAX);
        let kept = &bytes[..bytes.len().min(room)];
        let _ = file.write_all(kept);
        *written += kept.len() as u64;
        if *written >= MAX_STDERR_BYTES {
            let _ = writeln!(
                file,
                "\n--- constle: stderr cut at {} MiB; the rest of the run's was dropped",
                MAX_STDERR_BYTES >> 20
            );
        }
    }
}
