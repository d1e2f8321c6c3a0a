//! The attack suite: a compromised, clever agent against `constle run`.
//!
//! Each test is one technique, tried through the real binary (or the one
//! `CONSTLE_TEST_BIN` names, to replay the suite against an older build and
//! watch it fail), with the agent's side written as a probe script in
//! `tests/attacks/` that prints one `name: result` line per attempt. The
//! test compares those lines with a table and, wherever the attack would
//! leave a trace outside the sandbox, looks for it from the host: the
//! kernel's settings, set-id bits and device nodes on disk, the agent key's
//! bytes, the Agentfile's and hosts file's contents, the terminal's modes,
//! the processes the test started.
//!
//! Most techniques run twice: with constle started by root (`as_root`) and
//! by an unprivileged user (`as_user`). Run as root, the suite makes that
//! user itself (`constle-attacker`, see [`attacker`]) and starts constle as
//! it with `setpriv`; run as anyone else, the user variants run as the
//! caller and the root ones skip (and fail under `CONSTLE_E2E=require`).
//!
//! No test sends traffic anywhere: every Agentfile has `egress: none`, and
//! the sockets the agent tries are the test's own, on this machine.
//!
//! The tests under "The operator's terminal" drive constle through a real
//! pseudo-terminal (`tests/attacks/pty_harness.py`) and describe the
//! terminal as the operator's alone: they fail for as long as the agent's
//! stdout and stderr are constle's own terminal rather than pipes constle
//! reads and prints escaped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use constle_testkit::{find_tool, require_root, require_tools};

use common::{constle_bin, text};

/// No run of this suite takes this long on any machine; one that does is
/// hung, and fails its test (after being killed).
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The agent's side: the shared helpers and one script per technique,
/// copied into the work directory before each run.
const PROBES: &[(&str, &str)] = &[
    ("probe.py", include_str!("attacks/probe.py")),
    ("host_root.py", include_str!("attacks/host_root.py")),
    ("sysctls.py", include_str!("attacks/sysctls.py")),
    ("core_dumps.py", include_str!("attacks/core_dumps.py")),
    ("setid.py", include_str!("attacks/setid.py")),
    ("devices.py", include_str!("attacks/devices.py")),
    ("namespaces.py", include_str!("attacks/namespaces.py")),
    ("processes.py", include_str!("attacks/processes.py")),
    ("signals.py", include_str!("attacks/signals.py")),
    ("sockets.py", include_str!("attacks/sockets.py")),
    ("secrets.py", include_str!("attacks/secrets.py")),
    ("privileges.py", include_str!("attacks/privileges.py")),
    ("leaks.py", include_str!("attacks/leaks.py")),
    ("terminal.py", include_str!("attacks/terminal.py")),
    ("leftovers.py", include_str!("attacks/leftovers.py")),
];

/// Runs constle under a pseudo-terminal, as an operator's shell would.
const PTY_HARNESS: &str = include_str!("attacks/pty_harness.py");

// ---------------------------------------------------------------------------
// Who runs constle

/// Who starts `constle run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Root,
    /// An unprivileged user: [`attacker`] when the suite runs as root, else
    /// the caller.
    User,
}

fn is_root() -> bool {
    // The tests need no more than whether they are root: `id -u` is 0.
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| text(&cmd_output("id", &["-u"])).trim() == "0")
}

fn cmd_output(program: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    out.stdout
}

/// The unprivileged user that root runs constle as: uid and gid.
struct Attacker {
    uid: u32,
    gid: u32,
}

const ATTACKER: &str = "constle-attacker";

/// [`ATTACKER`], created when missing (tolerating another test process
/// creating it at the same time); `None` when the suite is not root.
fn attacker() -> Option<&'static Attacker> {
    static USER: OnceLock<Attacker> = OnceLock::new();
    if !is_root() {
        return None;
    }
    Some(USER.get_or_init(|| {
        let exists = || {
            Command::new("id")
                .arg(ATTACKER)
                .output()
                .unwrap()
                .status
                .success()
        };
        if !exists() {
            let useradd = find_tool("useradd").expect("useradd");
            let out = Command::new(useradd)
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                ])
                .arg(ATTACKER)
                .output()
                .unwrap();
            // 9: it exists (made by a concurrent test process).
            assert!(
                out.status.success() || out.status.code() == Some(9) || exists(),
                "cannot create {ATTACKER}: {out:?}"
            );
        }
        let id = |flag| {
            text(&cmd_output("id", &[flag, ATTACKER]))
                .trim()
                .parse()
                .unwrap()
        };
        Attacker {
            uid: id("-u"),
            gid: id("-g"),
        }
    }))
}

/// The constle binary where [`ATTACKER`] can run it: a copy in a
/// world-readable directory, since the build may live where that user
/// cannot enter (a CI clone under `/root`). The copy goes into
/// `CARGO_TARGET_TMPDIR` when anyone may enter it, else into `/tmp`; one
/// per test process, and those of processes that are gone are removed.
fn attacker_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let open_to_all = target
            .ancestors()
            .all(|dir| fs::metadata(dir).is_ok_and(|m| m.mode() & 0o001 != 0));
        let base = if open_to_all {
            target
        } else {
            Path::new("/tmp")
        };
        let prefix = "constle-attacks-bin-";
        for entry in fs::read_dir(base).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let gone = name
                .strip_prefix(prefix)
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
            if gone {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        let dir = base.join(format!("{prefix}{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        // A copy, not a hard link: a link would change the original's
        // ctime, which constle_binary_is_read_only watches.
        let bin = dir.join("constle");
        fs::copy(constle_bin(), &bin).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        bin
    })
}

/// Whether the `who` variant of `test` can run here (see
/// [`require_tools`]: a skip, or a failure under `CONSTLE_E2E=require`).
fn ready(test: &str, who: Who) -> bool {
    let tools = ["bwrap", "python3"];
    match who {
        Who::Root => require_root(test, &tools),
        Who::User if is_root() => require_tools(test, &["bwrap", "python3", "setpriv", "useradd"]),
        Who::User => require_tools(test, &tools),
    }
}

/// Ready for a variant that changes the host's kernel settings, as root,
/// whoever then starts constle.
fn ready_as_root(test: &str, who: Who) -> bool {
    require_root(test, &[]) && ready(test, who)
}

/// `mod NAME { fn as_root(); fn as_user(); }`: the two variants of the
/// technique `fn NAME(Who)`, each run when `READY(test, who)` says it can
/// ([`ready`], or [`ready_as_root`] for techniques that need root to set
/// the host up, whoever then runs constle).
macro_rules! as_root_and_user {
    ($ready:ident: $($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn as_root() {
                if super::$ready(stringify!($name), super::Who::Root) {
                    super::$name(super::Who::Root);
                }
            }
            #[test]
            fn as_user() {
                if super::$ready(stringify!($name), super::Who::User) {
                    super::$name(super::Who::User);
                }
            }
        }
    )*};
}

// ---------------------------------------------------------------------------
// A run

/// A run's project and home, apart from each other: `dir/project/` holds the
/// Agentfile and the work directory `work/`, and `CONSTLE_HOME` is
/// `home_dir/home`, so that a work directory such as `..` is refused for
/// what it holds of the project, never because it holds the home.
struct Arena {
    who: Who,
    dir: tempfile::TempDir,
    home_dir: tempfile::TempDir,
}

impl Arena {
    fn new(who: Who) -> Arena {
        let arena = Arena {
            who,
            dir: tempfile::tempdir().unwrap(),
            home_dir: tempfile::tempdir().unwrap(),
        };
        fs::create_dir_all(arena.work()).unwrap();
        // CONSTLE_HOME must be its owner's alone (the key store checks).
        fs::create_dir(arena.home()).unwrap();
        fs::set_permissions(arena.home(), fs::Permissions::from_mode(0o700)).unwrap();
        arena.give(arena.dir.path());
        arena.give(arena.home_dir.path());
        arena
    }

    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.project().join(name)
    }

    fn work(&self) -> PathBuf {
        self.path("work")
    }

    fn home(&self) -> PathBuf {
        self.home_dir.path().join("home")
    }

    fn agentfile(&self) -> PathBuf {
        self.path("agent.yaml")
    }

    /// The unprivileged user's ids, when it is not the caller.
    fn as_attacker(&self) -> Option<&'static Attacker> {
        match self.who {
            Who::User => attacker(),
            Who::Root => None,
        }
    }

    /// Whether `uid` and `gid` are the host ids an agent runs as: when root
    /// starts constle, an id of the run's own from constle's range (no
    /// user of the host, the same number for both), else those of the user
    /// who does.
    fn agent_host_ids_are(&self, uid: u32, gid: u32) -> bool {
        match (self.who, self.as_attacker()) {
            (Who::Root, _) => uid == gid && constle_hostids::RUN_IDS.contains(&uid),
            (Who::User, Some(user)) => (uid, gid) == (user.uid, user.gid),
            (Who::User, None) => {
                let id = |f| text(&cmd_output("id", &[f])).trim().parse().unwrap();
                (uid, gid) == (id("-u"), id("-g"))
            }
        }
    }

    /// Hands `path` and everything below it to the user who runs constle.
    fn give(&self, path: &Path) {
        let Some(user) = self.as_attacker() else {
            return;
        };
        for entry in walk(path) {
            std::os::unix::fs::lchown(&entry, Some(user.uid), Some(user.gid)).unwrap();
        }
    }

    fn write(&self, path: &Path, bytes: impl AsRef<[u8]>) {
        fs::write(path, bytes).unwrap();
        self.give(path);
    }

    /// `constle ARGS`, started by [`Who`], in the project directory.
    fn command(&self, args: &[&OsStr]) -> Command {
        self.command_via(&[], args)
    }

    /// `WRAPPER… constle ARGS` as [`Arena::command`], the wrapper (such as
    /// a shell opening descriptors) run as the same user.
    fn command_via(&self, wrapper: &[&OsStr], args: &[&OsStr]) -> Command {
        let bin = match self.as_attacker() {
            Some(_) => attacker_bin().to_path_buf(),
            None => constle_bin(),
        };
        let mut argv: Vec<&OsStr> = wrapper.to_vec();
        argv.push(bin.as_os_str());
        argv.extend(args);
        let mut cmd = as_user(self.as_attacker(), &argv);
        cmd.env("CONSTLE_HOME", self.home())
            .env("NO_COLOR", "1")
            .current_dir(self.project());
        cmd
    }

    fn constle(&self, args: &[&str]) -> Finished {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        finish(self.command(&args), &format!("constle {args:?}"))
    }

    /// Writes `agent` as the Agentfile and runs it, with `extra` arguments
    /// before the file.
    fn run_with(&self, agent: &Agent, extra: &[&str]) -> Finished {
        let args = self.prepare(agent, extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.constle(&args)
    }

    /// Writes the Agentfile (and the probes, when `agent` is one): the
    /// arguments of `constle` that run it.
    fn prepare(&self, agent: &Agent, extra: &[&str]) -> Vec<String> {
        self.write(&self.agentfile(), agent.yaml());
        if agent.probe {
            self.install_probes();
        }
        let mut args = vec!["run".to_owned()];
        args.extend(extra.iter().map(|a| a.to_string()));
        args.push(self.agentfile().to_str().unwrap().to_owned());
        args
    }

    /// Starts `agent` in the background; see [`Running`].
    fn start(&self, agent: &Agent) -> Running {
        let args = self.prepare(agent, &[]);
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let mut cmd = self.command(&args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().unwrap();
        Running {
            stdout: Some(collect(child.stdout.take())),
            stderr: Some(collect(child.stderr.take())),
            child,
        }
    }

    fn run(&self, agent: &Agent) -> Finished {
        self.run_with(agent, &[])
    }

    /// Copies the probe scripts into the work directory.
    fn install_probes(&self) {
        for (name, body) in PROBES {
            self.write(&self.work().join(name), body);
        }
    }

    /// Makes the agent key (`identity.did` for the Agentfile) and returns it
    /// with what of it must never show up outside `CONSTLE_HOME`.
    fn keygen(&self) -> Secret {
        let out = self.constle(&["keygen", "test-agent"]);
        assert!(out.status.success(), "{out}");
        let pem = fs::read_to_string(self.home().join("keys/agent/test-agent.pem")).unwrap();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(&body)
                .unwrap()
        };
        let seed = &der[der.len() - 32..];
        Secret {
            did: text(&out.stdout).trim().to_owned(),
            needles: vec![
                body.clone().into_bytes(),
                hex(pem.as_bytes()).into_bytes(),
                hex(seed).into_bytes(),
                seed.to_vec(),
            ],
        }
    }
}

