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
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
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
    ("processes.py", include_str!("attacks/processes.py")),
];

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

/// The constle binary where [`ATTACKER`] can run it: a link (or copy) in a
/// world-readable directory under `/tmp`, since the build may live where
/// that user cannot enter (a CI clone under `/root`). One per test process;
/// those of processes that are gone are removed.
fn attacker_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let prefix = "constle-attacks-bin-";
        for entry in fs::read_dir("/tmp").unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let gone = name
                .strip_prefix(prefix)
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
            if gone {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        let dir = PathBuf::from(format!("/tmp/{prefix}{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.join("constle");
        if fs::hard_link(constle_bin(), &bin).is_err() {
            fs::copy(constle_bin(), &bin).unwrap();
        }
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

/// `mod NAME { fn as_root(); fn as_user(); }`: the two variants of the
/// technique `fn NAME(Who)`.
macro_rules! as_root_and_user {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn as_root() {
                if super::ready(stringify!($name), super::Who::Root) {
                    super::$name(super::Who::Root);
                }
            }
            #[test]
            fn as_user() {
                if super::ready(stringify!($name), super::Who::User) {
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
}

impl Drop for CorePattern {
    fn drop(&mut self) {
        if CorePattern::current() != self.saved {
            let _ = fs::write(CORE_PATTERN, self.saved.trim_end());
        }
    }
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
    host_root_through_core_pattern,
    earlier_run_links_into_constle_home,
    agent_rewrites_its_agentfile,
    agent_rewrites_the_hosts_file,
    ptrace_pid_1_then_exit,
);
