//! The run, as its phases. Each is a type only the phase before can make:
//!
//! 1. [`Checked`]: everything that can refuse the run, checked before
//!    anything starts (the gates' and the stdio servers' secrets, the
//!    approver set, the agent key, the witnesses' keys). A refusal here
//!    leaves nothing behind, not even a log entry.
//! 2. [`Logged`]: the audit log open and `run_started` recorded; from here
//!    on the run ends with `run_finished` ([`Logged::finish`]), whatever
//!    happens.
//! 3. [`Started`]: the proxy, the stdio servers, the gates and the sandbox,
//!    started together: the agent's first connection waits for the proxy.
//!    [`Started::watch`] waits for the agent's exit or whatever ends the
//!    run first, and [`Started::stop`] tears everything down in reverse.
//!
//! This module decides nothing: what is allowed, approved, priced or
//! hidden is decided by the crates and modules it calls.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use constle_audit::catalogue::{EgressFailed, RunInterrupted};
use constle_audit::{Appender, AuditLog};
use constle_egress::EgressPolicy;
use constle_hostids::HostId;
use constle_identity::{KeyKind, KeyStore, SigningIdentity};
use constle_limits::LimitHit;
use constle_manifest::{Manifest, QuorumSource};
use constle_sandbox::{CommandIo, SandboxSpec};
use constle_workdir::Workdir;

use crate::a2a::A2aLink;
use crate::agent::{self, AgentProcess, OUTPUT_GRACE};
use crate::channel::{self, Channel, Launched};
use crate::checkpoints::RunCheckpoints;
use crate::descriptors;
use crate::error::{RunError, io};
use crate::events::{self, record};
use crate::hidden::{self, private_dir};
use crate::limits::{
    RunLimits, WallClock, limit_event, tmpfs_sizes, wall_clock_deadline, wall_clock_reached,
};
use crate::llm::{ModelGates, PreparedModelGates};
use crate::llm_spend::ModelLog;
use crate::mcp::{McpGates, PreparedGates};
use crate::options::{RunEnd, RunOptions, RunReport};
use crate::output::OutputHold;
use crate::proxy::{Proxy, ProxyTrouble};
use crate::signals::StopSignals;
use crate::spend::{self, SpendMeter};
use crate::stdio::{self, Secrets, StdioServers};
use crate::stop::GateStop;
use crate::timings::{Laps, Timings};
use crate::workdir::{self, Dir, WorkdirChecked};

/// Runs the agent the Agentfile describes and returns when it has exited
/// and everything the run started has been stopped.
///
/// Must be called from a current-thread runtime: the proxy and the sandbox
/// are tied to the thread that spawns them (PDEATHSIG), which must live as
/// long as the run.
pub async fn run(manifest: &Manifest, options: &RunOptions) -> RunEnd {
    descriptors::raise();
    let mut workdirs = Vec::new();
    let outcome = match Checked::check(manifest, options) {
        Ok(checked) => logged(checked, &mut workdirs).await,
        Err(err) => Err(err),
    };
    RunEnd { outcome, workdirs }
}

async fn logged(
    checked: Checked<'_>,
    workdirs: &mut Vec<WorkdirChecked>,
) -> Result<RunReport, RunError> {
    let (mut logged, starts) = checked.open_log().await?;
    let outcome = logged.supervise(starts, workdirs).await;
    logged.finish(outcome).await
}

/// Phase 1: everything checked, nothing started.
struct Checked<'a> {
    manifest: &'a Manifest,
    options: &'a RunOptions,
    since: Instant,
    stop: StopSignals,
    starts: Starts,
    signer: Option<SigningIdentity>,
    checkpoints: Option<RunCheckpoints>,
}

/// What phase 1 read for the start: the gates with their headers' secrets,
/// and the stdio servers' environments.
struct Starts {
    gates: PreparedGates,
    models: PreparedModelGates,
    secrets: Secrets,
}

impl Checked<'_> {
    fn check<'a>(manifest: &'a Manifest, options: &'a RunOptions) -> Result<Checked<'a>, RunError> {
        let since = Instant::now();
        // First: it reads the secrets of the servers' headers, and one
        // missing must leave nothing behind, not even a log entry.
        let gates = PreparedGates::new(manifest)?;
        // And the model providers' keys.
        let models = PreparedModelGates::new(manifest)?;
        let stop = StopSignals::take_over()?;
        // A server's secret that is not there stops the run here, by the
        // variable's name.
        let secrets = Secrets::read(manifest)?;
        // And an approver set that does not verify, rolls back or expired.
        if let Some(QuorumSource::Set(set)) =
            manifest.human_gates.quorum.as_ref().map(|q| &q.source)
        {
            crate::quorum::load_set(set, &options.home)?;
        }
        let signer = signer(manifest, options)?;
        // And the witnesses' keys, with the agent key that signs checkpoints.
        let checkpoints = RunCheckpoints::open(manifest, &options.home)?;
        Ok(Checked {
            manifest,
            options,
            since,
            stop,
            starts: Starts {
                gates,
                models,
                secrets,
            },
            signer,
            checkpoints,
        })
    }
}