/// `ARGV`, run as `user` (through `setpriv`) or as the caller.
fn as_user(user: Option<&Attacker>, argv: &[&OsStr]) -> Command {
    match user {
        Some(user) => {
            let mut cmd = Command::new(find_tool("setpriv").unwrap());
            cmd.arg(format!("--reuid={}", user.uid))
                .arg(format!("--regid={}", user.gid))
                .args(["--clear-groups", "--"])
                .args(argv);
            cmd
        }
        None => {
            let mut cmd = Command::new(argv[0]);
            cmd.args(&argv[1..]);
            cmd
        }
    }
}

/// A run in the background, killed with its process group on drop.
struct Running {
    child: Child,
    stdout: Option<Collected>,
    stderr: Option<Collected>,
}

impl Running {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends constle `signal` and waits for the end of the run.
    #[track_caller]
    fn stop(mut self, signal: &str) -> Finished {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status();
        let (status, hung) = wait_or_kill(&mut self.child, RUN_LIMIT);
        let run = Finished {
            status,
            stdout: self.stdout.take().map(Collected::take).unwrap_or_default(),
            stderr: self.stderr.take().map(Collected::take).unwrap_or_default(),
        };
        assert!(!hung, "SIG{signal} did not end the run\n{run}");
        run
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            kill_group(self.child.id());
            let _ = self.child.wait();
        }
    }
}

/// The agent key and the forms of it an agent could carry out.
struct Secret {
    did: String,
    needles: Vec<Vec<u8>>,
}

impl Secret {
    /// The key is neither in the run's output nor in any file of `dirs`.
    #[track_caller]
    fn assert_unseen(&self, run: &Finished, dirs: &[PathBuf]) {
        for needle in &self.needles {
            for (stream, bytes) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
                assert!(
                    !contains(bytes, needle),
                    "the agent key is in the run's {stream}:\n{run}"
                );
            }
            for file in dirs.iter().flat_map(|d| walk(d)) {
                let meta = fs::symlink_metadata(&file).unwrap();
                if meta.is_file() && meta.len() < 64 << 20 {
                    let bytes = fs::read(&file).unwrap_or_default();
                    assert!(
                        !contains(&bytes, needle),
                        "the agent key is in {}:\n{run}",
                        file.display()
                    );
                }
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `path` and everything below it, links not followed.
fn walk(path: &Path) -> Vec<PathBuf> {
    let mut found = vec![path.to_path_buf()];
    let mut i = 0;
    while i < found.len() {
        let meta = fs::symlink_metadata(&found[i]);
        if meta.is_ok_and(|m| m.is_dir())
            && let Ok(entries) = fs::read_dir(&found[i])
        {
            found.extend(entries.flatten().map(|e| e.path()));
        }
        i += 1;
    }
    found
}

/// An Agentfile, as far as these tests vary it. Every one has
/// `egress: none`: no technique here needs the network.
#[derive(Clone)]
struct Agent {
    command: Vec<String>,
    workdir: String,
    rootfs: Option<String>,
    /// `sandbox.limits`' lines, indented under it.
    limits: Option<String>,
    /// `sandbox.tmpfs`' lines, indented under it.
    tmpfs: Option<String>,
    /// `sandbox.home`.
    home: Option<String>,
    env: Vec<(String, String)>,
    did: Option<String>,
    /// The command is one of [`PROBES`], to be copied in first.
    probe: bool,
}

impl Agent {
    fn new(command: &[&str]) -> Agent {
        Agent {
            command: command.iter().map(|s| s.to_string()).collect(),
            workdir: "./work".into(),
            rootfs: None,
            limits: None,
            tmpfs: None,
            home: None,
            env: Vec::new(),
            did: None,
            probe: false,
        }
    }

    /// `sh -c SCRIPT`.
    fn sh(script: &str) -> Agent {
        Agent::new(&["sh", "-c", script])
    }

    /// `python3 PROBE ARGS…`, one of [`PROBES`].
    fn probe(probe: &str, args: &[&str]) -> Agent {
        assert!(PROBES.iter().any(|(name, _)| *name == probe), "{probe}");
        let mut command = vec!["python3", probe];
        command.extend(args);
        Agent {
            probe: true,
            ..Agent::new(&command)
        }
    }

    fn workdir(mut self, workdir: &str) -> Agent {
        self.workdir = workdir.into();
        self
    }

    fn rootfs(mut self, rootfs: &str) -> Agent {
        self.rootfs = Some(rootfs.into());
        self
    }

    fn limits(mut self, limits: &str) -> Agent {
        self.limits = Some(limits.into());
        self
    }

    fn tmpfs(mut self, tmpfs: &str) -> Agent {
        self.tmpfs = Some(tmpfs.into());
        self
    }

    fn home(mut self, home: &str) -> Agent {
        self.home = Some(home.into());
        self
    }

    fn env(mut self, name: &str, value: impl fmt::Display) -> Agent {
        self.env.push((name.into(), value.to_string()));
        self
    }

    fn identity(mut self, secret: &Secret) -> Agent {
        self.did = Some(secret.did.clone());
        self
    }

    fn yaml(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).unwrap();
        let mut y = String::from("name: attack\n");
        if let Some(did) = &self.did {
            y += &format!("identity:\n  did: {did}\n");
        }
        let command: Vec<String> = self.command.iter().map(|c| q(c)).collect();
        y += &format!("sandbox:\n  command: [{}]\n", command.join(", "));
        y += &format!("  workdir: {}\n", q(&self.workdir));
        if let Some(rootfs) = &self.rootfs {
            y += &format!("  rootfs: {}\n", q(rootfs));
        }
        if let Some(limits) = &self.limits {
            y += &format!("  limits:\n{limits}");
        }
        if let Some(tmpfs) = &self.tmpfs {
            y += &format!("  tmpfs:\n{tmpfs}");
        }
        if let Some(home) = &self.home {
            y += &format!("  home: {}\n", q(home));
        }
        if !self.env.is_empty() {
            y += "  env:\n";
            for (name, value) in &self.env {
                y += &format!("    {name}: {}\n", q(value));
            }
        }
        y + "  network:\n    egress: none\n"
    }
}

/// How a run ended, and what it printed.
struct Finished {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Finished {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }

    fn out(&self) -> String {
        text(&self.stdout)
    }

    fn err(&self) -> String {
        text(&self.stderr)
    }

    /// The probe's `name: result` lines (not its `info` lines).
    fn rows(&self) -> BTreeMap<String, String> {
        self.out()
            .lines()
            .filter(|l| !l.starts_with("info "))
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[track_caller]
    fn assert_code(&self, code: i32) {
        assert_eq!(self.code(), Some(code), "exit status\n{self}");
    }
}

impl fmt::Display for Finished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let signal = self.status.signal().map(|s| format!(" (signal {s})"));
        writeln!(
            f,
            "--- status: {:?}{}",
            self.code(),
            signal.unwrap_or_default()
        )?;
        writeln!(f, "--- stdout:\n{}", self.out())?;
        write!(f, "--- stderr:\n{}", self.err())
    }
}

/// Runs `cmd` to its end, output captured. A run still going after
/// [`RUN_LIMIT`] is killed with its whole process group (the sandbox dies
/// with constle), and the test fails saying so.
#[track_caller]
fn finish(mut cmd: Command, what: &str) -> Finished {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = collect(child.stdout.take());
    let stderr = collect(child.stderr.take());
    let (status, hung) = wait_or_kill(&mut child, RUN_LIMIT);
    let run = Finished {
        status,
        stdout: stdout.take(),
        stderr: stderr.take(),
    };
    assert!(
        !hung,
        "{what}: still running after {RUN_LIMIT:?}, killed\n{run}"
    );
    run
}

/// Waits for `child` up to `limit`; then kills its process group. Whether
/// it had to be killed.
fn wait_or_kill(child: &mut Child, limit: Duration) -> (ExitStatus, bool) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, false);
        }
        if Instant::now() > deadline {
            kill_group(child.id());
            return (child.wait().unwrap(), true);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGKILL to the process group `pgid` (one this test started, as its
/// leader).
fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();
}

/// A pipe read to its end on a thread of its own.
struct Collected(std::sync::mpsc::Receiver<Vec<u8>>);

fn collect(pipe: Option<impl std::io::Read + Send + 'static>) -> Collected {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        let _ = tx.send(bytes);
    });
    Collected(rx)
}

impl Collected {
    /// What was read; a pipe some leftover process still holds open gives
    /// up after ten seconds.
    fn take(self) -> Vec<u8> {
        self.0
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| b"<still open after the run ended>".to_vec())
    }
}

/// Compares a probe's lines with `expected`: every row as expected, and no
/// row the table does not know.
#[track_caller]
fn expect_rows(run: &Finished, expected: &[(&str, &str)]) {
    let seen = run.rows();
    let mut wrong: Vec<String> = expected
        .iter()
        .filter(|(name, want)| seen.get(*name).map(String::as_str) != Some(*want))
        .map(|(name, want)| format!("{name}: expected {want}, got {:?}", seen.get(*name)))
        .collect();
    wrong.extend(
        seen.keys()
            .filter(|name| !expected.iter().any(|(n, _)| n == name))
            .map(|name| format!("{name}: not in the table")),
    );
    assert!(wrong.is_empty(), "{}\n{run}", wrong.join("\n"));
}

/// A process of the test's own on the host (for the agent to aim at),
/// started as whoever runs constle and killed on drop.
struct HostProcess {
    child: Child,
}

