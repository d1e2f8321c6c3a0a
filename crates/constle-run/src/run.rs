//! The run itself: start the audit log, the egress proxy and the sandbox in
//! that order, record every network decision while the agent runs, and tear
//! everything down in reverse, whatever ends the run.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use constle_audit::{Appender, AuditError, AuditLog, Event, EventError};
use constle_egress::{EgressPolicy, NetworkEvent, Squid};
use constle_hostids::HostId;
use constle_identity::{KeyKind, KeyStore};
use constle_limits::LimitHit;
use constle_manifest::QuorumSource;
use constle_manifest::{Egress, Manifest};
use constle_sandbox::{CommandIo, Private, Relay, SandboxSpec};
use tokio::signal::unix::{SignalKind, signal};

use crate::a2a::A2aLink;
use crate::bridge;
use crate::checkpoints::RunCheckpoints;
use crate::error::{RunError, io};
use crate::limits::{RunLimits, limit_event, tmpfs_sizes};
use crate::mcp::{McpGates, PreparedGates};
use crate::output::{AgentOutput, OutputHold};
use crate::spend::SpendMeter;
use crate::stdio::{self, Secrets, StdioServers};
use crate::stop::GateStop;
use crate::workdir::{self, WorkdirChecked};

/// Where the agent finds the proxy inside the sandbox.
const PROXY_LISTEN: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3128);

/// What the caller decides about a run beyond the Agentfile.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// `$CONSTLE_HOME`: keys and logs.
    pub home: PathBuf,
    /// The Agentfile the manifest was read from: never visible to the agent.
    pub agentfile: PathBuf,
    /// Resolve names for the proxy from this file only (`--hosts-file`).
    pub hosts_file: Option<PathBuf>,
    /// The `constle` binary, run inside the sandbox as its relay.
    pub constle_exe: PathBuf,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// The agent's exit code, or 128 + the signal that ended the run.
    pub exit_code: i32,
    /// From start to finish.
    pub duration: Duration,
}

/// How a run ended, and what the checks after it did in each work
/// directory (whether the run succeeded or not).
#[derive(Debug)]
pub struct RunEnd {
    /// The agent's exit, or why the run failed.
    pub outcome: Result<RunReport, RunError>,
    /// The agent's work directory and each declared one of a stdio MCP
    /// server, as far as the run got.
    pub workdirs: Vec<WorkdirChecked>,
}

/// Runs the agent the Agentfile describes and returns when it has exited
/// and everything the run started has been stopped.
///
/// Must be called from a current-thread runtime: the proxy and the sandbox
/// are tied to the thread that spawns them (PDEATHSIG), which must live as
/// long as the run.
pub async fn run(manifest: &Manifest, options: &RunOptions) -> RunEnd {
    let mut workdirs = Vec::new();
    let outcome = run_checked(manifest, options, &mut workdirs).await;
    RunEnd { outcome, workdirs }
}

