//! End-to-end tests of a run's cgroups on this machine's kernel: each limit
//! is reached by a real process tree and the kernel enforces it.
//!
//! This test binary has its own `main` (`harness = false`). Started as
//! `<this exe> enter <cgroup.procs>… -- <program> <args>…` it is the
//! sandbox launcher: it calls [`constle_limits::enter`] and execs, exactly
//! as the launcher does before bubblewrap, so every process a test starts
//! enters its cgroups that way. Started as `<this exe> try-create` it
//! prints what [`RunCgroup::create`] says to the user it runs as (the test
//! runs it as an unprivileged user). Otherwise it runs the tests through
//! `libtest-mimic`.
//!
//! The tests need root, `/usr/bin/python3`, and cgroups that can enforce
//! every limit (v2, or v1 per controller). Without them each test prints
//! `skipped: REASON`, unless `CONSTLE_E2E=require`, which turns a skip into
//! a failure. Every process tree is bounded even if a limit failed: the
//! memory hog asks for 200 MiB, the fork loop stops at 2000 processes.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics and stderr.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::print_stdout
)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use constle_limits::{LimitKind, Limits, RunCgroup};
use constle_testkit::{E2E_ENV, find_tool, require_root};
use libtest_mimic::{Arguments, Completion, Failed, Trial};

const PYTHON: &str = "/usr/bin/python3";
const ENTER: &str = "enter";
const TRY_CREATE: &str = "try-create";
/// The unprivileged user `unprivileged_user_gets_a_clear_error` runs as;
/// created as a system user when missing.
const TEST_USER: &str = "constle-test";

/// Every limit, for the tests that need the machine to enforce them all.
const ALL: Limits = Limits {
    memory_bytes: Some(256 << 20),
    pids: Some(64),
    cpu_millis: Some(500),
};