impl HostProcess {
    fn start(arena: &Arena) -> HostProcess {
        let argv = ["sleep", "1000"].map(OsStr::new);
        let mut cmd = as_user(arena.as_attacker(), &argv);
        cmd.stdin(Stdio::null()).process_group(0);
        HostProcess {
            child: cmd.spawn().unwrap(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    #[track_caller]
    fn assert_alive(&mut self) {
        assert_eq!(
            self.child.try_wait().unwrap(),
            None,
            "the host process {} was killed",
            self.pid()
        );
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        kill_group(self.child.id());
        let _ = self.child.wait();
    }
}

fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{}-{nanos:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------------------
// The kernel's core dump settings, shared by the whole host

/// `kernel.core_pattern`, held for one test at a time (others read or set
/// it too) and put back as it was when the guard goes, whatever the test
/// or the agent did to it.
struct CorePattern {
    saved: String,
    _lock: MutexGuard<'static, ()>,
}

const CORE_PATTERN: &str = "/proc/sys/kernel/core_pattern";

impl CorePattern {
    fn hold() -> CorePattern {
        static LOCK: Mutex<()> = Mutex::new(());
        let lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        CorePattern {
            saved: CorePattern::current(),
            _lock: lock,
        }
    }

    fn current() -> String {
        fs::read_to_string(CORE_PATTERN).unwrap()
    }

    fn set(&self, pattern: &str) {
        fs::write(CORE_PATTERN, pattern).unwrap();
    }
}

impl Drop for CorePattern {
    fn drop(&mut self) {
        if CorePattern::current() != self.saved {
            let _ = fs::write(CORE_PATTERN, self.saved.trim_end());
        }
    }
}

/// Waits up to `limit` for `path` to appear (a helper the kernel starts
/// runs on its own time): whether it did.
fn appears(path: &Path, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    path.exists()
}

/// Files below `dir` with a set-user-ID or set-group-ID bit, as `lstat`
/// on the host sees them.
fn setid_files(dir: &Path) -> Vec<String> {
    walk(dir)
        .into_iter()
        .filter_map(|p| {
            let meta = fs::symlink_metadata(&p).ok()?;
            let mode = meta.mode();
            (!meta.is_dir() && mode & 0o6000 != 0).then(|| {
                format!(
                    "{} mode {:o} owner {}:{}",
                    p.display(),
                    mode,
                    meta.uid(),
                    meta.gid()
                )
            })
        })
        .collect()
}

/// The files below `dir` that are character or block devices.
fn device_files(dir: &Path) -> Vec<String> {
    walk(dir)
        .into_iter()
        .filter(|p| {
            fs::symlink_metadata(p)
                .is_ok_and(|m| m.file_type().is_char_device() || m.file_type().is_block_device())
        })
        .map(|p| p.display().to_string())
        .collect()
}

/// The files below `dirs` carrying a file capability
/// (`security.capability`), read by Python's `os.listxattr` on the host.
fn file_capabilities(dirs: &[PathBuf]) -> Vec<String> {
    let script = "import os, sys\n\
        for d in sys.argv[1:]:\n\
        \x20   for root, dirs, files in os.walk(d):\n\
        \x20       for n in files:\n\
        \x20           p = os.path.join(root, n)\n\
        \x20           if 'security.capability' in os.listxattr(p, follow_symlinks=False):\n\
        \x20               print(p)\n";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(dirs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    text(&out.stdout).lines().map(str::to_owned).collect()
}

/// A file the kernel writes for a crashing process: `core`, `core.<pid>`.
fn core_files(dirs: &[&Path]) -> Vec<String> {
    dirs.iter()
        .flat_map(|d| walk(d))
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n == "core" || (n.starts_with("core.") && !n.ends_with(".py"))
            })
        })
        .map(|p| p.display().to_string())
        .collect()
}

/// `expected` rows, owned, for tables built at run time.
fn owned_rows(rows: &[(String, String)]) -> Vec<(&str, &str)> {
    rows.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
}

/// An earlier run, in `./work`, leaves the link `work/NAME` → `target`
/// (what a compromised agent can always do): the link as the host sees it.
/// The run signs its log with `secret` when given (a log is signed by one
/// key or none, for good).
#[track_caller]
fn plant_link(arena: &Arena, name: &str, target: &Path, secret: Option<&Secret>) -> PathBuf {
    let mut plant = Agent::sh("ln -s \"$TARGET\" \"$NAME\"")
        .env("TARGET", target.display())
        .env("NAME", name);
    if let Some(secret) = secret {
        plant = plant.identity(secret);
    }
    arena.run(&plant).assert_code(0);
    let link = arena.work().join(name);
    assert_eq!(fs::read_link(&link).unwrap(), target, "the planted link");
    link
}

/// What an agent does first in a directory it should never have been
/// given: say so, then print every file in it.
fn greedy_agent() -> Agent {
    Agent::sh(
        "echo AGENT-RAN; ls -a; find . -maxdepth 4 -type f -exec cat {} + 2>/dev/null; \
         echo pwned > pwned 2>/dev/null; \
         find . -maxdepth 3 -type f \\( -name '*.yaml' -o -name 'hosts*' \\) \
           -exec sh -c 'printf \"egress: open # pwned\\n\" >> \"$1\"' _ {} \\; 2>/dev/null; true",
    )
}

/// The run was refused before the agent started: exit `code`, `said` on
/// stderr, and nothing of the agent's in its output.
#[track_caller]
fn assert_refused(run: &Finished, code: i32, said: &str, what: &str) {
    assert!(
        !run.out().contains("AGENT-RAN"),
        "{what}: the agent ran\n{run}"
    );
    assert_eq!(run.code(), Some(code), "{what}: exit status\n{run}");
    assert!(run.err().contains(said), "{what}: {said:?} not said\n{run}");
}

// ---------------------------------------------------------------------------
// The five attacks on the old sandbox

/// Attack 1. As root, the old sandbox's agent was the host's root with
/// `/proc/sys` writable: it set `kernel.core_pattern` to
/// `|<workdir>/pwn.sh %p`, crashed a child, and the kernel ran `pwn.sh` as
/// root on the host. It also left a set-user-ID shell in its work
/// directory.
fn host_root_through_core_pattern(who: Who) {
    let pattern = CorePattern::hold();
    let arena = Arena::new(who);
    let marker = arena.dir.path().join("pwned");
    let run = arena.run(&Agent::probe(
        "host_root.py",
        &["--marker", marker.to_str().unwrap()],
    ));
    assert_eq!(
        CorePattern::current(),
        pattern.saved,
        "the agent rewrote the host's core_pattern\n{run}"
    );
    assert!(
        !marker.exists(),
        "the kernel ran the agent's script on the host: {:?}\n{run}",
        fs::read_to_string(&marker)
    );
    assert_eq!(setid_files(&arena.work()), Vec::<String>::new(), "{run}");
    run.assert_code(0);
    expect_rows(
        &run,
        &[
            ("write core_pattern", "EROFS"),
            ("crash a child", "no core dump"),
            ("host helper ran", "no"),
            ("leave a set-user-ID shell", "EPERM"),
        ],
    );
}

/// Attack 2. An agent left a link in its work directory pointing into
/// `$CONSTLE_HOME`, and the next run, told to work in `./work/<link>`,
/// was given the agent's keys. Each row: the link's name and where into
/// the home it points.
fn earlier_run_links_into_constle_home(who: Who) {
    let arena = Arena::new(who);
    let secret = arena.keygen();
    for (name, inside) in [
        ("home", ""),
        ("keys", "keys"),
        ("agent-keys", "keys/agent"),
        ("logs", "logs"),
    ] {
        let target = arena.home().join(inside);
        fs::create_dir_all(&target).unwrap();
        arena.give(&target);
        plant_link(&arena, name, &target, Some(&secret));
        let run = arena.run(
            &greedy_agent()
                .workdir(&format!("./work/{name}"))
                .identity(&secret),
        );
        assert_refused(
            &run,
            125,
            "CONSTLE_HOME",
            &format!("work/{name} -> {inside:?}"),
        );
        secret.assert_unseen(&run, &[arena.work()]);
    }
}

/// Attack 3. With the old default `workdir: .`, the agent rewrote its own
/// Agentfile (`egress: open`) for the next run. Each row: a work directory
/// that holds the Agentfile, and how the run refuses it.
fn agent_rewrites_its_agentfile(who: Who) {
    let rows: [(&str, &str, i32, &str); 4] = [
        ("workdir: .", ".", 1, "workdir_holds_agentfile"),
        ("workdir: ..", "..", 1, "workdir_holds_agentfile"),
        (
            "a link to the Agentfile's directory",
            "./work/up",
            1,
            "workdir_holds_agentfile",
        ),
        (
            "a hard link of the Agentfile in the work directory",
            "./work",
            125,
            "hard link",
        ),
    ];
    for (what, workdir, code, said) in rows {
        let arena = Arena::new(who);
        let agent = greedy_agent().workdir(workdir);
        arena.write(&arena.agentfile(), agent.yaml());
        match what {
            w if w.starts_with("a link") => {
                std::os::unix::fs::symlink(arena.project(), arena.work().join("up")).unwrap();
            }
            w if w.starts_with("a hard link") => {
                fs::hard_link(arena.agentfile(), arena.work().join("agent-copy.yaml")).unwrap();
            }
            _ => {}
        }
        let before = fs::read(arena.agentfile()).unwrap();
        let file = arena.agentfile();
        let run = arena.constle(&["run", file.to_str().unwrap()]);
        assert_eq!(
            text(&fs::read(arena.agentfile()).unwrap()),
            text(&before),
            "{what}: the agent rewrote its Agentfile\n{run}"
        );
        assert_refused(&run, code, said, what);
    }
}

/// Attack 3, for the `--hosts-file` the proxy trusts: in the work
/// directory, or hard-linked into it.
fn agent_rewrites_the_hosts_file(who: Who) {
    for inside in [true, false] {
        let arena = Arena::new(who);
        let hosts = match inside {
            true => arena.work().join("hosts"),
            false => arena.path("hosts"),
        };
        arena.write(&hosts, "203.0.113.10 api.example.com\n");
        if !inside {
            fs::hard_link(&hosts, arena.work().join("hosts-copy")).unwrap();
        }
        let before = fs::read(&hosts).unwrap();
        let run = arena.run_with(&greedy_agent(), &["--hosts-file", hosts.to_str().unwrap()]);
        let what = match inside {
            true => "the hosts file in the work directory",
            false => "the hosts file hard-linked into the work directory",
        };
        assert_eq!(
            fs::read(&hosts).unwrap(),
            before,
            "{what}: the agent rewrote it\n{run}"
        );
        assert_refused(&run, 125, "hosts file", what);
    }
}

/// Attack 5. The agent `PTRACE_ATTACH`ed the sandbox's pid 1 and exited:
/// pid 1 stayed stopped and `constle run` never ended.
fn ptrace_pid_1_then_exit(who: Who) {
    let arena = Arena::new(who);
    let run = arena.run(&Agent::probe("processes.py", &["attach"]));
    run.assert_code(0);
    expect_rows(&run, &[("PTRACE_ATTACH pid 1", "EPERM")]);
}

as_root_and_user!(
    ready:
    host_root_through_core_pattern,
    earlier_run_links_into_constle_home,
    agent_rewrites_its_agentfile,
    agent_rewrites_the_hosts_file,
    ptrace_pid_1_then_exit,
);

// ---------------------------------------------------------------------------
// The kernel and the host's privileges

/// Kernel settings a process that ever held privilege could turn into the
/// host's root (`core_pattern`, `modprobe`), crash or slow the machine with
/// (`sysrq`, `panic`, `vm.*`), or weaken it with (`randomize_va_space`,
/// `suid_dumpable`, `binfmt_misc`).
const SYSCTLS: &[&str] = &[
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/kernel/modprobe",
    "/proc/sys/kernel/hostname",
    "/proc/sys/kernel/sysrq",
    "/proc/sys/kernel/panic",
    "/proc/sys/kernel/ns_last_pid",
    "/proc/sys/kernel/randomize_va_space",
    "/proc/sys/fs/suid_dumpable",
    "/proc/sys/fs/binfmt_misc/register",
    "/proc/sys/vm/drop_caches",
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/vm/max_map_count",
    "/proc/sys/vm/mmap_min_addr",
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sysrq-trigger",
];

/// Every setting in [`SYSCTLS`] is read-only inside (or absent where the
/// host lacks it), and no file of `/proc`'s kernel directories opens for
/// writing. The probe only opens, never writes.
fn sysctls(who: Who) {
    let arena = Arena::new(who);
    let run = arena.run(&Agent::probe("sysctls.py", SYSCTLS));
    run.assert_code(0);
    let mut expected: Vec<(String, String)> = SYSCTLS
        .iter()
        .map(|p| {
            let want = if Path::new(p).exists() {
                "EROFS"
            } else {
                "absent"
            };
            (format!("open {p} for writing"), want.to_owned())
        })
        .collect();
    expected.push(("files of /proc open for writing".into(), "none".into()));
    expect_rows(&run, &owned_rows(&expected));
}

/// A crashing agent, under the host's own `core_pattern`: RLIMIT_CORE is 0
/// for good inside, and no core file lands anywhere on the host.
fn core_dumps(who: Who) {
    // Held so that no other test changes the pattern meanwhile.
    let _pattern = CorePattern::hold();
    let arena = Arena::new(who);
    let run = arena.run(&Agent::probe("core_dumps.py", &["--name", "cnstl-crash"]));
    let cores = core_files(&[arena.dir.path(), arena.home_dir.path()]);
    assert_eq!(cores, Vec::<String>::new(), "core files on the host\n{run}");
    run.assert_code(0);
    expect_rows(
        &run,
        &[
            ("RLIMIT_CORE", "0,0"),
            ("raise RLIMIT_CORE to unlimited", "EPERM"),
            ("raise the soft limit to the hard one", "0,0"),
            ("crash in the work directory", "no core dump"),
            ("crash in /tmp", "no core dump"),
            ("core files inside", "none"),
        ],
    );
}

/// A host whose `core_pattern` pipes cores to a handler (systemd-coredump,
/// apport): the kernel starts the handler, as root on the host, for the
/// agent's crash too, whatever RLIMIT_CORE says (limits do not apply to
/// pipes). What the sandbox can and does make sure of is what the handler
/// is told: the limit is 0 (keep nothing) and the crash is no root's.
fn core_handler(who: Who) {
    let pattern = CorePattern::hold();
    let arena = Arena::new(who);
    let handler = arena.dir.path().join("core-handler.sh");
    let record = arena.dir.path().join("handled");
    fs::write(
        &handler,
        format!(
            "#!/bin/sh\nbytes=$(wc -c)\necho \"$1 $2 $3 $4 $bytes\" >> {}\n",
            record.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&handler, fs::Permissions::from_mode(0o755)).unwrap();
    // %e the crashing process's name, %u and %g its host ids, %c its limit.
    pattern.set(&format!("|{} %e %u %g %c", handler.display()));
    let name = format!("cnstl{:08x}", std::process::id() ^ 0x5eed);
    let run = arena.run(&Agent::probe("core_dumps.py", &["--name", &name]));
    // The handler runs on the kernel's time, after the crash.
    let deadline = Instant::now() + Duration::from_secs(20);
    let handled = || {
        fs::read_to_string(&record)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(&name))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    while handled().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(pattern);
    for line in handled() {
        let fields: Vec<&str> = line.split(' ').collect();
        let id = |i: usize| fields[i].parse().unwrap();
        assert!(
            arena.agent_host_ids_are(id(1), id(2)) && fields[3] == "0",
            "the host's core handler was told: {line}\n{run}"
        );
    }
    run.assert_code(0);
    expect_rows(
        &run,
        &[
            ("RLIMIT_CORE", "0,0"),
            ("raise RLIMIT_CORE to unlimited", "EPERM"),
            ("raise the soft limit to the hard one", "0,0"),
            // The kernel reports the core as dumped: into the pipe.
            ("crash in the work directory", "core dumped"),
            ("crash in /tmp", "core dumped"),
            ("core files inside", "none"),
        ],
    );
}

/// Every way of leaving a set-user-ID or set-group-ID file (or a file
/// capability) in the work directory fails, and `lstat` on the host finds
/// none after the run.
fn setid_files_for_the_host(who: Who) {
    let arena = Arena::new(who);
    let run = arena.run(&Agent::probe("setid.py", &[]));
    assert_eq!(
        setid_files(&arena.work()),
        Vec::<String>::new(),
        "set-id files on the host\n{run}"
    );
    assert_eq!(
        file_capabilities(&[arena.work()]),
        Vec::<String>::new(),
        "file capabilities on the host\n{run}"
    );
    run.assert_code(0);
    let host_setuid = ["/usr/bin/su", "/usr/bin/passwd", "/bin/su"]
        .iter()
        .any(|p| fs::metadata(p).is_ok_and(|m| m.mode() & 0o4000 != 0));
    let on_host = |name: &str| {
        let present = [format!("/usr/bin/{name}"), format!("/bin/{name}")]
            .iter()
            .any(|p| Path::new(p).exists());
        if present { "EXDEV" } else { "absent" }
    };
    expect_rows(
        &run,
        &[
            ("chmod u+s", "EPERM"),
            ("chmod g+s", "EPERM"),
            ("chmod(1) 4755", "EPERM"),
            ("open O_CREAT 04755", "EPERM"),
            ("open O_CREAT 02755", "EPERM"),
            ("open O_TMPFILE 02755, then link", "EPERM"),
            ("mknod regular 04755", "EPERM"),
            ("install -m 4755", "EPERM"),
            // cp retries without the bits it may not set.
            (
                "cp -p of a set-user-ID binary",
                if host_setuid {
                    "copied without set-id bits"
                } else {
                    "absent"
                },
            ),
            ("tar -xp of a set-user-ID entry", "EPERM"),
            ("hard link to su", on_host("su")),
            ("hard link to passwd", on_host("passwd")),
            ("file capability CAP_SETUID", "EPERM"),
            ("set-group-ID directory", "EPERM"),
            ("set-id files left", "none"),
        ],
    );
}

/// No device node can be made, none of the host's dangerous ones is there,
/// and the host finds no device node in the work directory afterwards.
fn device_nodes(who: Who) {
    let arena = Arena::new(who);
    let run = arena.run(&Agent::probe("devices.py", &[]));
    assert_eq!(
        device_files(&arena.work()),
        Vec::<String>::new(),
        "device nodes on the host\n{run}"
    );
    run.assert_code(0);
    let mut expected: Vec<(String, String)> = [
        ("mknod char 1:1 (/dev/mem)", "EPERM"),
        ("mknod char 1:11 (/dev/kmsg)", "EPERM"),
        ("mknod block 8:0 (/dev/sda)", "EPERM"),
        ("mknod block 254:0 (/dev/vda)", "EPERM"),
        ("mknod fifo", "OK"),
        ("open /dev/tty", "ENXIO"),
        ("open /proc/kmsg", "EACCES"),
        ("device nodes left", "none"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    for dev in [
        "mem", "kmem", "port", "kmsg", "sda", "vda", "nvme0n1", "console", "tty0", "vsock", "fuse",
        "net/tun",
    ] {
        expected.push((format!("open /dev/{dev}"), "ENOENT".into()));
    }
    // Covered with an empty file where the host has it.
    let kcore = if Path::new("/proc/kcore").exists() {
        "empty"
    } else {
        "absent"
    };
    expected.push(("read /proc/kcore".into(), kcore.into()));
    expect_rows(&run, &owned_rows(&expected));
}

/// New namespaces (the way back to capabilities) and mounts, by the
/// system call, `unshare(1)`, `mount(8)` and a nested bubblewrap.
fn namespaces_and_mounts(who: Who) {
    let arena = Arena::new(who);
    let run = arena.run(&Agent::probe("namespaces.py", &[]));
    run.assert_code(0);
    let mut expected: Vec<(String, String)> = Vec::new();
    for flag in ["-U", "-r", "-m", "-n", "-p -f", "-i", "-u", "-C"] {
        expected.push((format!("unshare(1) {flag}"), "EPERM".into()));
    }
    for ns in [
        "CLONE_NEWUSER",
        "CLONE_NEWNS",
        "CLONE_NEWNET",
        "CLONE_NEWPID",
    ] {
        expected.push((format!("unshare {ns}"), "EPERM".into()));
        expected.push((format!("clone {ns}"), "EPERM".into()));
    }
    for (row, want) in [
        ("os.unshare CLONE_NEWUSER", "absent"),
        ("clone3", "ENOSYS"),
        ("setns into pid 1's mount namespace", "EACCES"),
        ("setns into its own user namespace", "EPERM"),
        ("mount tmpfs", "EPERM"),
        ("remount / read-write", "EPERM"),
        ("bind /proc/sys writable", "EPERM"),
        ("chroot", "EPERM"),
        ("pivot_root", "EPERM"),
        ("bwrap inside", "EPERM"),
    ] {
        expected.push((row.into(), want.into()));
    }
    expect_rows(&run, &owned_rows(&expected));
}

/// Pid 1 (constle's init) and the agent's own child, traced or read: the
/// filter refuses tracing, init is not dumpable, and signals to it from
/// inside are dropped.
fn ptrace_and_process_memory(who: Who) {
    let arena = Arena::new(who);
    let run = arena.run(&Agent::probe("processes.py", &["all"]));
    run.assert_code(0);
    expect_rows(
        &run,
        &[
            ("PTRACE_ATTACH pid 1", "EPERM"),
            ("PTRACE_SEIZE pid 1", "EPERM"),
            ("PTRACE_ATTACH its own child", "EPERM"),
            ("PTRACE_TRACEME", "EPERM"),
            ("process_vm_readv pid 1", "EPERM"),
            ("open /proc/1/mem", "EACCES"),
            ("read /proc/1/environ", "EACCES"),
            ("list /proc/1/fd", "EACCES"),
            ("readlink /proc/1/exe", "EACCES"),
            ("list /proc/1/root", "EACCES"),
            ("open /proc/1/ns/user", "EACCES"),
            ("pidfd_getfd from pid 1", "EPERM"),
            // Sent, and dropped: pid 1 handles neither.
            ("SIGSTOP to pid 1", "OK"),
            ("SIGKILL to pid 1", "OK"),
            ("pid 1 state", "running"),
        ],
    );
}

/// Signals to host processes: a process of the test's own, started as the
/// user who runs constle, and the test itself. None is visible, none can be
/// signalled, and the host process survives the run.
fn signals_to_host_processes(who: Who) {
    let arena = Arena::new(who);
    let mut host = HostProcess::start(&arena);
    let run = arena.run(&Agent::probe(
        "signals.py",
        &[
            "--host-pid",
            &host.pid().to_string(),
            "--test-pid",
            &std::process::id().to_string(),
        ],
    ));
    host.assert_alive();
    run.assert_code(0);
    expect_rows(
        &run,
        &[
            ("/proc of the host process", "no"),
            ("/proc of the test", "no"),
            ("kill -9 the host process", "ESRCH"),
            ("kill -9 the host process's group", "ESRCH"),
            ("kill -9 the test", "ESRCH"),
            ("kill -HUP the test", "ESRCH"),
            ("pidfd_open the host process", "ESRCH"),
            ("kill -9 -1", "killed its own child"),
            ("pids above 1000", "none"),
        ],
    );
}

/// The uid and gid the agent and its init run as, read on the host from
/// `/proc/<pid>/status`, `uid_map` and `gid_map` while the agent sleeps:
/// never 0, never the invoking user when that is root; no capability, no
/// new privileges, the seccomp filter on.
fn ids_seen_from_the_host(who: Who) {
    let arena = Arena::new(who);
    let marker = unique("constle-attack-ids");
    let running = arena.start(&Agent::new(&[
        "python3",
        "-c",
        "import time; open('ready', 'w').close(); time.sleep(1000)",
        &marker,
    ]));
    assert!(
        appears(&arena.work().join("ready"), RUN_LIMIT),
        "the agent did not start"
    );
    let inside = sandboxed_processes(&marker);
    assert!(inside.len() >= 2, "init and agent not found: {inside:?}");
    let mut seen = BTreeSet::new();
    for pid in &inside {
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let status = fs::read_to_string(proc.join("status")).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .unwrap_or("")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        let first = |name: &str| -> u32 { field(name).split(' ').next().unwrap().parse().unwrap() };
        let (uid, gid) = (first("Uid"), first("Gid"));
        assert!(arena.agent_host_ids_are(uid, gid), "pid {pid}:\n{status}");
        seen.insert(uid);
        let all = |id: u32| [id; 4].map(|i| i.to_string()).join(" ");
        assert_eq!(field("Uid"), all(uid), "pid {pid}:\n{status}");
        assert_eq!(field("Gid"), all(gid), "pid {pid}:\n{status}");
        for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(field(cap), "0000000000000000", "pid {pid} {cap}:\n{status}");
        }
        assert_eq!(field("NoNewPrivs"), "1", "pid {pid}:\n{status}");
        assert_eq!(field("Seccomp"), "2", "pid {pid}:\n{status}");
        for (map, id) in [("uid_map", uid), ("gid_map", gid)] {
            let lines = fs::read_to_string(proc.join(map)).unwrap();
            for line in lines.lines() {
                let outside: Vec<u32> = line
                    .split_whitespace()
                    .map(|f| f.parse().unwrap())
                    .collect();
                assert_eq!(
                    (outside[1], outside[2]),
                    (id, 1),
                    "pid {pid} {map}: only the agent's own id, once: {lines}"
                );
            }
        }
    }
    assert_eq!(seen.len(), 1, "one sandbox, one host id: {seen:?}");
    running.stop("TERM").assert_code(143);
}

/// Host pids of the processes inside a sandbox whose command line holds
/// `marker`: those in a nested pid namespace (two `NSpid` entries or more).
fn sandboxed_processes(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let status = fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let nested = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .is_some_and(|ids| ids.split_whitespace().count() >= 2);
        if nested && contains(&cmdline, marker.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// The supplementary groups the agent holds, as it sees them: none when
/// root starts constle (the launcher clears them, and the suite's user runs
/// constle with none); started by a user, that user's own, which no
/// unprivileged process can drop: its gid appears as the agent's 1000,
/// every other as the overflow gid 65534 (still the user's groups to the
/// kernel's permission checks, as docs/sandbox.md says).
fn groups_inside(who: Who) -> String {
    if who == Who::Root || is_root() {
        return String::new();
    }
    let own = text(&cmd_output("id", &["-g"])).trim().to_owned();
    let host = cmd_output("python3", &["-c", "import os; print(*os.getgroups())"]);
    text(&host)
        .split_whitespace()
        .map(|gid| if gid == own { "1000" } else { "65534" })
        .collect::<Vec<_>>()
        .join(" ")
}

/// From inside: an unprivileged uid, every capability dropped,
/// no_new_privs, the filter on, and no way to become root (`setuid`, an
/// ambient capability, `su`).
fn capabilities_and_no_new_privs(who: Who) {
    let arena = Arena::new(who);
    let run = arena.run(&Agent::probe("privileges.py", &[]));
    run.assert_code(0);
    let zero = "0000000000000000";
    expect_rows(
        &run,
        &[
            ("uid", "1000 1000 1000"),
            ("gid", "1000 1000 1000"),
            ("groups", &groups_inside(who)),
            ("CapInh", zero),
            ("CapPrm", zero),
            ("CapEff", zero),
            ("CapBnd", zero),
            ("CapAmb", zero),
            ("NoNewPrivs", "1"),
            ("Seccomp", "2"),
            // Root is no id of the agent's namespace at all.
            ("setuid 0", "EINVAL"),
            ("setgid 0", "EINVAL"),
            ("setgroups 0", "EPERM"),
            ("raise an ambient capability", "EPERM"),
            ("su", "exit 1"),
            ("sudo", "absent"),
        ],
    );
}

/// A fork bomb and a memory hog under declared limits: each is stopped at
/// its limit, recorded, and the run ends (125) with nothing left running;
/// or, where this user cannot have cgroups (no delegation, a hybrid
/// machine), the run is refused before the agent starts, never run with
/// the limit ignored.
fn fork_bomb_and_memory_hog_against_limits(who: Who) {
    let marker = unique("cnstl-bomb");
    let attacks = [
        (
            "    pids: 32\n",
            format!(
                "touch started; i=0; while [ $i -lt 300 ]; do sh -c 'sleep 20' {marker} & i=$((i+1)); done; wait"
            ),
            "the process limit (32 processes and threads) was reached",
        ),
        (
            "    memory: 48m\n",
            "touch started; python3 -c 'x = bytearray(400 << 20); print(\"survived\")'".to_owned(),
            "the memory limit (48 MiB) was reached",
        ),
        // Memory no process owns counts too: /tmp (bounded at 1 GiB) filled
        // with 400 MiB under a 48 MiB limit.
        (
            "    memory: 48m\n",
            "touch started; head -c 400m /dev/zero > /tmp/fill; echo survived".to_owned(),
            "the memory limit (48 MiB) was reached",
        ),
    ];
    for (limits, script, reached) in attacks {
        let arena = Arena::new(who);
        let run = arena.run(&Agent::sh(&script).limits(limits));
        let started = arena.work().join("started").exists();
        run.assert_code(125);
        if started {
            assert!(run.err().contains(reached), "{run}");
            assert!(!run.out().contains("survived"), "{run}");
        } else {
            assert!(
                run.err().contains("cannot enforce"),
                "refused without saying why\n{run}"
            );
            assert!(who == Who::User, "root could not enforce a limit\n{run}");
        }
        assert!(
            sandboxed_processes(&marker).is_empty(),
            "the bomb outlived the run"
        );
    }
}

as_root_and_user!(
    ready:
    fork_bomb_and_memory_hog_against_limits,
    sysctls,
    core_dumps,
    setid_files_for_the_host,
    device_nodes,
    namespaces_and_mounts,
    ptrace_and_process_memory,
    signals_to_host_processes,
    ids_seen_from_the_host,
    capabilities_and_no_new_privs,
);

as_root_and_user!(ready_as_root: core_handler);

// ---------------------------------------------------------------------------
// What the host trusts: the home, the Agentfile, its own directories

/// Links an earlier run planted in its work directory, for a next run
/// told to work in (or use as its rootfs) `./work/<link>`: each refused
/// before anything starts. (Links into `$CONSTLE_HOME` as the work
/// directory are [`earlier_run_links_into_constle_home`].)
fn links_planted_by_an_earlier_run(who: Who) {
    let arena = Arena::new(who);
    let secret = arena.keygen();
    let keys = arena.home().join("keys");
    let rows: [(&str, &Path, bool, i32, &str); 6] = [
        (
            "work: a link to the Agentfile's directory",
            &arena.project(),
            false,
            1,
            "workdir_holds_agentfile",
        ),
        (
            "work: a link to /",
            Path::new("/"),
            false,
            1,
            "workdir_holds_agentfile",
        ),
        (
            "work: a link to /etc",
            Path::new("/etc"),
            false,
            125,
            "system directory",
        ),
        (
            "rootfs: a link to CONSTLE_HOME",
            &arena.home(),
            true,
            125,
            "CONSTLE_HOME",
        ),
        (
            "rootfs: a link into CONSTLE_HOME",
            &keys,
            true,
            125,
            "CONSTLE_HOME",
        ),
        (
            "rootfs: a link to the Agentfile's directory",
            &arena.project(),
            true,
            1,
            "rootfs_holds_agentfile",
        ),
    ];
    for (i, (what, target, rootfs, code, said)) in rows.into_iter().enumerate() {
        let name = format!("out{i}");
        plant_link(&arena, &name, target, Some(&secret));
        let inside = format!("./work/{name}");
        let agent = match rootfs {
            true => greedy_agent().rootfs(&inside),
            false => greedy_agent().workdir(&inside),
        };
        let run = arena.run(&agent.identity(&secret));
        assert_refused(&run, code, said, what);
        secret.assert_unseen(&run, &[arena.work()]);
    }
}

/// A host directory the agent must never reach, for the next test: as
/// root, one under `/etc` (as `/etc/cron.d` is); otherwise one of the
/// user's own outside the project (as `~/.config/autostart` is). Removed
/// on drop.
struct TrustedDir(PathBuf);

impl TrustedDir {
    fn new(arena: &Arena) -> TrustedDir {
        let path = match arena.who {
            Who::Root => PathBuf::from(format!("/etc/{}", unique("constle-attack"))),
            Who::User => arena.dir.path().join("trusted"),
        };
        fs::create_dir(&path).unwrap();
        arena.give(&path);
        let dir = TrustedDir(path);
        arena.write(&dir.0.join("secret"), "trusted-secret-5e1f\n");
        dir
    }
}

impl Drop for TrustedDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// An earlier run leaves `work/out` pointing at a directory the host
/// trusts that is neither `$CONSTLE_HOME` nor the Agentfile's (here a
/// stand-in for `/etc/cron.d`, `/root/.ssh`, `~/.config/autostart`); the
/// next run is told to work in `./work/out`. Nothing may let the agent
/// read or write there: the work directory must not lead through a link
/// an agent could have planted.
fn earlier_run_links_to_a_host_directory(who: Who) {
    let arena = Arena::new(who);
    let trusted = TrustedDir::new(&arena);
    plant_link(&arena, "out", &trusted.0, None);
    let run = arena.run(&greedy_agent().workdir("./work/out"));
    let written: Vec<String> = fs::read_dir(&trusted.0)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "secret")
        .collect();
    assert!(
        written.is_empty(),
        "the agent wrote {written:?} into {}, a host directory outside its work directory, \
         through the link an earlier run planted\n{run}",
        trusted.0.display()
    );
    assert!(
        !run.out().contains("trusted-secret-5e1f"),
        "the agent read {} through the link an earlier run planted\n{run}",
        trusted.0.join("secret").display()
    );
    assert!(!run.out().contains("AGENT-RAN"), "the agent ran\n{run}");
}

/// A host thread flips `work` between a real directory and a link to
/// `$CONSTLE_HOME` while runs start one after another: whatever the
/// timing, no run sees the home (the directory is checked and mounted as
/// the same open descriptor). Runs are refused or see the real directory.
fn workdir_swapped_while_runs_start(who: Who) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    const RUNS: usize = 30;
    let arena = Arena::new(who);
    let secret = arena.keygen();
    let agent = Agent::sh(
        "echo AGENT-RAN; ls -a; find . -maxdepth 4 -type f -exec cat {} + 2>/dev/null; true",
    )
    .identity(&secret);
    let args = arena.prepare(&agent, &[]);
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (work, parked, home) = (arena.work(), arena.path("work.real"), arena.home());
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                fs::rename(&work, &parked).unwrap();
                std::os::unix::fs::symlink(&home, &work).unwrap();
                std::thread::sleep(Duration::from_millis(1));
                fs::remove_file(&work).unwrap();
                fs::rename(&parked, &work).unwrap();
                std::thread::sleep(Duration::from_millis(3));
                flips += 1;
            }
            flips
        })
    };
    let mut ran = 0;
    let mut seen = Vec::new();
    for _ in 0..RUNS {
        let run = finish(arena.command(&args), "a run while work flips");
        let listed_home = run.out().lines().any(|l| l == "keys" || l == "logs");
        if listed_home || secret.needles.iter().any(|n| contains(&run.stdout, n)) {
            seen.push(run.to_string());
        }
        ran += usize::from(run.out().contains("AGENT-RAN"));
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(
        seen.is_empty(),
        "{} of {RUNS} runs showed CONSTLE_HOME to the agent; the first:\n{}",
        seen.len(),
        seen[0]
    );
    secret.assert_unseen(
        &Finished {
            status: ExitStatus::from_raw(0),
            stdout: Vec::new(),
            stderr: Vec::new(),
        },
        &[arena.work()],
    );
    // Else the race was never on: every run refused.
    assert!(ran > 0, "no run of {RUNS} started ({flips} flips)");
}