/// The layers the sandbox needs that this machine refuses.
fn preflight(options: &RunOptions) -> Result<(), RunError> {
    let needs = constle_preflight::Needs::any_run(options.constle_exe.clone(), None);
    let missing = constle_preflight::before_run(&needs, &options.home.join("preflight"));
    match missing.is_empty() {
        true => Ok(()),
        false => Err(RunError::Preflight(missing)),
    }
}

/// The agent key that signs the log, when `identity.did` is declared.
fn signer(manifest: &Manifest, options: &RunOptions) -> Result<Option<SigningIdentity>, RunError> {
    let Some(identity) = &manifest.identity else {
        return Ok(None);
    };
    let missing = |source| RunError::KeyMissing {
        did: identity.did.to_string(),
        source,
    };
    let store = KeyStore::open(&options.home).map_err(missing)?;
    Ok(Some(
        store.find(KeyKind::Agent, &identity.did).map_err(missing)?,
    ))
}

/// Phase 2: the audit log open and the run's start recorded.
struct Logged<'a> {
    manifest: &'a Manifest,
    options: &'a RunOptions,
    since: Instant,
    stop: StopSignals,
    checkpoints: Option<RunCheckpoints>,
    log: Arc<AuditLog>,
    run_started_seq: u64,
}

impl<'a> Checked<'a> {
    async fn open_log(self) -> Result<(Logged<'a>, Starts), RunError> {
        let log = Arc::new(AuditLog::start(Appender::new(
            &self.options.home.join("logs"),
            self.manifest.name.clone(),
            self.signer,
        )?));
        let started = log.submit(events::run_started(self.manifest));
        let run_started_seq = started.written().await?.seq;
        let logged = Logged {
            manifest: self.manifest,
            options: self.options,
            since: self.since,
            stop: self.stop,
            checkpoints: self.checkpoints,
            log,
            run_started_seq,
        };
        Ok((logged, self.starts))
    }
}

impl Logged<'_> {
    /// The first checkpoint, the start, the agent's run and the teardown;
    /// `workdirs` gets what the checks after it did.
    async fn supervise(
        &mut self,
        starts: Starts,
        workdirs: &mut Vec<WorkdirChecked>,
    ) -> Result<(i32, Timings), RunError> {
        // A layer of the sandbox this machine refuses (what a container
        // brings) ends the run here, recorded, before anything starts.
        preflight(self.options)?;
        if let Some(checkpoints) = self.checkpoints.as_mut() {
            checkpoints.first(&self.log).await?;
        }
        let mut started = Started::start(self, starts, workdirs).await?;
        let ended = started
            .watch(&mut self.stop, &self.log, self.checkpoints.as_mut())
            .await;
        started.stop(ended, workdirs).await
    }

    /// Records `run_finished` and the last checkpoint, and closes the log.
    async fn finish(
        mut self,
        outcome: Result<(i32, Timings), RunError>,
    ) -> Result<RunReport, RunError> {
        let finished = events::run_finished(self.run_started_seq, &outcome, self.since.elapsed());
        record(&self.log, finished).await?;
        let last = match self.checkpoints.as_mut() {
            Some(checkpoints) => checkpoints.last(&self.log).await,
            None => Ok(()),
        };
        if let Ok(log) = Arc::try_unwrap(self.log) {
            log.close();
        }
        let (exit_code, _) = outcome?;
        last?;
        Ok(RunReport {
            exit_code,
            duration: self.since.elapsed(),
        })
    }
}

/// Phase 3: the proxy, the stdio servers, the gates and the sandbox.
struct Started {
    log: Arc<AuditLog>,
    agent: AgentProcess,
    proxy: Option<Proxy>,
    /// The channel the sandbox's doors and name service arrived on (held
    /// for its task), and the hold that keeps them served.
    _network: Option<Channel>,
    launched: Option<Launched>,
    servers: StdioServers,
    gates: McpGates,
    models: ModelGates,
    a2a: Option<A2aLink>,
    limits: RunLimits,
    wall_clock: Option<WallClock>,
    workdir: Workdir,
    quarantine: PathBuf,
    /// The kept home (`sandbox.home`), checked and locked like the work
    /// directory, and where its entries are set aside.
    home: Option<(Workdir, PathBuf)>,
    laps: Laps,
    timings: Timings,
    /// The sockets' directory and the sandbox's stage.
    _dirs: [tempfile::TempDir; 2],
    /// The sandbox's host id, held until the run ends (root only).
    _host_id: Option<HostId>,
}

