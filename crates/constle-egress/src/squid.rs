//! [`Squid`]: the proxy child of one run.

use std::fs::OpenOptions;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::access_log::{NetworkEvent, parse_access_line, unparsed_event};
use crate::config::{
    ACCESS_LOG_FILE, ALLOWED_HOSTS_FILE, CACHE_LOG_FILE, CONF_FILE, HOSTS_FILE, config_path, render,
};
use crate::error::EgressError;
use crate::policy::EgressPolicy;

/// `PATH` for Squid and `squid -k parse`: their environment is cleared.
pub(crate) const CHILD_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// The user Squid runs as when Constle runs as root (Debian's).
pub const SQUID_USER: &str = "proxy";

/// Ports tried before giving up when each turns out busy.
const PORT_ATTEMPTS: u32 = 5;
/// How long start-up may take. Squid needs about 22 ms here.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Between connection probes during start-up.
const PROBE_INTERVAL: Duration = Duration::from_millis(1);
/// Events buffered between the log reader and the consumer.
const EVENT_BUFFER: usize = 1024;
/// How long [`Squid::stop`] waits for the last log lines after the kill.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Squid's standard error, in the run directory.
const STDERR_FILE: &str = "squid.stderr";

static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// A running Squid, listening on `127.0.0.1:<port>`, configured for one
/// [`EgressPolicy`].
///
/// ```no_run
/// # async fn run(policy: constle_egress::EgressPolicy) -> Result<(), constle_egress::EgressError> {
/// let run_dir = std::path::Path::new("/tmp/constle-run-1234"); // mode 0700, made by the caller
/// let mut squid = constle_egress::Squid::start(run_dir, &policy, None).await?;
/// let mut events = squid.take_events().expect("first call");
/// // Point the sandbox's relay at squid.addr(); forward `events` to the audit log
/// // from another task; fail the run if `squid.exited()` resolves first.
/// # let _ = &mut events;
/// squid.stop().await; // every remaining event is delivered, then `events` ends
/// # Ok(()) }
/// ```
///
/// Squid is started as `setpriv [--reuid proxy --regid proxy --clear-groups]
/// --pdeathsig KILL -- squid -n <unique> -N -f <run_dir>/squid.conf`, in its
/// own process group:
///
/// - **Process lifetime.** [`Squid::stop`] and drop kill the process group
///   with SIGKILL (SIGTERM takes Squid about 2 s; it keeps no state worth a
///   clean shutdown). If Constle itself dies, the kernel kills Squid
///   (`PR_SET_PDEATHSIG`). That signal is tied to the **thread** that
///   spawned Squid: call [`Squid::start`] from a thread that lives as long
///   as the run, such as a Tokio runtime worker or the main thread's
///   current-thread runtime, never from `spawn_blocking` (the blocking pool
///   retires idle threads, and Squid would be killed with it).
/// - **User.** As root, Squid is started directly as `proxy` (setpriv changes
///   the user before Squid runs: had Squid switched users itself, the kernel
///   would have cleared the parent-death signal). The run directory is
///   chowned to `proxy` and must be reachable by it. Not as root, Squid runs
///   as the invoking user.
/// - **Environment.** Cleared but for `PATH`: no secret of the host
///   reaches Squid.
/// - **Shared memory.** Squid 5 creates `/dev/shm/<service>-cf__*.shm` even
///   with `-N`; each instance gets a unique service name, and its segments
///   are removed when it stops (and, for instances of dead processes, when
///   the next one starts).
pub struct Squid {
    child: Child,
    pid: Option<Pid>,
    status: Option<ExitStatus>,
    addr: SocketAddr,
    run_dir: PathBuf,
    service: String,
    events: Option<mpsc::Receiver<NetworkEvent>>,
    tailer: Option<JoinHandle<()>>,
    start_latency: Duration,
}

impl std::fmt::Debug for Squid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Squid")
            .field("pid", &self.pid)
            .field("addr", &self.addr)
            .field("run_dir", &self.run_dir)
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

/// Who Squid runs as.
struct RunAs {
    /// `None`: the invoking user (not root).
    user: Option<(nix::unistd::Uid, nix::unistd::Gid)>,
}