async fn run_checked(
    manifest: &Manifest,
    options: &RunOptions,
    workdirs: &mut Vec<WorkdirChecked>,
) -> Result<RunReport, RunError> {
    let started = Instant::now();
    // First: it reads the secrets of the servers' headers, and one missing
    // must leave nothing behind, not even a log entry.
    let gates = PreparedGates::new(manifest)?;
    let mut stop = StopSignals::take_over()?;
    // Before anything starts: a server's secret that is not there stops
    // the run here, by the variable's name.
    let secrets = Secrets::read(manifest)?;
    // And an approver set that does not verify, rolls back or expired.
    if let Some(QuorumSource::Set(set)) = manifest.human_gates.quorum.as_ref().map(|q| &q.source) {
        crate::quorum::load_set(set, &options.home)?;
    }
    let signer = match &manifest.identity {
        Some(identity) => {
            let missing = |source| RunError::KeyMissing {
                did: identity.did.to_string(),
                source,
            };
            let store = KeyStore::open(&options.home).map_err(missing)?;
            Some(store.find(KeyKind::Agent, &identity.did).map_err(missing)?)
        }
        None => None,
    };
    // And the witnesses' keys, with the agent key that signs checkpoints.
    let mut checkpoints = RunCheckpoints::open(manifest, &options.home)?;
    let log = Arc::new(AuditLog::start(Appender::new(
        &options.home.join("logs"),
        manifest.name.clone(),
        signer,
    )?));
    let run_started_seq = log.submit(run_started(manifest)).written().await?.seq;
    let first = match checkpoints.as_mut() {
        Some(checkpoints) => checkpoints.first(&log).await,
        None => Ok(()),
    };
    let outcome = match first {
        Ok(()) => {
            let checkpoints = checkpoints.as_mut();
            supervise(
                manifest,
                gates,
                options,
                &mut stop,
                &log,
                secrets,
                checkpoints,
                workdirs,
            )
            .await
        }
        Err(err) => Err(err),
    };
    let exit_code = match &outcome {
        Ok((code, _)) => *code,
        Err(_) => 125,
    };
    // Naming its start pairs the two for a receipt even when runs of the
    // agent overlap, or one before was killed and never finished.
    let mut finished = event("run_finished")
        .with("run_started_seq", run_started_seq)
        .and_then(|e| e.with("exit_status", exit_code))
        .and_then(|e| e.with("duration_ms", started.elapsed().as_millis() as i64));
    match &outcome {
        Ok((_, phases)) => finished = finished.and_then(|e| e.with("phases_us", phases.to_json())),
        Err(err) => finished = finished.and_then(|e| e.with("error", err.to_string())),
    }
    if let Ok(finished) = finished {
        record(&log, finished).await?;
    }
    let last = match checkpoints.as_mut() {
        Some(checkpoints) => checkpoints.last(&log).await,
        None => Ok(()),
    };
    if let Ok(log) = Arc::try_unwrap(log) {
        log.close();
    }
    let outcome = outcome.and_then(|done| last.map(|()| done));
    outcome.map(|(exit_code, _)| RunReport {
        exit_code,
        duration: started.elapsed(),
    })
}

pub(crate) fn event(name: &str) -> Event {
    // Every name used here is a literal snake_case word.
    Event::new(name).unwrap_or_else(|_| unreachable!("event names in this module are valid"))
}

pub(crate) async fn record(log: &AuditLog, event: Event) -> Result<(), AuditError> {
    log.submit(event).written().await.map(|_| ())
}

fn run_started(manifest: &Manifest) -> Event {
    let network = &manifest.sandbox.network;
    let egress = match network.egress {
        Egress::None => "none",
        Egress::Restricted => "restricted",
        Egress::Open => "open",
    };
    let hosts: Vec<String> = network
        .allowed_hosts
        .iter()
        .map(ToString::to_string)
        .collect();
    let started = event("run_started")
        .with("command", manifest.sandbox.command.clone())
        .and_then(|e| e.with("workdir", manifest.sandbox.workdir.display().to_string()))
        .and_then(|e| e.with("egress", egress))
        .and_then(|e| e.with("allowed_hosts", hosts))
        .and_then(|e| e.with("constle_version", env!("CARGO_PKG_VERSION")))
        .and_then(|e| e.with("policy_digest", manifest.policy_digest.to_string()));
    started.unwrap_or_else(|_| event("run_started"))
}