impl Started {
    /// Starts everything of the run; what fails to start fails the run
    /// before the agent runs (the proxy's start, which the sandbox does not
    /// wait for, fails it from [`Started::watch`]).
    async fn start(
        run: &Logged<'_>,
        starts: Starts,
        workdirs: &mut Vec<WorkdirChecked>,
    ) -> Result<Started, RunError> {
        let (manifest, options, log) = (run.manifest, run.options, &run.log);
        let mut laps = Laps::start();
        let quarantine = workdir::quarantine_root(&options.home, manifest.name.as_str());
        let sockets = private_dir("constle-sockets-")?;
        // Beside the sockets' directory, not in it: the sandbox's launcher
        // needs a stage whose parents anyone may search (see SandboxSpec).
        let stage = private_dir("constle-stage-")?;
        let private = hidden::private_paths(options);
        let host_id = HostId::allocate_if_privileged()?;
        let mut spec = SandboxSpec {
            command: manifest.sandbox.command.clone(),
            workdir: manifest.sandbox.workdir.clone(),
            env: BTreeMap::new(),
            rootfs: manifest.sandbox.rootfs.clone(),
            stdio: CommandIo::Inherit,
            constle_exe: options.constle_exe.clone(),
            private: hidden::agent_private(&private, manifest),
            stage: stage.path().to_path_buf(),
            cgroup_procs: Vec::new(),
            host_id: host_id.as_ref().map(HostId::get),
            tmpfs: tmpfs_sizes(manifest),
            workdir_inode: None,
            etc_files: BTreeMap::new(),
            home: manifest.sandbox.home.clone(),
            home_inode: None,
            network: None,
        };
        // What the sandbox would mount, before anything starts; the
        // launcher checks it all again on the objects it then mounts.
        spec.check_dirs()
            .map_err(|e| RunError::Sandbox(e.to_string()))?;
        // Next: on cgroup v2, constle may have to move itself into a cgroup
        // of its own, before anything it starts would share its old one.
        let limits = RunLimits::create(manifest)?;
        let (proxy, proxy_door) = EgressPolicy::from_network(&manifest.sandbox.network)
            .map(|policy| Proxy::start(&policy, options, log, None))
            .transpose()?
            .unzip();
        // Squid's start is the slowest of all: it begins at its task's first
        // turn, which is now, not whenever the rest first waits.
        tokio::task::yield_now().await;
        // The host terminal is opened only when someone may have to answer
        // on it.
        let terminal = manifest
            .human_gates
            .is_active()
            .then(constle_human_gate::open_host_tty)
            .flatten();
        let hold = OutputHold::default();
        let spent = spend::open_run_meter(manifest, &options.home).await;
        let meter = SpendMeter::open(manifest, spent.clone(), log);
        let servers = StdioServers::start(
            &stdio::Context {
                manifest,
                options,
                private: &private,
                sockets: sockets.path(),
                quarantine: &quarantine,
                log,
            },
            starts.secrets,
        )
        .await?;
        let mut gates = McpGates::start(
            starts.gates.bridged(&servers)?,
            manifest,
            &options.home,
            log,
            terminal.map(|tty| (tty, hold.clone())),
            meter,
        )?;
        let mut models = match spent {
            Some(shared) => {
                let own = spend::open_llm_meter(manifest, &options.home).await;
                ModelGates::start(starts.models, &ModelLog::new(shared, own, log))?
            }
            None => ModelGates::none(),
        };
        let mut a2a = A2aLink::start(manifest, &options.home, log).await?;
        spec.env = agent::agent_env(manifest, proxy.is_some(), gates.env());
        spec.env.extend(models.env().clone());
        for (name, value) in models.defaults() {
            spec.env.entry(name).or_insert(value);
        }
        if manifest.sandbox.rootfs.is_none() {
            spec.etc_files = models.etc_files().clone();
        }
        spec.env.extend(a2a.as_ref().map(A2aLink::env));
        let doors: Vec<_> = proxy_door
            .into_iter()
            .chain(gates.take_doors())
            .chain(models.take_doors())
            .chain(a2a.as_mut().and_then(A2aLink::take_door))
            .collect();
        let names = proxy.as_ref().map(Proxy::name_service);
        let network = match (doors.is_empty(), names) {
            (true, None) => None,
            (_, names) => Some(Channel::start(sockets.path(), None, doors, names)?),
        };
        spec.network = network.as_ref().map(Channel::spec);
        spec.cgroup_procs = limits.procs_files();
        laps.lap();
        let workdir = workdir::prepare(&spec.workdir, host_id.as_ref(), log, Dir::Agent).await?;
        spec.workdir_inode = Some(workdir.inode());
        let home_quarantine = workdir::quarantine_of(&quarantine, Dir::Home);
        let quarantine = workdir::quarantine_of(&quarantine, Dir::Agent);
        let home = match &spec.home {
            Some(path) => match workdir::prepare(path, host_id.as_ref(), log, Dir::Home).await {
                Ok(home) => Some((home, home_quarantine)),
                Err(err) => {
                    workdirs.push(workdir::finish(workdir, &quarantine, log, Dir::Agent).await?);
                    return Err(err);
                }
            },
            None => None,
        };
        spec.home_inode = home.as_ref().map(|(home, _)| home.inode());
        let timings = Timings {
            workdir: laps.lap(),
            ..Timings::default()
        };
        let agent = match agent::start_sandbox(&spec, &hold) {
            Ok(agent) => agent,
            Err(err) => {
                let checked = finish_dirs(workdir, &quarantine, home, log).await;
                workdirs.extend(checked?);
                return Err(err);
            }
        };
        let launched = network
            .as_ref()
            .map(|network| network.launches().launched(agent.child.id()));
        Ok(Started {
            log: Arc::clone(log),
            agent,
            proxy,
            _network: network,
            launched,
            servers,
            gates,
            models,
            a2a,
            limits,
            wall_clock: wall_clock_deadline(manifest, run.since),
            workdir,
            quarantine,
            home,
            laps,
            timings,
            _dirs: [sockets, stage],
            _host_id: host_id,
        })
    }