impl Squid {
    /// Writes the configuration into `run_dir`, starts Squid, and returns
    /// once it accepts connections on 127.0.0.1.
    ///
    /// `run_dir` is a private directory (mode 0700) the caller created and
    /// removes after [`Squid::stop`]; its path must be plain (letters,
    /// digits, `/ . _ - + , @ =`). As root, its parents must be searchable
    /// by `proxy` (a fresh `tempfile::tempdir()` under /tmp is). It receives
    /// `squid.conf`, `allowed_hosts`, `hosts` (a copy of `hosts_file`),
    /// `access.log` (a FIFO), `cache.log` and `squid.stderr`.
    ///
    /// `hosts_file`, when given, is the only source of names: Squid asks no
    /// DNS server but 127.0.0.1. Tests always give one.
    ///
    /// The port is a free ephemeral one; if Squid finds it taken (another
    /// process bound it in between), start tries another, up to 5 times.
    pub async fn start(
        run_dir: &Path,
        policy: &EgressPolicy,
        hosts_file: Option<&Path>,
    ) -> Result<Squid, EgressError> {
        Squid::start_with_ports(run_dir, policy, hosts_file, &mut free_port, None).await
    }

    /// [`Squid::start`], taking each port to try from `next_port`, and (for
    /// tests that show what each rule is for) passing the configuration
    /// through `edit`.
    pub(crate) async fn start_with_ports(
        run_dir: &Path,
        policy: &EgressPolicy,
        hosts_file: Option<&Path>,
        next_port: &mut (dyn FnMut() -> io::Result<u16> + Send),
        edit: Option<&(dyn Fn(&str) -> String + Sync)>,
    ) -> Result<Squid, EgressError> {
        sweep_stale_shm();
        let run_dir = prepare_run_dir(run_dir)?;
        let run_as = run_as()?;
        if let Some((uid, gid)) = run_as.user {
            check_searchable(&run_dir, uid, gid)?;
            std::os::unix::fs::chown(&run_dir, Some(uid.as_raw()), Some(gid.as_raw()))
                .map_err(|e| EgressError::io("chown", &run_dir, e))?;
        }

        let hosts_copy = match hosts_file {
            Some(src) => {
                let text = std::fs::read(src).map_err(|e| EgressError::io("read", src, e))?;
                let dst = run_dir.join(HOSTS_FILE);
                write_private(&dst, &text, &run_as)?;
                Some(dst)
            }
            None => None,
        };

        let cache_log = run_dir.join(CACHE_LOG_FILE);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port =
                next_port().map_err(|e| EgressError::io("pick a port on", "127.0.0.1", e))?;
            let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let rendered = render(policy, &run_dir, listen, hosts_copy.as_deref())?;
            if !rendered.allowed_hosts.is_empty() {
                write_private(
                    &run_dir.join(ALLOWED_HOSTS_FILE),
                    rendered.allowed_hosts.as_bytes(),
                    &run_as,
                )?;
            }
            let conf = run_dir.join(CONF_FILE);
            let text = match edit {
                Some(edit) => edit(&rendered.squid_conf),
                None => rendered.squid_conf,
            };
            write_private(&conf, text.as_bytes(), &run_as)?;
            let log_pipe = make_fifo(&run_dir.join(ACCESS_LOG_FILE), &run_as)?;
            let log_offset = std::fs::metadata(&cache_log).map_or(0, |m| m.len());

            match spawn_and_wait(&run_dir, &conf, listen, &run_as, log_pipe).await? {
                Started::Ready {
                    child,
                    service,
                    log,
                    early,
                    latency,
                } => {
                    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
                    let tailer = tokio::spawn(tail(log, early, tx));
                    let pid = child
                        .id()
                        .and_then(|id| i32::try_from(id).ok())
                        .map(Pid::from_raw);
                    return Ok(Squid {
                        child,
                        pid,
                        status: None,
                        addr: listen,
                        run_dir,
                        service,
                        events: Some(rx),
                        tailer: Some(tailer),
                        start_latency: latency,
                    });
                }
                Started::Exited { status } => {
                    let new_lines = read_from(&cache_log, log_offset);
                    let stderr = read_from(&run_dir.join(STDERR_FILE), 0);
                    if new_lines.contains("(98) Address already in use") {
                        if attempt < PORT_ATTEMPTS {
                            continue;
                        }
                        return Err(EgressError::PortsBusy {
                            attempts: attempt,
                            cache_log,
                        });
                    }
                    return Err(EgressError::Exited {
                        status,
                        detail: summarize(&format!("{stderr}{new_lines}")),
                        cache_log,
                    });
                }
                Started::TimedOut => {
                    return Err(EgressError::NotReady {
                        addr: listen,
                        waited: READY_TIMEOUT,
                        cache_log,
                    });
                }
            }
        }
    }

    /// Where Squid listens: `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Squid's process id (also its process group), until it is reaped.
    pub fn pid(&self) -> Option<u32> {
        if self.status.is_some() {
            return None;
        }
        self.pid.and_then(|p| u32::try_from(p.as_raw()).ok())
    }

    /// Squid's service name (`squid -n`), unique per instance: it names the
    /// instance's shared-memory segments, `/dev/shm/<name>-*.shm`.
    pub fn service_name(&self) -> &str {
        &self.service
    }

    /// The run directory (absolute).
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// How long Squid took from spawn to accepting a connection.
    pub fn start_latency(&self) -> Duration {
        self.start_latency
    }

    /// The decoded access-log lines, one [`NetworkEvent`] per request, in
    /// the order Squid wrote them (a tunnel is written when it closes).
    /// `Some` on the first call only.
    ///
    /// The start-up readiness probe's line is not among them. A line that
    /// cannot be decoded arrives as a refusal with reason
    /// [`reason::UNPARSED_LOG_LINE`](crate::reason::UNPARSED_LOG_LINE)
    /// and the line in `detail`: nothing is dropped.
    ///
    /// Consume it from its own task. The buffer holds 1024 events, then the
    /// log pipe fills and Squid stops serving until events are read: the
    /// proxy stalls rather than forward traffic whose record is lost. A
    /// dropped receiver discards events. The channel ends after
    /// [`Squid::stop`] has delivered the last line, or when Squid dies.
    pub fn take_events(&mut self) -> Option<mpsc::Receiver<NetworkEvent>> {
        self.events.take()
    }

    /// Resolves when Squid exits, for whatever reason: a run selects on it
    /// to fail closed when the proxy dies. Cancel-safe; resolves again at
    /// once after it has resolved.
    pub async fn exited(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.child.wait().await?;
        self.status = Some(status);
        Ok(status)
    }

    /// ERROR, WARNING and FATAL lines of Squid's own log (`cache.log`), to
    /// say why it died.
    pub fn log_complaints(&self) -> Vec<String> {
        read_from(&self.run_dir.join(CACHE_LOG_FILE), 0)
            .lines()
            .filter(|l| is_complaint(l))
            .map(str::to_owned)
            .collect()
    }

    /// Kills Squid's process group (SIGKILL), reaps it, and delivers the
    /// access-log lines it wrote before dying, then ends the events channel.
    /// Returns when they are delivered, or after 5 s when the events
    /// receiver is not being read (the rest is then delivered as it is).
    ///
    /// A tunnel still open at this point is never logged: Squid writes a
    /// tunnel's line when it closes. Stop the agent first.
    pub async fn stop(mut self) {
        self.kill_group();
        if self.status.is_none()
            && let Ok(status) = self.child.wait().await
        {
            self.status = Some(status);
        }
        if let Some(tailer) = self.tailer.take() {
            // Squid is dead, so the log ends; this only waits longer when
            // the consumer is not reading. Then the reader is left to finish
            // on its own (detached), delivering the rest as it is read.
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, tailer).await;
        }
        remove_shm(&self.service);
    }

    /// SIGKILL to the group, unless the leader was reaped (its id may have
    /// been reused since).
    fn kill_group(&self) {
        if self.status.is_none()
            && let Some(pid) = self.pid
        {
            let _ = killpg(pid, Signal::SIGKILL);
        }
    }
}