/// Starts the proxy and the sandbox, waits for the agent, and stops both;
/// `workdirs` gets what the checks after it did.
#[allow(clippy::too_many_arguments)]
async fn supervise(
    manifest: &Manifest,
    gates: PreparedGates,
    options: &RunOptions,
    stop: &mut StopSignals,
    log: &Arc<AuditLog>,
    secrets: Secrets,
    checkpoints: Option<&mut RunCheckpoints>,
    workdirs: &mut Vec<WorkdirChecked>,
) -> Result<(i32, Phases), RunError> {
    let mut clock = Instant::now();
    let mut lap = move || {
        let now = Instant::now();
        std::mem::replace(&mut clock, now).elapsed()
    };
    let quarantine = workdir::quarantine_root(&options.home, manifest.name.as_str());
    let sockets = private_dir("constle-sockets-")?;
    // Beside the sockets' directory, not in it: the sandbox's launcher
    // needs a stage whose parents anyone may search (see SandboxSpec).
    let stage = private_dir("constle-stage-")?;
    let private = private_paths(options);
    let host_id = HostId::allocate_if_root()?;
    let mut spec = SandboxSpec {
        command: manifest.sandbox.command.clone(),
        workdir: manifest.sandbox.workdir.clone(),
        env: BTreeMap::new(),
        rootfs: manifest.sandbox.rootfs.clone(),
        relays: Vec::new(),
        stdio: CommandIo::Inherit,
        constle_exe: options.constle_exe.clone(),
        private: private
            .iter()
            .cloned()
            .chain(stdio::declared_workdirs(manifest))
            .collect(),
        stage: stage.path().to_path_buf(),
        cgroup_procs: Vec::new(),
        host_id: host_id.as_ref().map(HostId::get),
        tmpfs: tmpfs_sizes(manifest),
        workdir_inode: None,
    };
    // What the sandbox would mount, before anything starts; the launcher
    // checks it all again on the objects it then mounts.
    spec.check_dirs()
        .map_err(|e| RunError::Sandbox(e.to_string()))?;
    // Next: on cgroup v2, constle may have to move itself into a cgroup of
    // its own, before anything it starts would share its old one.
    let limits = RunLimits::create(manifest)?;
    let mut proxy = match EgressPolicy::from_network(&manifest.sandbox.network) {
        Some(policy) => Some(Proxy::start(&policy, options, sockets.path(), log, None).await?),
        None => None,
    };
    // The host terminal is opened only when someone may have to answer on it.
    let terminal = manifest
        .human_gates
        .is_active()
        .then(constle_human_gate::open_host_tty)
        .flatten();
    let hold = OutputHold::default();
    let meter = SpendMeter::open(manifest, &options.home, log).await;
    let mut servers = StdioServers::start(
        &stdio::Context {
            manifest,
            options,
            private: &private,
            sockets: sockets.path(),
            quarantine: &quarantine,
            log,
        },
        secrets,
    )
    .await?;
    let gates = gates.bridged(&servers)?;
    let mut gates = McpGates::start(
        gates,
        manifest,
        &options.home,
        sockets.path(),
        log,
        terminal.map(|tty| (tty, hold.clone())),
        meter,
    )?;
    let a2a = A2aLink::start(manifest, &options.home, sockets.path(), log).await?;
    spec.env = agent_env(manifest, proxy.is_some(), gates.env());
    spec.env.extend(a2a.as_ref().map(A2aLink::env));
    spec.relays = proxy
        .iter()
        .map(|p| p.relay.clone())
        .chain(gates.relays().iter().cloned())
        .chain(a2a.iter().map(|a| a.relay().clone()))
        .collect();
    spec.cgroup_procs = limits.procs_files();
    let proxy_start = lap();
    let agent_workdir = workdir::prepare(&spec.workdir, host_id.as_ref(), log, None).await?;
    spec.workdir_inode = Some(agent_workdir.inode());
    let mut workdir_checks = lap();
    let (mut agent, output, lifeline) = match start_sandbox(&spec, &hold) {
        Ok(started) => started,
        Err(err) => {
            let quarantine = workdir::quarantine_of(&quarantine, None);
            workdirs.push(workdir::finish(agent_workdir, &quarantine, log, None).await?);
            return Err(err);
        }
    };
    let result = watch(
        &mut agent,
        proxy_trouble(proxy.as_mut(), &mut servers),
        &mut gates,
        &limits,
        stop,
        log,
        unwitnessed(checkpoints, log),
    )
    .await;
    let sandbox = lap();
    // Whatever ended the run, nothing more leaves the sandbox from here on,
    // even what is still on its way while the sandbox is torn down.
    gates.close("the run is ending");
    if let Some(proxy) = &proxy {
        proxy.close();
    }
    // The agent goes first: Squid logs a tunnel when it closes, so every
    // tunnel must be closed before the proxy stops.
    let _ = agent.start_kill();
    let _ = agent.wait().await;
    // Whatever of the sandbox outlived bwrap (it can only while bwrap
    // starts) ends with the lifeline, and so do its ends of the pipes.
    drop(lifeline);
    limits.end();
    output.finish(OUTPUT_GRACE).await;
    let mut teardown = lap();
    let agent_quarantine = workdir::quarantine_of(&quarantine, None);
    let checked = workdir::finish(agent_workdir, &agent_quarantine, log, None).await;
    workdir_checks += lap();
    let servers_stopped = servers.stop(workdirs).await;
    workdirs.insert(0, checked?);
    drop(gates);
    drop(a2a);
    let recorded = match proxy {
        Some(proxy) => proxy.stop().await,
        None => Ok(()),
    };
    teardown += lap();
    let phases = Phases {
        proxy_start,
        workdir: workdir_checks,
        sandbox,
        teardown,
    };
    let code = result?;
    recorded?;
    servers_stopped?;
    Ok((code, phases))
}