    /// Waits for the agent to exit. A signal to constle, a proxy that does
    /// not start or dies, the audit log failing, a gate timing out under
    /// `on_timeout: abort`, a refusal that cannot be recorded, a limit
    /// reached or a checkpoint short of its required quorum ends the run
    /// early.
    async fn watch(
        &mut self,
        stop: &mut StopSignals,
        log: &AuditLog,
        checkpoints: Option<&mut RunCheckpoints>,
    ) -> Result<i32, RunError> {
        let AgentProcess {
            child: agent,
            spec,
            output,
            ..
        } = &mut self.agent;
        let (limits, gates) = (&self.limits, &mut self.gates);
        let (proxy, servers) = (self.proxy.as_mut(), &mut self.servers);
        let result = tokio::select! {
            status = agent.wait() => {
                let status = status.map_err(io("waiting for the agent"))?;
                // A sandbox never set up ran no agent: its status is not
                // the agent's.
                let code = agent::ended(spec, output, status).await;
                // A memory limit ends the agent through the kernel's OOM
                // killer: the run then failed at its limit, whatever the
                // exit code says.
                match limits.reached_now() {
                    Some(hit) => limit_reached(log, &hit).await,
                    None => code,
                }
            }
            hit = limits.reached() => {
                let _ = agent.start_kill();
                limit_reached(log, &hit).await
            }
            ended = wall_clock_reached(self.wall_clock.as_ref(), log) => {
                let _ = agent.start_kill();
                ended
            }
            why = channel::failure_of(self.launched.as_ref()) => {
                let _ = agent.start_kill();
                Err(RunError::Sandbox(why))
            }
            (server, trouble) = proxy_trouble(proxy, servers) => {
                let _ = agent.start_kill();
                proxy_failed(log, server.as_deref(), trouble).await
            }
            stop = gates.stopped() => {
                let _ = agent.start_kill();
                Err(match stop {
                    GateStop::Timeout { server, tool } => RunError::GateTimeout { server, tool },
                    GateStop::Unrecorded { server, what, error } => RunError::GateUnrecorded { server, what, error },
                })
            }
            stop = self.models.stopped() => {
                let _ = agent.start_kill();
                Err(RunError::ModelGateUnrecorded { provider: stop.provider, what: stop.what, error: stop.error })
            }
            stop = unwitnessed(checkpoints, log) => {
                let _ = agent.start_kill();
                Err(stop)
            }
            (name, number) = stop.recv() => {
                record(log, RunInterrupted { signal: name.to_owned() }.into()).await?;
                Ok(128 + number)
            }
        };
        self.timings.sandbox = self.laps.lap();
        result
    }