/// A file the test expects nobody to write, removed on drop.
struct Marker(PathBuf);

impl Drop for Marker {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// An earlier run leaves an executable `bwrap` in its work directory, and
/// the operator's `PATH` leads there (a project's `bin/` on `PATH`, or
/// `~/.local/bin` reached through the link of
/// [`earlier_run_links_to_a_host_directory`]). The next run must not run
/// it: it would run on the host, outside any sandbox, as the agent's host
/// uid (the operator's own, when constle runs unprivileged), with the
/// host's network and files; this one writes a marker where anyone may,
/// then runs the real bwrap so that the run looks as usual.
fn bwrap_planted_on_the_operators_path(who: Who) {
    let arena = Arena::new(who);
    let marker = Marker(PathBuf::from(format!(
        "/tmp/{}-bwrap-ran",
        unique("constle-attack")
    )));
    let plant = Agent::sh(
        "mkdir -p bin && printf '#!/bin/sh\\nid > %s\\nexec /usr/bin/bwrap \"$@\"\\n' \"$MARKER\" \
         > bin/bwrap && chmod 755 bin/bwrap",
    )
    .env("MARKER", marker.0.display());
    arena.run(&plant).assert_code(0);
    assert!(
        arena.work().join("bin/bwrap").is_file(),
        "the planted bwrap"
    );
    let args = arena.prepare(&Agent::new(&["true"]), &[]);
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let mut cmd = arena.command(&args);
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env(
        "PATH",
        format!("{}:{path}", arena.work().join("bin").display()),
    );
    let run = finish(cmd, "a run with the work directory's bin on PATH");
    assert!(
        !marker.0.exists(),
        "the host ran the agent's bwrap, outside the sandbox: {}\n{run}",
        fs::read_to_string(&marker.0).unwrap_or_default().trim()
    );
}

as_root_and_user!(
    ready:
    links_planted_by_an_earlier_run,
    earlier_run_links_to_a_host_directory,
    workdir_swapped_while_runs_start,
    bwrap_planted_on_the_operators_path,
);

// ---------------------------------------------------------------------------
// Sockets

/// Socket files the test made on the host, removed on drop.
struct SocketFiles(Vec<PathBuf>);

impl Drop for SocketFiles {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = fs::remove_file(path);
        }
    }
}