type TestResult = Result<(), Failed>;

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    match args.get(1).and_then(|a| a.to_str()) {
        Some(ENTER) => launcher(&args[2..]),
        Some(TRY_CREATE) => try_create(),
        _ => {}
    }
    let tests = vec![
        e2e("memory_hog_is_oom_killed", &[], memory_hog_is_oom_killed),
        e2e("fork_loop_is_capped", &[], fork_loop_is_capped),
        e2e("cpu_is_throttled", &[], cpu_is_throttled),
        e2e("kill_all_leaves_nothing", &[], kill_all_leaves_nothing),
        e2e("drop_kills_and_removes", &[], drop_kills_and_removes),
        e2e("limits_are_in_the_files", &[], limits_are_in_the_files),
        e2e(
            "unprivileged_user_gets_a_clear_error",
            &["setpriv", "useradd"],
            unprivileged_user_gets_a_clear_error,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

// ---------------------------------------------------------------------------
// The launcher and the unprivileged probe

/// What the sandbox launcher does: enter the run's cgroups, then exec.
fn launcher(args: &[OsString]) -> ! {
    let split = args
        .iter()
        .position(|a| a == "--")
        .expect("usage: enter <cgroup.procs>… -- <program> <args>…");
    let (procs, program) = (&args[..split], &args[split + 1..]);
    if let Err(e) = constle_limits::enter(procs) {
        eprintln!("enter: {e}");
        std::process::exit(120);
    }
    let e = Command::new(&program[0]).args(&program[1..]).exec();
    eprintln!("exec {:?}: {e}", program[0]);
    std::process::exit(121);
}

/// Prints `none: ok` when a run without limits can be made, then the error
/// a run with every limit gets (exit 0), or `created` (exit 1).
fn try_create() -> ! {
    match RunCgroup::create("plain", &Limits::default()) {
        Ok(_) => println!("none: ok"),
        Err(e) => println!("none: {e}"),
    }
    match RunCgroup::create("plain", &ALL) {
        Ok(_) => {
            println!("created");
            std::process::exit(1)
        }
        Err(e) => {
            println!("{e}");
            std::process::exit(0)
        }
    }
}

// ---------------------------------------------------------------------------
// Harness

fn e2e(name: &'static str, tools: &'static [&'static str], test: fn() -> TestResult) -> Trial {
    Trial::ignorable_test(name, move || {
        let tools: Vec<&str> = [PYTHON].iter().chain(tools).copied().collect();
        if !require_root(name, &tools) {
            return Ok(Completion::ignored_with("skipped: needs root and tools"));
        }
        if let Err(e) = RunCgroup::create("probe", &ALL) {
            return skip(name, &format!("cgroups cannot enforce limits here: {e}"));
        }
        test().map(|()| Completion::Completed)
    })
}

fn skip(test: &str, reason: &str) -> Result<Completion, Failed> {
    if std::env::var(E2E_ENV).is_ok_and(|v| v == "require") {
        panic!("{E2E_ENV}=require, but {test} cannot run here: {reason}");
    }
    eprintln!("skipped: {test}: {reason}");
    Ok(Completion::ignored_with(format!("skipped: {reason}")))
}

fn check(ok: bool, what: impl FnOnce() -> String) -> TestResult {
    if ok { Ok(()) } else { Err(what().into()) }
}

/// A process a test started; killed and reaped if the test ends early.
struct Process(Child);

impl Process {
    fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.0.wait()
    }

    /// The first line it prints.
    fn first_line(&mut self) -> String {
        let stdout: &mut ChildStdout = self.0.stdout.as_mut().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line.trim().to_owned()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `program` inside `cgroup` the way the launcher does, with its
/// stdout piped.
fn spawn(cgroup: &RunCgroup, program: &[&str]) -> Process {
    let child = Command::new(std::env::current_exe().unwrap())
        .arg(ENTER)
        .args(cgroup.procs_files())
        .arg("--")
        .args(program)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    Process(child)
}

/// The directories of the run's cgroups.
fn dirs(cgroup: &RunCgroup) -> Vec<PathBuf> {
    cgroup
        .procs_files()
        .iter()
        .map(|f| f.parent().unwrap().to_path_buf())
        .collect()
}

/// Every process listed in the run's cgroups.
fn members(cgroup: &RunCgroup) -> Vec<u32> {
    let mut pids: Vec<u32> = cgroup
        .procs_files()
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| l.parse().unwrap())
                .collect::<Vec<u32>>()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The first of `files` found in the run's cgroups, and its content.
fn read_any(cgroup: &RunCgroup, files: &[&str]) -> Option<(String, String)> {
    dirs(cgroup).iter().find_map(|dir| {
        files.iter().find_map(|f| {
            let text = std::fs::read_to_string(dir.join(f)).ok()?;
            Some(((*f).to_owned(), text.trim().to_owned()))
        })
    })
}

/// Waits up to `timeout` for `done`.
fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        sleep(Duration::from_millis(20));
    }
    done()
}

fn killed(status: ExitStatus) -> bool {
    status.signal() == Some(9)
}

// ---------------------------------------------------------------------------
// Tests

/// 200 MiB touched under a 64 MiB limit: the kernel kills the process, and
/// `hits` says the memory limit was reached.
fn memory_hog_is_oom_killed() -> TestResult {
    let cgroup = RunCgroup::create(
        "memhog",
        &Limits {
            memory_bytes: Some(64 << 20),
            ..Limits::default()
        },
    )?;
    let hog = "b = b'x' * (200 << 20)\nprint(len(b), flush=True)";
    let mut child = spawn(&cgroup, &[PYTHON, "-c", hog]);
    let printed = child.first_line();
    let status = child.wait()?;
    check(killed(status) && printed.is_empty(), || {
        format!("the hog was not killed: {status}, printed {printed:?}")
    })?;
    let hits = cgroup.hits()?;
    check(
        hits.len() == 1 && hits[0].limit == LimitKind::Memory && hits[0].count >= 1,
        || format!("hits: {hits:?}"),
    )?;
    eprintln!("{}", hits[0]);
    check(hits[0].detail == "64 MiB", || format!("{:?}", hits[0]))?;
    let dirs = dirs(&cgroup);
    cgroup.remove()?;
    check(dirs.iter().all(|d| !d.exists()), || {
        format!("left behind: {dirs:?}")
    })
}

/// A loop forking until fork fails, under `pids: 32`: it gets 31 children
/// besides itself, the group never holds more than 32, and `hits` says the
/// pids limit was reached.
fn fork_loop_is_capped() -> TestResult {
    let cgroup = RunCgroup::create(
        "forks",
        &Limits {
            pids: Some(32),
            ..Limits::default()
        },
    )?;
    let forker = "\
import os, time
children = 0
while children < 2000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children += 1
print(children, flush=True)
time.sleep(60)
";
    let mut child = spawn(&cgroup, &[PYTHON, "-c", forker]);
    let children: u32 = child.first_line().parse()?;
    let held = members(&cgroup).len();
    let current = read_any(&cgroup, &["pids.current"]).map(|(_, v)| v);
    eprintln!("forked {children} children; the group holds {held}, pids.current {current:?}");
    check((16..=31).contains(&children), || {
        format!("{children} children")
    })?;
    check(held <= 32, || format!("{held} processes in the group"))?;
    check(
        current
            .as_ref()
            .is_some_and(|c| c.parse::<u32>().is_ok_and(|c| c <= 32)),
        || format!("pids.current {current:?}"),
    )?;
    let hits = cgroup.hits()?;
    check(
        hits.len() == 1 && hits[0].limit == LimitKind::Pids && hits[0].count >= 1,
        || format!("hits: {hits:?}"),
    )?;
    eprintln!("{}", hits[0]);
    cgroup.kill_all()?;
    check(members(&cgroup).is_empty(), || "survivors".into())?;
    check(killed(child.wait()?), || "the forker was not killed".into())?;
    Ok(cgroup.remove()?)
}

/// Two busy loops under `cpus: 0.2` get about 0.2 CPU-seconds per second
/// between them, by the cgroup's own counter, and are throttled.
fn cpu_is_throttled() -> TestResult {
    let cgroup = RunCgroup::create(
        "cpu",
        &Limits {
            cpu_millis: Some(200),
            ..Limits::default()
        },
    )?;
    let loops = "while :; do :; done & while :; do :; done";
    let mut child = spawn(&cgroup, &["/bin/sh", "-c", loops]);
    sleep(Duration::from_millis(300));
    let usage = || cgroup.cpu_stat().map(|s| s.usage);
    let (Some(before), start) = (usage()?, Instant::now()) else {
        return Err("no CPU time for this run: it has no cgroup v2 group here".into());
    };
    sleep(Duration::from_secs(1));
    let (after, elapsed) = (usage()?.unwrap_or_default(), start.elapsed());
    let rate = (after.saturating_sub(before)).as_secs_f64() / elapsed.as_secs_f64();
    let throttled = cgroup.cpu_stat()?.throttled.unwrap_or_default();
    eprintln!("{rate:.3} CPU-seconds per second, throttled {throttled:?}");
    cgroup.kill_all()?;
    child.wait()?;
    // Unlimited, the loops would get up to 2 (one per core); the floor
    // only shows they ran on a busy machine.
    check((0.1..=0.3).contains(&rate), || format!("rate {rate:.3}"))?;
    check(throttled > Duration::ZERO, || "never throttled".into())?;
    Ok(cgroup.remove()?)
}

/// Processes that ignore SIGTERM, background children and a daemon that
/// left its session (reparented away from the run) are all gone after
/// `kill_all`.
fn kill_all_leaves_nothing() -> TestResult {
    let cgroup = RunCgroup::create(
        "kill",
        &Limits {
            pids: Some(64),
            ..Limits::default()
        },
    )?;
    let script = "\
trap '' TERM HUP INT
(setsid sh -c \"trap '' TERM; sleep 300\" &)
sleep 300 &
sleep 300 &
echo ready
wait
";
    let mut child = spawn(&cgroup, &["/bin/sh", "-c", script]);
    check(child.first_line() == "ready", || "no ready line".into())?;
    check(
        wait_for(Duration::from_secs(5), || members(&cgroup).len() >= 5),
        || format!("members: {:?}", members(&cgroup)),
    )?;
    let start = Instant::now();
    cgroup.kill_all()?;
    eprintln!("killed in {:?}", start.elapsed());
    check(members(&cgroup).is_empty(), || {
        format!("survivors {:?}", members(&cgroup))
    })?;
    check(killed(child.wait()?), || "the shell was not killed".into())?;
    Ok(cgroup.remove()?)
}

/// Dropping the cgroup kills what is still inside and removes every
/// directory.
fn drop_kills_and_removes() -> TestResult {
    let cgroup = RunCgroup::create("drop", &ALL)?;
    let dirs = dirs(&cgroup);
    check(dirs.iter().all(|d| d.is_dir()), || format!("{dirs:?}"))?;
    let mut child = spawn(&cgroup, &["/bin/sleep", "300"]);
    check(
        wait_for(Duration::from_secs(5), || !members(&cgroup).is_empty()),
        || "sleep never entered".into(),
    )?;
    drop(cgroup);
    check(dirs.iter().all(|d| !d.exists()), || {
        format!("left behind: {dirs:?}")
    })?;
    check(killed(child.wait()?), || "sleep outlived the cgroup".into())
}

/// Each limit is in its file, in whichever hierarchy enforces it; two runs
/// at once get groups of their own.
fn limits_are_in_the_files() -> TestResult {
    let cgroup = RunCgroup::create("files", &ALL)?;
    let other = RunCgroup::create("files", &ALL)?;
    let (mine, theirs) = (dirs(&cgroup), dirs(&other));
    check(mine.iter().all(|d| !theirs.contains(d)), || {
        format!("{mine:?} {theirs:?}")
    })?;
    for dir in &mine {
        eprintln!("group {}", dir.display());
    }
    let memory = read_any(&cgroup, &["memory.max", "memory.limit_in_bytes"]);
    check(
        memory.as_ref().is_some_and(|(_, v)| v == "268435456"),
        || format!("memory: {memory:?}"),
    )?;
    let swap = read_any(&cgroup, &["memory.swap.max", "memory.memsw.limit_in_bytes"]);
    let swap_ok = match &swap {
        Some((file, v)) if file == "memory.swap.max" => v == "0",
        Some((_, v)) => v == "268435456",
        None => true,
    };
    check(swap_ok, || format!("swap: {swap:?}"))?;
    let pids = read_any(&cgroup, &["pids.max"]);
    check(pids.as_ref().is_some_and(|(_, v)| v == "64"), || {
        format!("pids: {pids:?}")
    })?;
    let cpu = match read_any(&cgroup, &["cpu.max", "cpu.cfs_quota_us"]) {
        Some((file, v)) if file == "cpu.max" => v,
        Some((_, quota)) => {
            let period = read_any(&cgroup, &["cpu.cfs_period_us"]).map(|(_, v)| v);
            format!("{quota} {}", period.unwrap_or_default())
        }
        None => String::new(),
    };
    check(cpu == "50000 100000", || format!("cpu: {cpu:?}"))?;
    eprintln!("memory {memory:?}, swap {swap:?}, pids {pids:?}, cpu {cpu:?}");
    other.remove()?;
    Ok(cgroup.remove()?)
}

/// A plain user (no delegated cgroup, no root) declaring limits gets the
/// error naming the controller, what was found and what to do; without
/// limits, the run needs no cgroup at all.
fn unprivileged_user_gets_a_clear_error() -> TestResult {
    ensure_user()?;
    // The build directory may not be readable by others: run a copy.
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    let exe = dir.path().join("cgroups");
    std::fs::copy(std::env::current_exe()?, &exe)?;
    let output = Command::new(find_tool("setpriv").unwrap())
        .args(["--reuid", TEST_USER, "--regid", TEST_USER, "--clear-groups"])
        .arg(&exe)
        .arg(TRY_CREATE)
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("as {TEST_USER}:\n{stdout}");
    check(output.status.success(), || {
        format!("{}: {stdout}{stderr}", output.status)
    })?;
    let mut lines = stdout.lines();
    check(lines.next() == Some("none: ok"), || stdout.to_string())?;
    let message = lines.next().unwrap_or_default();
    for part in [
        "cannot enforce the memory limit: ",
        "Permission denied",
        "run it as root, or on a cgroup v2 system start it in a delegated scope (systemd-run --user --scope -p Delegate=yes constle run …)",
    ] {
        check(message.contains(part), || {
            format!("{part:?} not in {message:?}")
        })?;
    }
    Ok(())
}

/// Makes the system user [`TEST_USER`] unless it exists. Another test
/// process may be making it at the same moment: only its absence after
/// trying is an error.
fn ensure_user() -> TestResult {
    let exists = || {
        Command::new("id")
            .arg(TEST_USER)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if exists() {
        return Ok(());
    }
    let output = Command::new(find_tool("useradd").unwrap())
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ])
        .arg(TEST_USER)
        .output()?;
    check(exists(), || {
        format!(
            "useradd {TEST_USER}: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}