/// How long the agent's output may keep coming once the sandbox is gone.
const OUTPUT_GRACE: Duration = Duration::from_secs(5);

/// Spawns the sandbox with its stdout and stderr on pipes constle prints
/// from, in a process group of its own (the terminal's Ctrl-C goes to
/// constle, which ends the run, not to the sandbox), and with a lifeline:
/// the sandbox ends when the returned pipe end closes, at the latest when
/// constle exits, however it does.
fn start_sandbox(
    spec: &SandboxSpec,
    hold: &OutputHold,
) -> Result<(tokio::process::Child, AgentOutput, std::io::PipeWriter), RunError> {
    let mut command =
        constle_sandbox::sandbox_command(spec).map_err(|e| RunError::Sandbox(e.to_string()))?;
    let (output, stdout, stderr) =
        AgentOutput::start(hold).map_err(io("cannot make the agent's output pipes"))?;
    let (lifeline, held) = std::io::pipe().map_err(io("cannot make the sandbox's lifeline"))?;
    command
        .stdin(lifeline)
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    let mut command = tokio::process::Command::from(command);
    let agent = command
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RunError::Sandbox(format!("cannot start bwrap: {e}")))?;
    // The command holds this process's copies of the pipes' ends: without
    // dropping it, the pipes would never reach their end.
    drop(command);
    Ok((agent, output, held))
}

/// Where a run's time went, for `run_finished` and the run benchmark.
struct Phases {
    /// Squid started and the bridge bound (zero without egress).
    proxy_start: Duration,
    /// The agent's work directory checked before the sandbox starts and
    /// put right after it is gone.
    workdir: Duration,
    /// bwrap spawned until the agent exited: sandbox start plus the agent.
    sandbox: Duration,
    /// Stopping the agent, the stdio servers (their work directories'
    /// checks included) and the proxy, recording the last decisions.
    teardown: Duration,
}

impl Phases {
    fn to_json(&self) -> serde_json::Value {
        let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        serde_json::json!({
            "proxy_start": micros(self.proxy_start),
            "workdir": micros(self.workdir),
            "sandbox": micros(self.sandbox),
            "teardown": micros(self.teardown),
        })
    }
}

/// The egress proxy of one run: Squid, the Unix socket bridged to it, and
/// the task writing its decisions to the audit log.
pub(crate) struct Proxy {
    squid: Squid,
    pub(crate) relay: Relay,
    bridge: tokio::task::JoinHandle<()>,
    /// `None` once it has finished and its result was taken.
    recorder: Option<tokio::task::JoinHandle<Result<(), AuditError>>>,
    _dir: tempfile::TempDir,
}