/// Host Unix sockets the agent should not reach: an abstract one
/// (`@constle-attack-…`, which has no permissions at all: only the network
/// namespace keeps it apart), ones on paths under `/tmp` and `/run`, open
/// to everyone, and the well-known sockets of a host. None connects, and
/// none of the test's listeners has a connection waiting afterwards.
fn host_unix_sockets(who: Who) {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let arena = Arena::new(who);
    let name = unique("constle-attack");
    let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let mut listeners = vec![(
        "the abstract socket".to_owned(),
        UnixListener::bind_addr(&address).unwrap(),
    )];
    let mut paths = vec![PathBuf::from(format!("/tmp/{name}.sock"))];
    if is_root() {
        paths.push(PathBuf::from(format!("/run/{name}.sock")));
    }
    let files = SocketFiles(paths.clone());
    for path in &files.0 {
        listeners.push((
            path.display().to_string(),
            UnixListener::bind(path).unwrap(),
        ));
        fs::set_permissions(path, fs::Permissions::from_mode(0o777)).unwrap();
    }
    let joined: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let run = arena.run(&Agent::probe(
        "sockets.py",
        &["unix", "--abstract", &name, "--paths", &joined.join(",")],
    ));
    for (what, listener) in &listeners {
        listener.set_nonblocking(true).unwrap();
        let accepted = listener.accept();
        assert!(
            accepted
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "the agent connected to {what}: {accepted:?}\n{run}"
        );
    }
    run.assert_code(0);
    let mut expected: Vec<(String, String)> = vec![(
        "connect to the host's abstract socket".into(),
        "ECONNREFUSED".into(),
    )];
    for path in joined.iter().map(String::as_str).chain([
        "/run/dbus/system_bus_socket",
        "/var/run/docker.sock",
        "/run/systemd/private",
        "/run/systemd/notify",
        "/dev/log",
        "/tmp/.X11-unix/X0",
    ]) {
        expected.push((format!("connect to {path}"), "ENOENT".into()));
    }
    expect_rows(&run, &owned_rows(&expected));
}