impl Drop for Squid {
    fn drop(&mut self) {
        self.kill_group();
        if self.status.is_none() {
            let _ = self.child.start_kill();
        }
        // The log reader (if any) is detached: Squid is being killed, so it
        // reaches the end of the log and delivers what was left.
        drop(self.tailer.take());
        remove_shm(&self.service);
    }
}

#[allow(clippy::large_enum_variant, reason = "one value per start attempt")]
enum Started {
    Ready {
        child: Child,
        service: String,
        /// The access log, positioned after the probe's line.
        log: LogReader,
        /// Lines that came before the probe's (none expected).
        early: Vec<NetworkEvent>,
        latency: Duration,
    },
    Exited {
        status: ExitStatus,
    },
    TimedOut,
}

/// The access-log FIFO, read line by line. A partial line stays in `buf`
/// across cancelled reads.
struct LogReader {
    reader: BufReader<pipe::Receiver>,
    buf: Vec<u8>,
}

enum LogLine {
    Line(String),
    /// Squid closed the log: it is gone.
    End,
}

impl LogReader {
    fn new(pipe: pipe::Receiver) -> LogReader {
        LogReader {
            reader: BufReader::new(pipe),
            buf: Vec::new(),
        }
    }

    /// The next non-empty line. Cancel-safe.
    async fn next(&mut self) -> io::Result<LogLine> {
        loop {
            let n = match self.reader.read_until(b'\n', &mut self.buf).await {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 && self.buf.is_empty() {
                return Ok(LogLine::End);
            }
            let line = String::from_utf8_lossy(&self.buf)
                .trim_end_matches(['\n', '\r'])
                .to_owned();
            self.buf.clear();
            if !line.is_empty() {
                return Ok(LogLine::Line(line));
            }
        }
    }
}

fn decode_line(line: &str) -> NetworkEvent {
    match parse_access_line(line) {
        Ok(event) => event,
        Err(e) => unparsed_event(line, &e),
    }
}

/// Starts Squid and waits until it is known to serve `listen`: a probe
/// connection succeeds, and its line comes through this Squid's access log
/// (so the listener that took the probe was this Squid, not a process that
/// had grabbed the port in between). Returns early when Squid exits.
async fn spawn_and_wait(
    run_dir: &Path,
    conf: &Path,
    listen: SocketAddr,
    run_as: &RunAs,
    log: pipe::Receiver,
) -> Result<Started, EgressError> {
    let stderr_path = run_dir.join(STDERR_FILE);
    remove_if_present(&stderr_path)?;
    let stderr = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&stderr_path)
        .map_err(|e| EgressError::io("create", &stderr_path, e))?;