impl Proxy {
    /// Resolves when the proxy stops working: Squid exited, or its
    /// decisions can no longer be recorded.
    pub(crate) async fn trouble(&mut self) -> ProxyTrouble {
        let Some(recorder) = self.recorder.as_mut() else {
            return ProxyTrouble::Died(exit_description(self.squid.exited().await));
        };
        tokio::select! {
            status = self.squid.exited() => ProxyTrouble::Died(exit_description(status)),
            result = recorder => {
                // The recorder only ends early when the audit log fails or
                // Squid's log closed because Squid is going away.
                self.recorder = None;
                match recorded(result) {
                    Err(err) => ProxyTrouble::NotRecorded(err.to_string()),
                    Ok(()) => ProxyTrouble::Died(exit_description(self.squid.exited().await)),
                }
            }
        }
    }

    /// The agent's proxy, or with `server` a stdio MCP server's (its
    /// decisions recorded with the server's id).
    pub(crate) async fn start(
        policy: &EgressPolicy,
        options: &RunOptions,
        sockets: &Path,
        log: &Arc<AuditLog>,
        server: Option<&str>,
    ) -> Result<Proxy, RunError> {
        let dir = private_dir("constle-squid-")?;
        let mut squid = Squid::start(dir.path(), policy, options.hosts_file.as_deref()).await?;
        let socket = match server {
            None => sockets.join("proxy.sock"),
            Some(id) => sockets.join(format!("proxy-{id}.sock")),
        };
        let bridge = bridge::forward(&socket, squid.addr())
            .map_err(io(format!("cannot bind {}", socket.display())))?;
        let mut events = squid
            .take_events()
            .ok_or_else(|| RunError::Sandbox("the proxy's events were already taken".into()))?;
        let log = Arc::clone(log);
        let server = server.map(str::to_owned);
        let recorder = tokio::spawn(async move {
            while let Some(decision) = events.recv().await {
                record(&log, network_event(&decision, server.as_deref())).await?;
            }
            Ok(())
        });
        let relay = Relay {
            name: "proxy".into(),
            listen: PROXY_LISTEN,
            host_socket: socket,
        };
        Ok(Proxy {
            squid,
            relay,
            bridge,
            recorder: Some(recorder),
            _dir: dir,
        })
    }

    /// Takes no new connection; those open end with the sandbox, and Squid
    /// still logs them.
    fn close(&self) {
        self.bridge.abort();
    }

    /// Stops Squid and waits until every decision it logged is recorded.
    pub(crate) async fn stop(self) -> Result<(), RunError> {
        self.bridge.abort();
        self.squid.stop().await;
        match self.recorder {
            Some(recorder) => recorded(recorder.await),
            None => Ok(()),
        }
    }
}

/// What the agent must never see or change: the keys and logs, its own
/// policy, and the names the proxy trusts.
fn private_paths(options: &RunOptions) -> Vec<Private> {
    let private = |what: &str, path: &Path| Private {
        what: what.into(),
        path: path.to_path_buf(),
    };
    let mut paths = vec![
        private("CONSTLE_HOME (keys and logs)", &options.home),
        private("the Agentfile", &options.agentfile),
    ];
    paths.extend(
        options
            .hosts_file
            .iter()
            .map(|f| private("the hosts file", f)),
    );
    paths
}

/// With a proxy, what makes clients that ignore the proxy variables by
/// default use them; `sandbox.env` may override each. Node goes through
/// the proxy only when told to: its `fetch` from Node 22.21 and 24.0 on,
/// its `http` and `https` modules from 22.21 and 24.5 on; older versions
/// ignore the variable.
const PROXY_OPT_INS: [(&str, &str); 1] = [("NODE_USE_ENV_PROXY", "1")];