/// Socket families that reach past the network namespace or into kernel
/// code the sandbox has no use for: netlink (also through `ip`), packet,
/// raw IP, and vsock (the hypervisor of a virtual machine, whatever the
/// namespace; only created here, never connected).
fn socket_families(who: Who) {
    let arena = Arena::new(who);
    let run = arena.run(&Agent::probe("sockets.py", &["families"]));
    run.assert_code(0);
    expect_rows(
        &run,
        &[
            ("socket AF_NETLINK NETLINK_ROUTE", "EAFNOSUPPORT"),
            ("socket AF_NETLINK NETLINK_KOBJECT_UEVENT", "EAFNOSUPPORT"),
            ("socket AF_NETLINK NETLINK_AUDIT", "EAFNOSUPPORT"),
            ("socket AF_PACKET SOCK_RAW", "EAFNOSUPPORT"),
            ("socket AF_PACKET SOCK_DGRAM", "EAFNOSUPPORT"),
            ("socket AF_INET SOCK_RAW", "EPERM"),
            ("socket AF_INET6 SOCK_RAW", "EPERM"),
            ("socket AF_VSOCK SOCK_STREAM", "EAFNOSUPPORT"),
            ("socket AF_VSOCK SOCK_DGRAM", "EAFNOSUPPORT"),
            ("ip link", "EAFNOSUPPORT"),
        ],
    );
}

as_root_and_user!(ready: host_unix_sockets, socket_families);

// ---------------------------------------------------------------------------
// Keys, logs, and what the host might leave inside