    let service = format!(
        "constle{}x{}",
        std::process::id(),
        INSTANCE.fetch_add(1, Ordering::Relaxed)
    );
    let setpriv = program("setpriv", &["/usr/bin/setpriv", "/bin/setpriv"]);
    let squid = squid_program();
    let mut cmd = Command::new(&setpriv);
    if let Some((uid, gid)) = run_as.user {
        cmd.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups");
    }
    cmd.args(["--pdeathsig", "KILL", "--"])
        .arg(&squid)
        .args(["-n", &service, "-N", "-f"])
        .arg(conf)
        .env_clear()
        .env("PATH", CHILD_PATH)
        .current_dir(run_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .process_group(0)
        .kill_on_drop(true);
    let spawned_at = Instant::now();
    let deadline = spawned_at + READY_TIMEOUT;
    let mut child = cmd.spawn().map_err(|source| EgressError::Spawn {
        program: setpriv.clone(),
        package: "util-linux",
        source,
    })?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let exited = |status: ExitStatus, service: &str| {
        remove_shm(service);
        Ok(Started::Exited { status })
    };
    let give_up = async |mut child: Child, service: &str| {
        if let Some(pgid) = pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        let _ = child.start_kill();
        let _ = child.wait().await;
        remove_shm(service);
        Ok(Started::TimedOut)
    };
    let wait_err = |e| EgressError::io("wait for", &squid, e);

    // Until it is handed over (or has exited or been given up on, which
    // clean up after themselves), a start that is abandoned (its future
    // dropped: the run no longer needs the proxy) leaves nothing behind.
    let unstarted = Unstarted(Some((pgid, service.clone())));
    let started: Result<Started, EgressError> = async {
        // 1. Something accepts connections on the port.
        let probe_port = loop {
            if let Some(status) = child.try_wait().map_err(wait_err)? {
                return exited(status, &service);
            }
            if let Ok(probe) = tokio::net::TcpStream::connect(listen).await {
                break probe.local_addr().map_or(0, |a| a.port());
            }
            if Instant::now() > deadline {
                return give_up(child, &service).await;
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        };

        // 2. That something is this Squid: the probe (connected, then closed
        // without a request) is logged as `-` from its port.
        let mut log = LogReader::new(log);
        let mut early = Vec::new();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            tokio::select! {
                status = child.wait() => {
                    return exited(status.map_err(wait_err)?, &service);
                }
                line = tokio::time::timeout(remaining, log.next()) => match line {
                    Err(_) => return give_up(child, &service).await,
                    Ok(Err(e)) => {
                        let _ = give_up(child, &service).await;
                        return Err(EgressError::io("read", run_dir.join(ACCESS_LOG_FILE), e));
                    }
                    Ok(Ok(LogLine::End)) => {
                        // Squid closed its log: it is exiting.
                        match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
                            Ok(status) => return exited(status.map_err(wait_err)?, &service),
                            Err(_) => return give_up(child, &service).await,
                        }
                    }
                    Ok(Ok(LogLine::Line(line))) => {
                        let event = decode_line(&line);
                        let is_probe = event.method == "-"
                            && event
                                .client
                                .is_some_and(|c| c.ip().is_loopback() && c.port() == probe_port);
                        if is_probe {
                            return Ok(Started::Ready {
                                child,
                                service,
                                log,
                                early,
                                latency: spawned_at.elapsed(),
                            });
                        }
                        early.push(event);
                    }
                }
            }
        }
    }
    .await;
    unstarted.defuse();
    started
}