    /// Stops everything in reverse, checks the work directories (into
    /// `workdirs`, the agent's first, then its kept home), and says how the
    /// agent `ended` and where the time went. The first error wins: the
    /// agent's work directories, then the run, then the proxy, then the
    /// stdio servers.
    async fn stop(
        mut self,
        ended: Result<i32, RunError>,
        workdirs: &mut Vec<WorkdirChecked>,
    ) -> Result<(i32, Timings), RunError> {
        // Whatever ended the run, nothing more leaves the sandbox from here
        // on, even what is still on its way while the sandbox is torn down.
        self.gates.close("the run is ending");
        self.models.close();
        if let Some(proxy) = &self.proxy {
            proxy.close();
        }
        // The agent goes first: Squid logs a tunnel when it closes, so
        // every tunnel must be closed before the proxy stops.
        let AgentProcess {
            mut child,
            output,
            lifeline,
            ..
        } = self.agent;
        let _ = child.start_kill();
        let _ = child.wait().await;
        // Whatever of the sandbox outlived bwrap (it can only while bwrap
        // starts) ends with the lifeline, and so do its ends of the pipes.
        drop(lifeline);
        self.limits.end();
        output.finish(OUTPUT_GRACE).await;
        // A model call is settled once its answer has passed, which may be
        // after the agent exited: its llm_call comes before run_finished.
        self.models.drained(SETTLE_GRACE).await;
        let mut teardown = self.laps.lap();
        let checked = finish_dirs(self.workdir, &self.quarantine, self.home, &self.log).await;
        self.timings.workdir += self.laps.lap();
        let servers_stopped = self.servers.stop(workdirs).await;
        drop(self.gates);
        drop(self.models);
        drop(self.a2a);
        let recorded = match self.proxy {
            Some(proxy) => {
                self.timings.proxy_start = proxy.ready_after();
                proxy.stop().await
            }
            None => Ok(()),
        };
        teardown += self.laps.lap();
        self.timings.teardown = teardown;
        let checked = checked?;
        workdirs.splice(0..0, checked);
        let code = ended?;
        recorded?;
        servers_stopped?;
        Ok((code, self.timings))
    }
}

/// Puts the agent's work directory and its kept home right once the
/// sandbox is gone: both are checked whatever happens to the other, and
/// the work directory's error comes first.
async fn finish_dirs(
    workdir: Workdir,
    quarantine: &std::path::Path,
    home: Option<(Workdir, PathBuf)>,
    log: &AuditLog,
) -> Result<Vec<WorkdirChecked>, RunError> {
    let agent = workdir::finish(workdir, quarantine, log, Dir::Agent).await;
    let home = match home {
        Some((home, quarantine)) => Some(workdir::finish(home, &quarantine, log, Dir::Home).await),
        None => None,
    };
    let mut checked = vec![agent?];
    checked.extend(home.transpose()?);
    Ok(checked)
}

/// How long the end of a run waits for the model calls still being
/// settled; one not settled by then stays charged its whole hold.
const SETTLE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

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

/// Records why a proxy stopped working (one that never started fails the
/// run as it would have before the sandbox started).
async fn proxy_failed(
    log: &AuditLog,
    server: Option<&str>,
    trouble: ProxyTrouble,
) -> Result<i32, RunError> {
    let whose = server.map_or_else(
        || "the proxy".to_owned(),
        |id| format!("the proxy of MCP server {id}"),
    );
    let reason = match trouble {
        ProxyTrouble::NotStarted(err) => return Err(err),
        ProxyTrouble::Died(status) => format!("{whose} exited: {status}"),
        ProxyTrouble::NotRecorded(error) => {
            format!("{whose}'s decisions could not be recorded: {error}")
        }
        ProxyTrouble::NamesFailed(error) => {
            format!("the name service beside {whose} failed: {error}")
        }
    };
    let failed = EgressFailed {
        reason: reason.clone(),
        server: server.map(str::to_owned).into(),
    };
    record(log, failed.into()).await?;
    Err(RunError::EgressDied(reason))
}

/// A checkpoint short of its required quorum, which ends the run.
async fn unwitnessed(checkpoints: Option<&mut RunCheckpoints>, log: &AuditLog) -> RunError {
    match checkpoints {
        Some(checkpoints) => checkpoints.watch(log).await,
        None => std::future::pending().await,
    }
}

async fn limit_reached(log: &AuditLog, hit: &LimitHit) -> Result<i32, RunError> {
    record(log, limit_event(hit, None).into()).await?;
    Err(RunError::LimitReached(hit.to_string()))
}