/// The agent's whole environment (the sandbox adds `PATH` and `HOME` where
/// it is silent): what the Agentfile declares, the proxy variables
/// pointing at the relay, and the MCP gates' URLs (which the proxy
/// variables must not capture).
fn agent_env(
    manifest: &Manifest,
    proxied: bool,
    mcp: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let declared = manifest
        .sandbox
        .env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()));
    let mut env = match proxied {
        true => proxied_env(declared),
        false => declared.collect(),
    };
    env.extend(mcp.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// `declared`, with the proxy variables pointing at the relay (which win)
/// and the opt-ins that make clients use them (which `declared` may
/// override): the environment of a sandbox whose network is the proxy.
pub(crate) fn proxied_env(
    declared: impl Iterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = PROXY_OPT_INS
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into_iter()
        .collect();
    env.extend(declared);
    let url = format!("http://{PROXY_LISTEN}");
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
        env.insert(name.into(), url.clone());
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.insert(name.into(), "127.0.0.1,localhost".into());
    }
    env
}

/// Waits for the agent to exit. A signal to constle, the proxy dying, the
/// audit log failing, a gate timing out under `on_timeout: abort`, a
/// refusal that cannot be recorded or a checkpoint short of its required
/// quorum ends the run early.
async fn watch(
    agent: &mut tokio::process::Child,
    trouble: impl Future<Output = (Option<String>, ProxyTrouble)>,
    gates: &mut McpGates,
    limits: &RunLimits,
    stop: &mut StopSignals,
    log: &AuditLog,
    unwitnessed: impl Future<Output = RunError>,
) -> Result<i32, RunError> {
    tokio::select! {
        status = agent.wait() => {
            let code = exit_code(status.map_err(io("waiting for the agent"))?);
            // A memory limit ends the agent through the kernel's OOM killer:
            // the run then failed at its limit, whatever the exit code says.
            match limits.reached_now() {
                Some(hit) => limit_reached(log, &hit).await,
                None => Ok(code),
            }
        }
        hit = limits.reached() => {
            let _ = agent.start_kill();
            limit_reached(log, &hit).await
        }
        (server, trouble) = trouble => {
            let _ = agent.start_kill();
            let whose = server.as_ref().map_or_else(
                || "the proxy".to_owned(),
                |id| format!("the proxy of MCP server {id}"),
            );
            let reason = match trouble {
                ProxyTrouble::Died(status) => format!("{whose} exited: {status}"),
                ProxyTrouble::NotRecorded(error) => format!("{whose}'s decisions could not be recorded: {error}"),
            };
            let failed = event("egress_failed").with("reason", reason.clone());
            if let Ok(failed) = failed.and_then(|e| of_server(e, server.as_deref())) {
                record(log, failed).await?;
            }
            Err(RunError::EgressDied(reason))
        }
        stop = gates.stopped() => {
            let _ = agent.start_kill();
            Err(match stop {
                GateStop::Timeout { server, tool } => RunError::GateTimeout { server, tool },
                GateStop::Unrecorded { server, what, error } => RunError::GateUnrecorded { server, what, error },
            })
        }
        stop = unwitnessed => {
            let _ = agent.start_kill();
            Err(stop)
        }
        (name, number) = stop.recv() => {
            if let Ok(stopped) = event("run_interrupted").with("signal", name) {
                record(log, stopped).await?;
            }
            Ok(128 + number)
        }
    }
}