/// A Squid spawned and not yet handed over (its group and its service).
/// Dropped before [`Unstarted::defuse`], it does what dropping a [`Squid`]
/// does: kills the group and removes its shared memory.
struct Unstarted(Option<(Option<Pid>, String)>);

impl Unstarted {
    /// The start ended: what it made is handed over or cleaned up.
    fn defuse(mut self) {
        self.0 = None;
    }
}

impl Drop for Unstarted {
    fn drop(&mut self) {
        let Some((pgid, service)) = self.0.take() else {
            return;
        };
        if let Some(pgid) = pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        remove_shm(&service);
    }
}

/// Delivers the access log's lines until Squid closes it.
async fn tail(mut log: LogReader, early: Vec<NetworkEvent>, tx: mpsc::Sender<NetworkEvent>) {
    // A dropped receiver: keep draining so Squid never blocks on the pipe.
    for event in early {
        let _ = tx.send(event).await;
    }
    while let Ok(LogLine::Line(line)) = log.next().await {
        let _ = tx.send(decode_line(&line)).await;
    }
}

/// A free port on 127.0.0.1, as the kernel hands out ephemeral ones.
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The canonical run directory, checked: a directory, not writable by
/// group or others, with a path squid.conf can hold.
fn prepare_run_dir(run_dir: &Path) -> Result<PathBuf, EgressError> {
    let bad = |why: &str| EgressError::RunDir {
        path: run_dir.to_path_buf(),
        why: why.to_owned(),
    };
    let canonical =
        std::fs::canonicalize(run_dir).map_err(|e| bad(&format!("cannot resolve it: {e}")))?;
    let meta = std::fs::metadata(&canonical).map_err(|e| bad(&e.to_string()))?;
    if !meta.is_dir() {
        return Err(bad("not a directory"));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(bad(
            "writable by group or others; create it private (mode 0700)",
        ));
    }
    config_path(&canonical)?;
    Ok(canonical)
}

fn run_as() -> Result<RunAs, EgressError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(RunAs { user: None });
    }
    let user = nix::unistd::User::from_name(SQUID_USER)
        .ok()
        .flatten()
        .ok_or_else(|| EgressError::NoSquidUser(SQUID_USER.to_owned()))?;
    Ok(RunAs {
        user: Some((user.uid, user.gid)),
    })
}