/// The agent looks for the agent key and the audit log everywhere: by
/// `$CONSTLE_HOME`'s path, in `~/.constle`, `/root`, `/home`, and every
/// `*.pem` and key file it can see; it tries to append a forged entry to
/// the log. The key's bytes are nowhere in what the run printed or left,
/// and the log verifies, without the forged entry.
fn keys_and_logs(who: Who) {
    let arena = Arena::new(who);
    let secret = arena.keygen();
    let home = arena.home();
    let run = arena
        .run(&Agent::probe("secrets.py", &["--home", home.to_str().unwrap()]).identity(&secret));
    secret.assert_unseen(&run, &[arena.work()]);
    let logs: Vec<PathBuf> = fs::read_dir(home.join("logs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    for log in &logs {
        assert!(
            !contains(&fs::read(log).unwrap(), b"forged"),
            "a forged entry is in {}\n{run}",
            log.display()
        );
    }
    let log = logs
        .iter()
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("the run's log");
    arena
        .constle(&["audit", "verify", log.to_str().unwrap()])
        .assert_code(0);
    run.assert_code(0);
    expect_rows(
        &run,
        &[
            ("list $CONSTLE_HOME", "ENOENT"),
            ("list $CONSTLE_HOME/keys/agent", "ENOENT"),
            ("read the agent key by its path", "ENOENT"),
            ("list $CONSTLE_HOME/logs", "ENOENT"),
            ("append a forged audit entry", "ENOENT"),
            ("list /root/.constle", "ENOENT"),
            ("list /root", "ENOENT"),
            ("list /home", "agent"),
            ("read /etc/shadow", "ENOENT"),
            ("keys and logs found anywhere", "none"),
        ],
    );
}

/// constle started with descriptors open that it did not ask for (a
/// directory of `$CONSTLE_HOME`, the key file itself): the agent has none
/// of them, so none opens the key.
fn inherited_descriptors(who: Who) {
    let arena = Arena::new(who);
    let secret = arena.keygen();
    let home = arena.home();
    let key = home.join("keys/agent/test-agent.pem");
    let args = arena.prepare(&Agent::probe("leaks.py", &["fds"]).identity(&secret), &[]);
    let mut argv: Vec<&OsStr> = [
        "sh",
        "-c",
        "exec 5<\"$1\" 6<\"$2\" 7<\"$1/keys/agent\"; shift 2; exec \"$@\"",
        "sh",
    ]
    .map(OsStr::new)
    .to_vec();
    argv.extend([home.as_os_str(), key.as_os_str()]);
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let run = finish(
        arena.command_via(&argv, &args),
        "constle with descriptors open",
    );
    secret.assert_unseen(&run, &[arena.work()]);
    run.assert_code(0);
    expect_rows(
        &run,
        &[
            ("descriptors above 2", "none"),
            ("open keys/agent/test-agent.pem through them", "none"),
            ("open test-agent.pem through them", "none"),
        ],
    );
}

/// The launcher's plan (`CONSTLE_SANDBOX_PLAN`: every path of the run)
/// and the host's environment stay outside: the agent's environment is
/// exactly what constle gives, pid 1's is closed, and no stage directory
/// (`constle-stage-*`) shows in its `/tmp`.
fn launcher_plan_and_stage(who: Who) {
    let arena = Arena::new(who);
    let run = arena.run(&Agent::probe("leaks.py", &["plan"]));
    run.assert_code(0);
    expect_rows(
        &run,
        &[
            ("environment", "HOME,PATH,PWD"),
            ("environment of pid 1", "EACCES"),
            ("environment of its parent", "EACCES"),
            ("stage directories in /tmp", "none"),
        ],
    );
}

/// The constle binary the host runs is mounted inside at
/// `/run/constle/constle`: the agent can neither change nor replace it,
/// and the host finds it as it was.
fn constle_binary_is_read_only(who: Who) {
    let arena = Arena::new(who);
    let bin = match arena.as_attacker() {
        Some(_) => attacker_bin().to_path_buf(),
        None => constle_bin(),
    };
    let stamp = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (
            m.ino(),
            m.len(),
            m.mode(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        )
    };
    let before = stamp(&bin);
    let run = arena.run(&Agent::probe("leaks.py", &["binary"]));
    assert_eq!(stamp(&bin), before, "the constle binary changed\n{run}");
    assert!(
        !arena.path("parent-pwned").exists(),
        "the agent wrote beside its work directory\n{run}"
    );
    run.assert_code(0);
    expect_rows(
        &run,
        &[
            // Not the agent's file (EACCES), on a read-only mount besides.
            ("write /run/constle/constle", "EACCES"),
            ("truncate /run/constle/constle", "EACCES"),
            ("chmod /run/constle/constle", "EROFS"),
            ("rename /run/constle/constle", "EROFS"),
            ("replace /run/constle/constle", "EXDEV"),
            ("write /proc/1/exe", "EACCES"),
        ],
    );
}

as_root_and_user!(
    ready:
    keys_and_logs,
    inherited_descriptors,
    launcher_plan_and_stage,
    constle_binary_is_read_only,
);

// ---------------------------------------------------------------------------
// What the agent leaves behind

/// Git as the operator runs it in the work directory after the run: as
/// whoever started constle, with no configuration of the operator's own.
fn operator_git(arena: &Arena, args: &[&str]) -> Finished {
    let mut argv = vec![OsStr::new("git")];
    argv.extend(args.iter().map(OsStr::new));
    let mut cmd = as_user(arena.as_attacker(), &argv);
    cmd.current_dir(arena.work())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", arena.dir.path());
    finish(cmd, &format!("git {args:?}"))
}

/// The run's quarantine for the agent's work directory.
fn quarantined(arena: &Arena) -> PathBuf {
    let runs: Vec<PathBuf> = fs::read_dir(arena.home().join("quarantine"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(runs.len(), 1, "one run, one quarantine: {runs:?}");
    runs[0].join("workdir")
}

/// The operator's own repository, with a hook of theirs, before the run.
fn operators_repository(arena: &Arena) -> String {
    assert!(
        operator_git(arena, &["init", "-q", "-b", "main"])
            .status
            .success()
    );
    let hook = arena.work().join(".git/hooks/pre-push");
    let body = "#!/bin/sh\necho the operator's own hook\n";
    arena.write(&hook, body);
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    body.to_owned()
}

/// Attack: programs planted for git and the editors (every implicit way
/// git runs one, and the files an editor, a shell or an agent CLI acts on
/// when the directory is opened). Afterwards the operator's git, run as it
/// would be, runs none of them; the agent's commit, branch and
/// `git config user.name` stay; the operator's changed hook is theirs
/// again; every trap is in the quarantine, and the run said so.
fn git_and_editor_traps(who: Who) {
    let arena = Arena::new(who);
    let hook = operators_repository(&arena);
    let tripped = arena.dir.path().join("tripped");
    let run = arena.run(&Agent::probe(
        "leftovers.py",
        &["git", tripped.to_str().unwrap()],
    ));
    run.assert_code(0);
    for args in [
        &["status"][..],
        &["diff"],
        &["diff", "HEAD"],
        &["log", "-p"],
        &["add", "-A"],
        &["commit", "-qm", "the operator's commit"],
        &["checkout", "-q", "topic"],
        &["checkout", "-q", "main"],
        &["st"],
        &["gc", "--auto"],
        &["push", "--dry-run", ".", "main:copy"],
    ] {
        operator_git(&arena, args);
    }
    for var in ["GIT_PAGER", "GIT_EDITOR"] {
        let shown = operator_git(&arena, &["var", var]).out();
        assert!(!shown.contains("evil"), "{var} is {shown}");
    }
    assert!(
        !tripped.exists(),
        "the operator's git ran what the agent planted: {}\n{run}",
        fs::read_to_string(&tripped).unwrap_or_default()
    );
    let log = operator_git(&arena, &["log", "--format=%an %s", "topic"]).out();
    assert_eq!(log.trim(), "Agent the agent's commit", "{run}");
    let name = operator_git(&arena, &["config", "--local", "user.name"]).out();
    assert_eq!(name.trim(), "Agent");
    assert_eq!(
        fs::read_to_string(arena.work().join(".git/hooks/pre-push")).unwrap(),
        hook
    );
    let quarantine = quarantined(&arena);
    for trap in [
        ".git/config",
        ".git/hooks/pre-commit",
        ".git/hooks/pre-push",
        ".vscode/tasks.json",
        ".idea/workspace.xml",
        ".claude/settings.json",
        ".mcp.json",
        ".envrc",
        ".npmrc",
        "sub/.envrc",
        ".devcontainer/devcontainer.json",
        ".cargo/config.toml",
    ] {
        assert!(
            quarantine.join(trap).exists(),
            "{trap} not in the quarantine\n{run}"
        );
        let left = arena.work().join(trap);
        let theirs = [".git/config", ".git/hooks/pre-push"].contains(&trap);
        assert!(
            theirs || !left.exists(),
            "{trap} is still in the work directory"
        );
    }
    assert_eq!(mode(&quarantine), 0o700);
    assert!(run.err().contains("set aside what the agent left"), "{run}");
    assert!(
        !contains(&run.stderr, b"\x1b"),
        "an escape reached the operator\n{run}"
    );
}

/// The same traps, with constle under the operator's terminal: what was
/// set aside is told there, and a name made to act on a terminal (a clear
/// screen, a window title) is shown escaped, never acted on.
fn traps_told_on_the_terminal(who: Who) {
    let arena = Arena::new(who);
    let tripped = arena.dir.path().join("tripped");
    let agent = Agent::probe("leftovers.py", &["git", tripped.to_str().unwrap()]);
    let run = under_terminal_with(&arena, &agent, &["--timeout", "60"]);
    assert_eq!(run.exit, Some(0), "{run}");
    let shown = text(&run.shown);
    assert!(shown.contains("set aside what the agent left"), "{run}");
    assert!(
        shown.contains(".vscode/\\u{1b}[2J\\u{1b}]0;owned\\u{7}name"),
        "{run}"
    );
    assert!(
        !contains(&run.shown, b"\x1b"),
        "an escape reached the terminal\n{run}"
    );
    assert!(
        !contains(&run.shown, b"\x07"),
        "a bell reached the terminal\n{run}"
    );
    operator_git(&arena, &["status"]);
    assert!(!tripped.exists(), "{run}");
}

/// Attack: the work directory and new files left writable by anyone, for
/// any local user to swap before the operator uses them. Afterwards the
/// work directory has its mode again and nothing is writable by group or
/// others that was not before the run.
fn files_left_writable_by_anyone(who: Who) {
    let arena = Arena::new(who);
    fs::set_permissions(arena.work(), fs::Permissions::from_mode(0o750)).unwrap();
    for (name, mode) in [("operator.txt", 0o644), ("shared.txt", 0o664)] {
        arena.write(&arena.work().join(name), "the operator's\n");
        fs::set_permissions(arena.work().join(name), fs::Permissions::from_mode(mode)).unwrap();
    }
    let run = arena.run(&Agent::probe("leftovers.py", &["perms"]));
    run.assert_code(0);
    for (name, want) in [
        (".", 0o750),
        ("world.sh", 0o755),
        ("group.txt", 0o644),
        ("shared-dir", 0o1755),
        ("operator.txt", 0o644),
        ("shared.txt", 0o664),
    ] {
        assert_eq!(mode(&arena.work().join(name)), want, "{name}\n{run}");
    }
    assert!(run.err().contains("has its mode and owner back"), "{run}");
    expect_rows(
        &run,
        &[
            ("chmod 0777 the work directory", "OK"),
            ("chmod 777 world.sh", "OK"),
            ("chmod 664 group.txt", "OK"),
            ("chmod 1777 shared-dir", "OK"),
            ("chmod o+w operator.txt", "OK"),
        ],
    );
}

/// Attack: the operator's read-only inputs, root's, written every way.
/// None of it works, and they are as they were after the run.
fn read_only_inputs(who: Who) {
    let arena = Arena::new(who);
    let work = arena.work();
    fs::create_dir(work.join("inputs")).unwrap();
    for name in ["input.csv", "inputs/data.csv"] {
        fs::write(work.join(name), "a,b\n1,2\n").unwrap();
        fs::set_permissions(work.join(name), fs::Permissions::from_mode(0o444)).unwrap();
    }
    fs::set_permissions(work.join("inputs"), fs::Permissions::from_mode(0o555)).unwrap();
    let run = arena.run(&Agent::probe("leftovers.py", &["read-only"]));
    run.assert_code(0);
    // Not the file's owner. In a root run the file is the keeper's through
    // the idmapped mount, which maps no id but the owner's: a change to an
    // inode of an unmapped owner is refused before permissions are looked
    // at (EOVERFLOW).
    let not_owner = match who {
        Who::Root => "EOVERFLOW",
        Who::User => "EPERM",
    };
    let mut rows = Vec::new();
    for name in ["input.csv", "inputs/data.csv"] {
        rows.extend([
            (format!("{name}, open for writing"), "EACCES"),
            (format!("{name}, truncate"), "EACCES"),
            (format!("{name}, chmod 0666"), not_owner),
            (format!("{name}, chown to the agent"), "EPERM"),
        ]);
        let meta = fs::metadata(work.join(name)).unwrap();
        assert_eq!(
            (meta.uid(), meta.mode() & 0o7777),
            (0, 0o444),
            "{name}\n{run}"
        );
        assert_eq!(fs::read_to_string(work.join(name)).unwrap(), "a,b\n1,2\n");
    }
    rows.extend([
        ("inputs, make a file".to_owned(), "EACCES"),
        ("inputs, chmod 0777".to_owned(), not_owner),
    ]);
    let rows: Vec<(&str, &str)> = rows.iter().map(|(n, r)| (n.as_str(), *r)).collect();
    expect_rows(&run, &rows);
    let meta = fs::metadata(work.join("inputs")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o555));
}

/// Attack: a file the operator hard-linked into the work directory (`cp
/// -al`, `git clone --local`, pnpm's store), which the agent would change
/// outside it too. The run is refused before the agent starts.
fn hard_linked_inputs(who: Who) {
    let arena = Arena::new(who);
    let outside = arena.dir.path().join("store-file");
    arena.write(&outside, "the store's\n");
    fs::hard_link(&outside, arena.work().join("linked")).unwrap();
    let run = arena.run(&Agent::sh(
        "echo the agent ran > ran; echo changed > linked",
    ));
    run.assert_code(125);
    assert!(run.err().contains("hard links"), "{run}");
    assert!(run.err().contains("linked"), "{run}");
    assert!(!arena.work().join("ran").exists(), "the agent ran\n{run}");
    assert_eq!(fs::read_to_string(&outside).unwrap(), "the store's\n");
}

/// Attack: the sandbox's file systems in memory filled past their bounds
/// (the declared ones for `/tmp` and the home, the default for
/// `/dev/shm`), and a file made in `/dev`.
fn memory_file_systems_past_their_bounds(who: Who) {
    let arena = Arena::new(who);
    let agent = Agent::probe("leftovers.py", &["tmpfs"]).tmpfs("    tmp: 32m\n    home: 16m\n");
    let run = arena.run(&agent);
    run.assert_code(0);
    let rows = run.rows();
    for (row, bound) in [
        ("fill /tmp with 80 MiB", 32),
        ("fill /home/agent with 80 MiB", 16),
        ("fill /dev/shm with 80 MiB", 64),
    ] {
        let got = rows.get(row).map(String::as_str).unwrap_or("");
        let mib: u32 = got
            .strip_prefix("ENOSPC after ")
            .and_then(|r| r.strip_suffix(" MiB"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(u32::MAX);
        assert!(mib <= bound, "{row}: {got}\n{run}");
    }
    assert_eq!(
        rows.get("write /dev/planted").map(String::as_str),
        Some("EROFS"),
        "{run}"
    );
}

/// Attack: every inotify instance the kernel allows a user, held by one
/// root run, leaves none for the next. Each root run has a host id of its
/// own, so the other run still gets one.
fn per_uid_quotas_are_not_shared(who: Who) {
    assert_eq!(who, Who::Root, "an unprivileged user's runs are that user");
    let hog = Arena::new(who);
    let running = hog.start(&Agent::probe("leftovers.py", &["inotify-hog"]));
    assert!(
        appears(&hog.work().join("hogging"), RUN_LIMIT),
        "the hog did not start"
    );
    let other = Arena::new(who);
    let run = other.run(&Agent::probe("leftovers.py", &["inotify-one"]));
    fs::write(hog.work().join("release"), "").unwrap();
    let hogged = running.stop("TERM");
    assert!(
        hogged.out().contains("(EMFILE)"),
        "the hog never hit the limit\n{hogged}"
    );
    expect_rows(&run, &[("inotify_init1", "OK")]);
}

/// Two runs in one work directory would each check and change what the
/// other's agent writes: the second is refused while the first runs.
fn one_run_per_work_directory(who: Who) {
    let arena = Arena::new(who);
    let first = arena.start(&Agent::sh("touch started; sleep 30"));
    assert!(appears(&arena.work().join("started"), RUN_LIMIT));
    let second = arena.run(&Agent::sh("touch second"));
    second.assert_code(125);
    assert!(
        second
            .err()
            .contains("another constle run is using the work directory"),
        "{second}"
    );
    assert!(!arena.work().join("second").exists());
    first.stop("TERM");
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Attack: persistence through a kept home (`sandbox.home`). The first run
/// leaves state, a session, a shell startup file and Claude Code hooks in
/// its home; the second finds the state and the session, and neither
/// startup file nor hooks, which are in the quarantine. A link planted at
/// the home's path is refused before anything starts.
fn a_kept_home(who: Who) {
    let arena = Arena::new(who);
    let home = arena.path("agent-home");
    let first = arena.run(
        &Agent::sh(
            "test \"$HOME\" = /home/agent && cd && echo kept > .state \
         && echo 'echo evil' > .bashrc && mkdir -p .claude/projects/p \
         && echo session > .claude/projects/p/s.jsonl \
         && echo '{\"hooks\": {}}' > .claude/settings.json",
        )
        .home("./agent-home"),
    );
    first.assert_code(0);
    assert!(
        first
            .err()
            .contains("made now, mode 0700 (it did not exist)"),
        "{first}"
    );
    assert_eq!(mode(&home), 0o700);
    assert_eq!(fs::read_to_string(home.join(".state")).unwrap(), "kept\n");
    let runs: Vec<PathBuf> = fs::read_dir(arena.home().join("quarantine"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let [run] = &runs[..] else {
        panic!("one run, one quarantine: {runs:?}");
    };
    for planted in [".bashrc", ".claude/settings.json"] {
        assert!(
            run.join("home").join(planted).exists(),
            "{planted}\n{first}"
        );
        assert!(!home.join(planted).exists(), "{planted}");
    }
    assert!(first.err().contains("the agent's home"), "{first}");
    let log = fs::read_dir(arena.home().join("logs"))
        .unwrap()
        .flatten()
        .map(|e| fs::read_to_string(e.path()).unwrap())
        .collect::<String>();
    assert!(
        log.lines()
            .any(|l| l.contains("\"workdir_quarantined\"") && l.contains("\"home\":true")),
        "{log}"
    );

    let second = arena.run(
        &Agent::sh(
            "cd && cat .state .claude/projects/p/s.jsonl && test ! -e .bashrc \
         && test ! -e .claude/settings.json && echo clean",
        )
        .home("./agent-home"),
    );
    second.assert_code(0);
    assert_eq!(second.out(), "kept\nsession\nclean\n", "{second}");

    fs::rename(&home, arena.dir.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(arena.dir.path().join("elsewhere"), &home).unwrap();
    let linked = arena.run(&Agent::sh("cd && echo written > .state").home("./agent-home"));
    linked.assert_code(125);
    assert!(
        linked.err().contains("goes through a symbolic link"),
        "{linked}"
    );
    assert_eq!(
        fs::read_to_string(arena.dir.path().join("elsewhere/.state")).unwrap(),
        "kept\n"
    );
}

as_root_and_user!(
    ready:
    git_and_editor_traps,
    traps_told_on_the_terminal,
    files_left_writable_by_anyone,
    hard_linked_inputs,
    memory_file_systems_past_their_bounds,
    one_run_per_work_directory,
    a_kept_home,
);

as_root_and_user!(ready_as_root: read_only_inputs);

mod per_uid_quotas {
    #[test]
    fn as_root() {
        if super::ready_as_root("per_uid_quotas", super::Who::Root) {
            super::per_uid_quotas_are_not_shared(super::Who::Root);
        }
    }
}

// ---------------------------------------------------------------------------
// The operator's terminal

/// What [`PTY_HARNESS`] saw of a run under a terminal, with the probe's
/// rows (from the work directory: the terminal may be in no state to
/// carry them).
struct TerminalRun {
    exit: Option<i64>,
    hung: bool,
    /// Every byte the terminal showed.
    shown: Vec<u8>,
    /// What constle's stdout gave, with `--stdout-pipe`.
    piped: Vec<u8>,
    before: String,
    after: String,
    reopen: String,
    /// Input still waiting on the terminal after the run.
    pending: Vec<u8>,
    rows: BTreeMap<String, String>,
    report: String,
}

impl fmt::Display for TerminalRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "--- exit {:?}, hung {}", self.exit, self.hung)?;
        writeln!(f, "--- rows: {:?}", self.rows)?;
        writeln!(f, "--- terminal showed: {:?}", text(&self.shown))?;
        writeln!(f, "--- pending input: {:?}", text(&self.pending))?;
        writeln!(
            f,
            "--- stty before:\n{}--- stty after:\n{}",
            self.before, self.after
        )?;
        write!(f, "--- report: {}", self.report)
    }
}

/// Runs the terminal probe in `mode` with constle under a fresh
/// pseudo-terminal, the harness told `harness` (`--ready`, `--type`,
/// `--ctrl-c`, …; `{work}` stands for the work directory).
fn under_terminal(arena: &Arena, mode: &str, harness: &[&str]) -> TerminalRun {
    under_terminal_with(arena, &Agent::probe("terminal.py", &[mode]), harness)
}

/// Runs `agent` as [`under_terminal`] does.
fn under_terminal_with(arena: &Arena, agent: &Agent, harness: &[&str]) -> TerminalRun {
    use base64::Engine as _;
    let args = arena.prepare(agent, &[]);
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let constle = arena.command(&args);
    let script = arena.dir.path().join("pty_harness.py");
    fs::write(&script, PTY_HARNESS).unwrap();
    let work = arena.work().display().to_string();
    let mut cmd = Command::new("python3");
    cmd.arg(&script)
        .args(harness.iter().map(|a| a.replace("{work}", &work)))
        .arg("--")
        .arg(constle.get_program())
        .args(constle.get_args())
        .current_dir(arena.project());
    for (name, value) in constle.get_envs() {
        if let Some(value) = value {
            cmd.env(name, value);
        }
    }
    let run = finish(cmd, "the terminal harness");
    assert!(run.status.success(), "the harness failed\n{run}");
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let bytes = |key: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(report[key].as_str().unwrap())
            .unwrap()
    };
    let rows = fs::read_to_string(arena.work().join("rows"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    TerminalRun {
        exit: report["exit"].as_i64(),
        hung: report["hung"].as_bool().unwrap(),
        shown: bytes("terminal"),
        piped: bytes("piped"),
        before: report["before"].as_str().unwrap().to_owned(),
        after: report["after"].as_str().unwrap().to_owned(),
        reopen: report["reopen"].as_str().unwrap().to_owned(),
        pending: bytes("pending"),
        rows,
        report: format!("{report}\n{}", run.err()),
    }
}

/// What the operator types while the agent runs: the agent reads every
/// descriptor it has and `/dev/tty` for five seconds, and never sees it.
fn terminal_keystrokes(who: Who) {
    let arena = Arena::new(who);
    let typed = "operator-secret-4711";
    let run = under_terminal(
        &arena,
        "read",
        &[
            "--ready",
            "{work}/ready",
            "--type",
            &format!("{typed}\n"),
            "--done",
            "{work}/done",
        ],
    );
    for file in walk(&arena.work()) {
        if fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()) {
            assert!(
                !contains(&fs::read(&file).unwrap(), typed.as_bytes()),
                "the agent read what the operator typed, into {}\n{run}",
                file.display()
            );
        }
    }
    assert!(!run.hung, "{run}");
    assert_eq!(run.exit, Some(0), "{run}");
}

/// Attack 4: the agent turns ISIG off (and ICANON, ECHO, IXON), so that
/// Ctrl-C sends no SIGINT, and ignores SIGINT besides. Ctrl-C still ends
/// the run, with 130.
fn terminal_ctrl_c(who: Who) {
    let arena = Arena::new(who);
    let run = under_terminal(
        &arena,
        "isig",
        &["--ready", "{work}/ready", "--ctrl-c", "--timeout", "30"],
    );
    assert!(
        !run.hung,
        "Ctrl-C did not stop the run once the agent had cleared ISIG\n{run}"
    );
    assert_eq!(run.exit, Some(130), "{run}");
}

/// Attack 4, what it leaves behind: after a run whose agent changed the
/// terminal's modes and size and took it exclusively, `stty -a` says what
/// it said before, and the terminal can still be opened.
fn terminal_modes(who: Who) {
    let arena = Arena::new(who);
    let run = under_terminal(
        &arena,
        "isig",
        &["--ready", "{work}/ready", "--ctrl-c", "--timeout", "30"],
    );
    assert_eq!(run.after, run.before, "the terminal's modes changed\n{run}");
    assert_eq!(
        run.reopen, "OK",
        "the terminal cannot be opened again\n{run}"
    );
}

/// Attack 4, the fake prompt: the agent clears the screen, homes the
/// cursor and draws a human-gate prompt, with more escape sequences (OSC
/// 52 to the clipboard, a window title, DCS, a C1 CSI, bidi overrides,
/// backspace over text). The operator's terminal receives the agent's
/// words, and none of those bytes raw.
fn terminal_escapes(who: Who) {
    let arena = Arena::new(who);
    let run = under_terminal(&arena, "escape", &[]);
    let shown = text(&run.shown);
    assert_eq!(
        shown.matches("AGENT-MARKER").count(),
        2,
        "the agent's stdout and stderr reach the terminal\n{run}"
    );
    let raw = unsafe_for_terminal(&shown);
    assert!(
        raw.is_empty(),
        "raw control bytes from the agent reached the terminal: {raw:?}\n{run}"
    );
    assert_eq!(run.exit, Some(0), "{run}");
}

/// Characters a terminal acts on instead of showing, except the line ends
/// the terminal itself writes (`\r\n`) and tabs: C0 controls, DEL, C1
/// controls, bidi embeddings, overrides and isolates. Each with its offset.
fn unsafe_for_terminal(shown: &str) -> Vec<(usize, char)> {
    let chars: Vec<(usize, char)> = shown.char_indices().collect();
    chars
        .iter()
        .enumerate()
        .filter(|(i, (_, c))| {
            let line_end = *c == '\r' && chars.get(i + 1).is_some_and(|(_, n)| *n == '\n');
            let control = (c.is_control() && !matches!(c, '\n' | '\t')) && !line_end;
            let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            control || bidi
        })
        .map(|(_, found)| *found)
        .collect()
}

/// Keystroke injection: TIOCSTI of a command into every descriptor the
/// agent has (and `/dev/tty`), TIOCLINUX paste. Nothing arrives as input
/// on the operator's terminal, nor is echoed on it.
fn terminal_injection(who: Who) {
    let arena = Arena::new(who);
    let run = under_terminal(&arena, "inject", &[]);
    for (what, bytes) in [("input", &run.pending), ("terminal", &run.shown)] {
        assert!(
            !contains(bytes, b"INJECTED"),
            "the agent's keystrokes reached the operator's {what}\n{run}"
        );
    }
    let worked: Vec<&String> = run
        .rows
        .iter()
        .filter(|(_, result)| *result == "OK")
        .map(|(name, _)| name)
        .collect();
    assert!(worked.is_empty(), "{worked:?} succeeded\n{run}");
    assert_eq!(run.exit, Some(0), "{run}");
}

/// `constle run … | tee`: the agent's stdout, all of it and in order, goes
/// to the pipe, its stderr to the terminal, and constle exits with the
/// agent's status.
fn terminal_output_through_a_pipe(who: Who) {
    let arena = Arena::new(who);
    let run = under_terminal(&arena, "tee", &["--stdout-pipe"]);
    let lines = |prefix: &str| -> String { (0..200).map(|i| format!("{prefix} {i}\n")).collect() };
    assert_eq!(text(&run.piped), lines("out"), "what the pipe got\n{run}");
    let shown = text(&run.shown).replace("\r\n", "\n");
    let errs: String = shown
        .lines()
        .filter(|l| l.starts_with("err "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(errs, lines("err"), "what the terminal showed\n{run}");
    assert_eq!(run.exit, Some(3), "{run}");
}

as_root_and_user!(
    ready:
    terminal_keystrokes,
    terminal_ctrl_c,
    terminal_modes,
    terminal_escapes,
    terminal_injection,
    terminal_output_through_a_pipe,
);