/// The agent's proxy, or a stdio server's, failing: either ends the run.
async fn proxy_trouble(
    proxy: Option<&mut Proxy>,
    servers: &mut StdioServers,
) -> (Option<String>, ProxyTrouble) {
    let agent = async {
        match proxy {
            Some(proxy) => (None, proxy.trouble().await),
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        trouble = agent => trouble,
        (server, trouble) = servers.proxy_trouble() => (Some(server), trouble),
    }
}

/// A checkpoint short of its required quorum, which ends the run.
async fn unwitnessed(checkpoints: Option<&mut RunCheckpoints>, log: &AuditLog) -> RunError {
    match checkpoints {
        Some(checkpoints) => checkpoints.watch(log).await,
        None => std::future::pending().await,
    }
}

async fn limit_reached(log: &AuditLog, hit: &LimitHit) -> Result<i32, RunError> {
    if let Ok(reached) = limit_event(hit) {
        record(log, reached).await?;
    }
    Err(RunError::LimitReached(hit.to_string()))
}

/// The signals that end a run. Taken over before anything of the run
/// starts, so that a signal during start-up ends the run through the same
/// teardown instead of killing constle between two child processes.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn take_over() -> Result<StopSignals, RunError> {
        let stream = |kind| signal(kind).map_err(io("cannot handle signals"));
        Ok(StopSignals {
            interrupt: stream(SignalKind::interrupt())?,
            terminate: stream(SignalKind::terminate())?,
            hangup: stream(SignalKind::hangup())?,
        })
    }

    /// The next stop signal's name and number.
    async fn recv(&mut self) -> (&'static str, i32) {
        tokio::select! {
            _ = self.interrupt.recv() => ("SIGINT", 2),
            _ = self.terminate.recv() => ("SIGTERM", 15),
            _ = self.hangup.recv() => ("SIGHUP", 1),
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

pub(crate) enum ProxyTrouble {
    Died(String),
    NotRecorded(String),
}

fn network_event(decision: &NetworkEvent, server: Option<&str>) -> Event {
    let name = decision.audit_event_name();
    let built = event(name)
        .with("host", decision.host.clone())
        .and_then(|e| e.with("port", i64::from(decision.port)))
        .and_then(|e| e.with("squid", decision.squid_result.clone()))
        .and_then(|e| e.with("address", decision.resolved.map(|a| a.to_string())))
        .and_then(|e| e.with("reason", decision.reason.clone()))
        .and_then(|e| {
            e.with(
                "requested_at",
                constle_audit::format_timestamp(decision.started),
            )
        })
        .and_then(|e| of_server(e, server));
    built.unwrap_or_else(|_| event(name))
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(125)
}

/// `event` with the stdio MCP server it concerns, if any (the agent's own
/// events carry no `server`).
pub(crate) fn of_server(event: Event, server: Option<&str>) -> Result<Event, EventError> {
    match server {
        Some(server) => event.with("server", server),
        None => Ok(event),
    }
}

/// A fresh directory only the current user can enter.
pub(crate) fn private_dir(prefix: &str) -> Result<tempfile::TempDir, RunError> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(io("cannot create a private run directory"))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .map_err(io(format!("cannot restrict {}", dir.path().display())))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(env: &str) -> Manifest {
        let src = format!("name: a\nsandbox:\n  command: [x]\n  env:\n{env}");
        constle_manifest::parse_str(&src, Path::new("/srv/a/agent.yaml"), &|_| None)
            .unwrap()
            .manifest
    }

    fn pairs(env: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn the_agents_environment() {
        let mcp = BTreeMap::from([(
            "CONSTLE_MCP_A_URL".to_string(),
            "http://127.0.0.1:4100/mcp".to_string(),
        )]);
        let declared = manifest("    FOO: bar\n");
        let proxy = "http://127.0.0.1:3128";
        let local = "127.0.0.1,localhost";
        assert_eq!(
            pairs(&agent_env(&declared, true, &mcp)),
            [
                ("CONSTLE_MCP_A_URL", "http://127.0.0.1:4100/mcp"),
                ("FOO", "bar"),
                ("HTTPS_PROXY", proxy),
                ("HTTP_PROXY", proxy),
                ("NODE_USE_ENV_PROXY", "1"),
                ("NO_PROXY", local),
                ("http_proxy", proxy),
                ("https_proxy", proxy),
                ("no_proxy", local),
            ]
        );
        // Without a proxy, nothing points at one.
        assert_eq!(
            pairs(&agent_env(&declared, false, &BTreeMap::new())),
            [("FOO", "bar")]
        );
        // The Agentfile may turn Node's use of the proxy off.
        let node_off = manifest("    NODE_USE_ENV_PROXY: \"0\"\n");
        let env = agent_env(&node_off, true, &BTreeMap::new());
        assert_eq!(env["NODE_USE_ENV_PROXY"], "0");
    }
}