/// Every parent of `dir` must let `uid`/`gid` (no supplementary groups:
/// setpriv clears them) search it.
fn check_searchable(
    dir: &Path,
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
) -> Result<(), EgressError> {
    for parent in dir.ancestors().skip(1) {
        let meta = std::fs::metadata(parent).map_err(|e| EgressError::io("inspect", parent, e))?;
        let mode = meta.permissions().mode();
        let ok = if meta.uid() == uid.as_raw() {
            mode & 0o100 != 0
        } else if meta.gid() == gid.as_raw() {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !ok {
            return Err(EgressError::NotSearchable {
                path: parent.to_path_buf(),
                user: SQUID_USER.to_owned(),
            });
        }
    }
    Ok(())
}

fn remove_if_present(path: &Path) -> Result<(), EgressError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(EgressError::io("remove", path, e)),
    }
}

/// Writes a new file, mode 0600, owned by Squid's user. Whatever was at
/// `path` is unlinked first and the file is created exclusively, so a link
/// planted in the (Squid-owned) directory is never followed.
fn write_private(path: &Path, contents: &[u8], run_as: &RunAs) -> Result<(), EgressError> {
    remove_if_present(path)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| EgressError::io("create", path, e))?;
    file.write_all(contents)
        .map_err(|e| EgressError::io("write", path, e))?;
    if let Some((uid, gid)) = run_as.user {
        std::os::unix::fs::fchown(&file, Some(uid.as_raw()), Some(gid.as_raw()))
            .map_err(|e| EgressError::io("chown", path, e))?;
    }
    Ok(())
}

/// A new FIFO at `path`, owned by Squid's user, opened for reading (before
/// Squid opens it for writing, so Squid's open does not block).
fn make_fifo(path: &Path, run_as: &RunAs) -> Result<pipe::Receiver, EgressError> {
    remove_if_present(path)?;
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| EgressError::io("create the FIFO", path, e.into()))?;
    if let Some((uid, gid)) = run_as.user {
        std::os::unix::fs::lchown(path, Some(uid.as_raw()), Some(gid.as_raw()))
            .map_err(|e| EgressError::io("chown", path, e))?;
    }
    pipe::OpenOptions::new()
        .open_receiver(path)
        .map_err(|e| EgressError::io("open", path, e))
}

/// The text of `path` from byte `offset`, lossily; empty when unreadable.
/// Links are not followed (the directory belongs to Squid's user).
fn read_from(path: &Path, offset: u64) -> String {
    let mut text = Vec::new();
    let Ok(mut file) = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
    else {
        return String::new();
    };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return String::new();
    }
    let _ = file.take(1 << 20).read_to_end(&mut text);
    String::from_utf8_lossy(&text).into_owned()
}

fn is_complaint(line: &str) -> bool {
    ["FATAL", "ERROR", "WARNING", "Warning"]
        .iter()
        .any(|w| line.contains(w))
}

/// The complaint lines of a log, or its last lines when it has none.
fn summarize(log: &str) -> String {
    let complaints: Vec<&str> = log.lines().filter(|l| is_complaint(l)).collect();
    let lines = if complaints.is_empty() {
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(5)..].to_vec()
    } else {
        complaints
    };
    if lines.is_empty() {
        "(nothing)".to_owned()
    } else {
        lines.join(" | ")
    }
}

/// Squid: `/usr/sbin/squid`, else the first `squid` on the children's PATH.
pub(crate) fn squid_program() -> PathBuf {
    program(
        "squid",
        &["/usr/sbin/squid", "/sbin/squid", "/usr/bin/squid"],
    )
}

fn program(name: &str, candidates: &[&str]) -> PathBuf {
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

const SHM_DIR: &str = "/dev/shm";

/// Removes the shared-memory segments of Squid instance `service`.
fn remove_shm(service: &str) {
    let prefix = format!("{service}-");
    let Ok(entries) = std::fs::read_dir(SHM_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix))
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Removes segments left by instances of processes that no longer exist
/// (`constle<pid>x<n>-…`).
fn sweep_stale_shm() {
    let Ok(entries) = std::fs::read_dir(SHM_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("constle"))
            .and_then(|n| n.split_once('x'))
            .map(|(pid, _)| pid)
            .filter(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use constle_manifest::Hostname;

    fn policy() -> EgressPolicy {
        EgressPolicy::restricted([Hostname::new("api.example.test").expect("host")])
    }

    fn hosts(dir: &Path) -> PathBuf {
        let path = dir.join("hosts");
        std::fs::write(&path, "203.0.113.9 api.example.test\n").expect("hosts");
        path
    }

    fn shm_files(service: &str) -> Vec<String> {
        std::fs::read_dir(SHM_DIR)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| n.starts_with(&format!("{service}-")))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The service (`-n`) of the Squid whose configuration is `conf`, while
    /// its process lives.
    fn service_of(conf: &Path) -> Option<String> {
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|entry| {
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
                let conf = conf.as_os_str().as_encoded_bytes();
                if !args.contains(&conf) || !args[0].ends_with(b"squid") {
                    return None;
                }
                let n = args.iter().position(|a| *a == b"-n")?;
                String::from_utf8(args.get(n + 1)?.to_vec()).ok()
            })
    }

    /// A start abandoned after Squid made its shared memory, before it was
    /// ready, leaves neither the process nor the segments.
    #[tokio::test]
    async fn an_abandoned_start_leaves_nothing() {
        if !constle_testkit::require_e2e("abandoned start") {
            return;
        }
        for _attempt in 0..5 {
            let run_dir = tempfile::tempdir().expect("run dir");
            let hosts_dir = tempfile::tempdir().expect("dir");
            let (dir, hosts) = (run_dir.path().to_path_buf(), hosts(hosts_dir.path()));
            let start =
                tokio::spawn(async move { Squid::start(&dir, &policy(), Some(&hosts)).await });
            let conf = run_dir.path().canonicalize().expect("real").join(CONF_FILE);
            let mut service = None;
            for _ in 0..2000 {
                service = service.or_else(|| service_of(&conf));
                if service.as_ref().is_some_and(|s| !shm_files(s).is_empty()) || start.is_finished()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            if start.is_finished() {
                continue; // ready before it could be abandoned: try again
            }
            let service = service.expect("Squid was seen starting");
            start.abort();
            let _ = start.await;
            for _ in 0..200 {
                if service_of(&conf).is_none() && shm_files(&service).is_empty() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!(
                "left behind: process {:?}, segments {:?}",
                service_of(&conf),
                shm_files(&service)
            );
        }
        panic!("Squid was ready every time before the start could be abandoned");
    }

    #[tokio::test]
    async fn a_busy_port_is_retried_with_another() {
        if !constle_testkit::require_e2e("busy port") {
            return;
        }
        let busy = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let busy_port = busy.local_addr().expect("addr").port();
        let mut handed_out = Vec::new();
        let mut ports = || {
            let port = if handed_out.is_empty() {
                busy_port
            } else {
                free_port()?
            };
            handed_out.push(port);
            Ok(port)
        };
        let run_dir = tempfile::tempdir().expect("run dir");
        let hosts_dir = tempfile::tempdir().expect("dir");
        let squid = Squid::start_with_ports(
            run_dir.path(),
            &policy(),
            Some(&hosts(hosts_dir.path())),
            &mut ports,
            None,
        )
        .await
        .expect("start despite the busy port");
        assert_ne!(squid.addr().port(), busy_port);
        assert_eq!(squid.addr().port(), handed_out[1]);
        let log = read_from(&run_dir.path().join(CACHE_LOG_FILE), 0);
        assert!(log.contains("(98) Address already in use"), "{log}");
        let service = squid.service.clone();
        assert_eq!(shm_files(&service).len(), 3, "Squid 5 makes 3 segments");
        squid.stop().await;
        assert!(shm_files(&service).is_empty(), "segments left behind");
        drop(busy);
    }

    /// CONNECT `target` through `squid`; the reason of the event it logs.
    async fn reason_for(
        squid: &Squid,
        events: &mut mpsc::Receiver<NetworkEvent>,
        target: &str,
    ) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(squid.addr())
            .await
            .expect("connect");
        let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("send");
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.expect("answer");
        assert_eq!(&head[9..12], b"403", "{target}");
        drop(stream);
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("event")
            .expect("open");
        event.reason
    }

    /// Starts Squid (restricted to api.example.test) with the lines
    /// containing `drop` removed from its configuration.
    async fn squid_without(drop_line: &str, run_dir: &Path, hosts: &Path) -> Squid {
        let edit = |conf: &str| -> String {
            conf.lines()
                .filter(|l| !l.contains(drop_line))
                .map(|l| format!("{l}\n"))
                .collect()
        };
        Squid::start_with_ports(run_dir, &policy(), Some(hosts), &mut free_port, Some(&edit))
            .await
            .expect("start")
    }

    /// Spellings of IP addresses; none is ever connected to (the policy is
    /// restricted and none is an allowed name).
    const LITERALS: &[&str] = &[
        "0",
        "0.0.0.0",
        "[::]",
        "[fe80::1%25lo]",
        "0x7f.1",
        "127.1",
        "2130706433",
        "017700000001",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "203.0.113.9",
    ];

    #[tokio::test]
    async fn the_literal_name_regex_alone_refuses_every_spelling() {
        if !constle_testkit::require_e2e("literal regex layer") {
            return;
        }
        let run_dir = tempfile::tempdir().expect("run dir");
        let hosts_dir = tempfile::tempdir().expect("dir");
        let mut squid = squid_without(
            "http_access deny constle_ip_literal constle_why_ip_literal",
            run_dir.path(),
            &hosts(hosts_dir.path()),
        )
        .await;
        let mut events = squid.take_events().expect("events");
        for literal in LITERALS {
            let why = reason_for(&squid, &mut events, &format!("{literal}:443")).await;
            assert_eq!(why.as_deref(), Some(crate::reason::IP_LITERAL), "{literal}");
        }
        squid.stop().await;
    }

    #[tokio::test]
    async fn dst_n_alone_misses_the_forms_the_regex_is_for() {
        if !constle_testkit::require_e2e("dst -n layer") {
            return;
        }
        let run_dir = tempfile::tempdir().expect("run dir");
        let hosts_dir = tempfile::tempdir().expect("dir");
        let mut squid = squid_without(
            "http_access deny constle_ip_literal_name",
            run_dir.path(),
            &hosts(hosts_dir.path()),
        )
        .await;
        let mut events = squid.take_events().expect("events");
        let mut missed = Vec::new();
        for literal in LITERALS {
            let why = reason_for(&squid, &mut events, &format!("{literal}:443")).await;
            if why.as_deref() != Some(crate::reason::IP_LITERAL) {
                missed.push(*literal);
            }
        }
        // What squid.md measured: `dst -n` does not see these as addresses
        // (here the allowlist refuses them; in open mode nothing would).
        assert_eq!(missed, ["0", "0.0.0.0", "[::]", "[fe80::1%25lo]"]);
        squid.stop().await;
    }

    #[tokio::test]
    async fn only_busy_ports_is_an_error() {
        if !constle_testkit::require_e2e("busy ports") {
            return;
        }
        let busy = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let busy_port = busy.local_addr().expect("addr").port();
        let mut tries = 0;
        let mut ports = || {
            tries += 1;
            Ok(busy_port)
        };
        let run_dir = tempfile::tempdir().expect("run dir");
        let hosts_dir = tempfile::tempdir().expect("dir");
        let err = Squid::start_with_ports(
            run_dir.path(),
            &policy(),
            Some(&hosts(hosts_dir.path())),
            &mut ports,
            None,
        )
        .await
        .expect_err("every port busy");
        assert!(
            matches!(err, EgressError::PortsBusy { attempts: 5, .. }),
            "{err}"
        );
        assert_eq!(tries, 5);
    }

    #[test]
    fn summary_prefers_complaints() {
        let log = "a\nb\n2026/11/29 21:07:24| FATAL: Unable to open HTTP Socket\nc\n";
        assert_eq!(
            summarize(log),
            "2026/11/29 21:07:24| FATAL: Unable to open HTTP Socket"
        );
        assert_eq!(summarize("1\n2\n3\n4\n5\n6\n"), "2 | 3 | 4 | 5 | 6");
        assert_eq!(summarize(""), "(nothing)");
    }
}
