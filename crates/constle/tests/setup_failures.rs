//! `constle run` where the sandbox cannot be set up as it would be on a bare
//! host, as in a default container: each case made here for real (a masked
//! `/proc`, a seccomp filter that refuses namespaces, root without
//! `CAP_SYS_ADMIN`), and what constle says and records about it.
//!
//! A sandbox that was never set up ran no agent: the run exits 125 with
//! bwrap's reason and what to change, on stderr and in `run_finished`,
//! never with bwrap's own status as if it were the agent's. Root without
//! `CAP_SYS_ADMIN` starts the sandbox as any user would, and says who the
//! agent then is outside it. Root with it, whose agent sees the work
//! directory through an idmapped mount, is told a file system that cannot
//! (overlayfs, a container's own) from a user namespace that may not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use constle_testkit::{find_tool, require_root};

use common::{Case, constle_bin, report, text};

/// A seccomp filter that refuses namespaces as Docker's default profile
/// does, around a command.
const NO_NAMESPACES: &str = include_str!("setup_failures/no_namespaces.py");

/// The unprivileged user the masked-`/proc` and seccomp cases run as:
/// bwrap's unprivileged path, as a non-root container user takes it.
const USER: &str = "nobody";

/// What the agent prints: who it is, and what it holds.
const WHOAMI: &str = "id -u; id -g; grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status; \
                      echo written > made-by-agent; exit 7";

fn agentfile(case: &Case, script: &str) -> PathBuf {
    case.agentfile(&format!(
        "sandbox:\n  command: [\"sh\", \"-c\", {}]\n  workdir: ./work\n  network:\n    egress: none\n",
        serde_json::to_string(script).unwrap()
    ))
}

/// The case's directory and everything in it handed to [`USER`], with a
/// copy of the constle binary there (the build may lie where that user
/// cannot enter); the copy's path.
fn hand_over(case: &Case) -> PathBuf {
    let bin = case.path("constle");
    fs::copy(constle_bin(), &bin).unwrap();
    let status = Command::new("chown")
        .args(["-R", &format!("{USER}:")])
        .arg(case.dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    bin
}

/// `WRAPPER… setpriv (as USER) constle run agent.yaml`, in the case's
/// directory.
fn run_as_user(case: &Case, wrapper: &[&str], agentfile: &Path) -> Output {
    let bin = hand_over(case);
    let setpriv = find_tool("setpriv").unwrap();
    let group = text(
        &Command::new("id")
            .args(["-gn", USER])
            .output()
            .unwrap()
            .stdout,
    );
    let mut argv: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
    argv.extend([
        setpriv.to_str().unwrap().to_owned(),
        format!("--reuid={USER}"),
        format!("--regid={}", group.trim()),
        "--clear-groups".to_owned(),
        bin.to_str().unwrap().to_owned(),
        "run".to_owned(),
        agentfile.to_str().unwrap().to_owned(),
    ]);
    run(case, &argv)
}

fn run(case: &Case, argv: &[String]) -> Output {
    Command::new(&argv[0])
        .args(&argv[1..])
        .env("CONSTLE_HOME", case.home())
        .env("NO_COLOR", "1")
        .current_dir(case.dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The run's `run_finished`.
fn run_finished(case: &Case) -> serde_json::Value {
    let finished = case.events("run_finished");
    assert_eq!(finished.len(), 1, "{finished:?}");
    finished.into_iter().next().unwrap()
}

/// The run failed before the agent started: 125, `said` (bwrap's own line)
/// and each of `advice` on stderr and in `run_finished`'s error, and the
/// agent left nothing.
#[track_caller]
fn never_ran(case: &Case, out: &Output, said: &str, advice: &[&str]) {
    stopped_with(
        case,
        out,
        "constle run: the sandbox could not be set up, so the agent never ran: ",
        &[&[said], advice].concat(),
    );
}

/// The preflight refused the run before anything started: 125, its
/// whole line, word for word (`lacks` "a layer" or "layers"), on stderr
/// and in `run_finished`'s error.
#[track_caller]
fn refused_before_start(case: &Case, out: &Output, lacks: &str, line: &str) {
    let opening = "the sandbox needs, so nothing was started: ";
    stopped_with(case, out, opening, &[line]);
    let whole = format!("constle run: this machine lacks {lacks} {opening}{line}");
    assert!(text(&out.stderr).contains(&whole), "{}", report(out));
}

/// 125, with `said` and each of `parts` after `opening` on stderr and in
/// `run_finished`'s error, and the agent left nothing.
#[track_caller]
fn stopped_with(case: &Case, out: &Output, opening: &str, parts: &[&str]) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{}", report(out));
    let error_line = stderr
        .lines()
        .find(|l| l.contains(opening))
        .unwrap_or_else(|| panic!("no setup error:\n{}", report(out)));
    let finished = run_finished(case);
    assert_eq!(finished["exit_status"], 125, "{finished}");
    let recorded = finished["error"].as_str().unwrap_or_default();
    for part in parts {
        assert!(error_line.contains(part), "{part:?} not said:\n{stderr}");
        assert!(recorded.contains(part), "{part:?} not recorded: {finished}");
    }
    assert!(!case.path("work/made-by-agent").exists());
    assert!(!stderr.contains("agent exited with status"), "{stderr}");
}

#[test]
fn a_masked_proc_is_a_setup_failure_not_the_agents_exit() {
    if !require_root("masked /proc", &["bwrap", "unshare", "setpriv", "chown"]) {
        return;
    }
    // What container engines do: a file mounted over part of /proc, which
    // makes the kernel refuse a fresh proc to a user namespace.
    let masked = ["/proc/keys", "/proc/timer_list", "/proc/kcore"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
    let case = Case::new();
    let file = agentfile(&case, WHOAMI);
    let unshare = find_tool("unshare").unwrap();
    let mask = format!("mount --bind /dev/null {masked} && exec \"$@\"");
    let out = run_as_user(
        &case,
        &[
            unshare.to_str().unwrap(),
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            &mask,
            "sh",
        ],
        &file,
    );
    // The preflight finds it before anything starts (bwrap would fail to
    // mount proc; `constle_sandbox::setup` names that too, behind it).
    refused_before_start(
        &case,
        &out,
        "a layer",
        &format!(
            "/proc: masked, so a fresh proc cannot be mounted (mounting proc in a new user, PID \
             and mount namespace returned EPERM; 1 paths under /proc are mounted over: {masked}); \
             to fix it, docker: --security-opt systempaths=unconfined; podman: --security-opt \
             unmask=/proc/*; kubernetes: securityContext.procMount: Unmasked, with \
             spec.hostUsers: false; `constle doctor` checks every layer (docs/containers.md)"
        ),
    );
    // A probe that failed is never remembered: the next run probes again.
    let passed = case.home().join("preflight");
    let remembered = fs::read_dir(&passed).map_or(0, Iterator::count);
    assert_eq!(remembered, 0, "{}", passed.display());
}

#[test]
fn a_seccomp_filter_refusing_namespaces_is_named_as_the_cause() {
    if !require_root("seccomp", &["bwrap", "python3", "setpriv", "chown"]) {
        return;
    }
    let case = Case::new();
    let file = agentfile(&case, WHOAMI);
    let filter = case.path("no_namespaces.py");
    fs::write(&filter, NO_NAMESPACES).unwrap();
    let python = find_tool("python3").unwrap();
    let out = run_as_user(
        &case,
        &[python.to_str().unwrap(), filter.to_str().unwrap()],
        &file,
    );
    // The preflight finds it before anything starts, and names seccomp,
    // not the kernel's setting that bwrap would guess.
    let max = fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap();
    refused_before_start(
        &case,
        &out,
        "layers",
        &format!(
            "user namespaces: blocked by seccomp (unshare(CLONE_NEWUSER) returned EPERM while \
             user.max_user_namespaces={}); system calls bwrap needs: refused by seccomp: clone \
             with namespace flags (EPERM), unshare (EPERM); not tried after that: mount, umount2, \
             pivot_root, sethostname; to fix it, docker: --security-opt \
             seccomp=deploy/container/seccomp.json; podman: --security-opt \
             seccomp=deploy/container/seccomp.json; kubernetes: securityContext.seccompProfile: \
             {{type: Localhost, localhostProfile: constle/seccomp.json}}, \
             deploy/container/seccomp.json copied there under the kubelet's seccomp root; \
             `constle doctor` checks every layer (docs/containers.md)",
            max.trim()
        ),
    );
}

#[test]
fn an_agent_that_says_what_bwrap_says_still_exits_with_its_own_status() {
    if !require_root("agent status", &["bwrap"]) {
        return;
    }
    let case = Case::new();
    let file = agentfile(
        &case,
        "echo \"bwrap: Can't mount proc on /newroot/proc: Operation not permitted\" >&2; exit 1",
    );
    let out = case.run(&["run", file.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", report(&out));
    assert!(stderr.contains("agent exited with status 1"), "{stderr}");
    assert!(!stderr.contains("could not be set up"), "{stderr}");
    let finished = run_finished(&case);
    assert_eq!(finished["exit_status"], 1, "{finished}");
    assert!(finished.get("error").is_none(), "{finished}");
}

#[test]
fn root_without_cap_sys_admin_runs_the_agent_as_any_user_would() {
    if !require_root("root without CAP_SYS_ADMIN", &["bwrap", "setpriv"]) {
        return;
    }
    let case = Case::new();
    let file = agentfile(&case, WHOAMI);
    let setpriv = find_tool("setpriv").unwrap();
    let out = run(
        &case,
        &[
            setpriv.to_str().unwrap().to_owned(),
            "--inh-caps=-sys_admin".to_owned(),
            "--bounding-set=-sys_admin".to_owned(),
            constle_bin().to_str().unwrap().to_owned(),
            "run".to_owned(),
            file.to_str().unwrap().to_owned(),
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(7), "{}", report(&out));
    // The agent: uid 1000 in its sandbox, no capabilities, no way to gain
    // any, under the sandbox's seccomp filter.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "1000",
            "1000",
            "CapEff:\t0000000000000000",
            "NoNewPrivs:\t1",
            "Seccomp:\t2"
        ],
        "{}",
        report(&out)
    );
    // Outside it, the agent is root, as constle is; the summary says so.
    let made = fs::metadata(case.path("work/made-by-agent")).unwrap();
    assert_eq!((made.uid(), made.gid()), (0, 0));
    assert!(
        stderr.contains("uid 1000, which is root (uid 0) outside it, as constle is"),
        "{stderr}"
    );
    assert!(!stderr.contains("never the host's root"), "{stderr}");
    assert_eq!(run_finished(&case)["exit_status"], 7);
}

/// An Agentfile in `dir` whose agent would leave a file in its work
/// directory there, `work/`.
fn agentfile_in(dir: &Path) {
    fs::create_dir_all(dir.join("work")).unwrap();
    fs::write(
        dir.join("agent.yaml"),
        "name: test-agent\nsandbox:\n  command: [\"sh\", \"-c\", \"echo x > made-by-agent\"]\n  workdir: ./work\n  network:\n    egress: none\n",
    )
    .unwrap();
}

/// `sh -c SCRIPT sh constle run agent.yaml` as root: `SCRIPT` prepares,
/// changes into the Agentfile's directory and runs `"$@"`.
fn run_after(case: &Case, script: &str) -> Output {
    let mut argv: Vec<String> = ["sh", "-c", script, "sh"].map(str::to_owned).to_vec();
    argv.extend([
        constle_bin().to_str().unwrap().to_owned(),
        "run".to_owned(),
        "agent.yaml".to_owned(),
    ]);
    run(case, &argv)
}

#[test]
fn a_work_directory_on_overlayfs_is_said_to_need_another_file_system() {
    if !require_root("idmap on overlayfs", &["bwrap", "unshare", "mount"]) {
        return;
    }
    let case = Case::new();
    for dir in ["lower", "upper", "overlay-work", "merged"] {
        fs::create_dir(case.path(dir)).unwrap();
    }
    agentfile_in(&case.path("lower"));
    // As a container's root file system is: overlayfs, here in a mount
    // namespace of the test's own.
    let p = |name| case.path(name).display().to_string();
    let script = format!(
        "exec unshare -m --propagation private sh -c 'mount -t overlay overlay \
         -o lowerdir={},upperdir={},workdir={} {merged} && cd {merged} && exec \"$@\"' sh \"$@\"",
        p("lower"),
        p("upper"),
        p("overlay-work"),
        merged = p("merged"),
    );
    let out = run_after(&case, &script);
    never_ran(
        &case,
        &out,
        "through an idmapped mount, which its file system does not support (Invalid argument",
        &["put the work directory on one that does (in a container, a volume)"],
    );
    assert!(!text(&out.stderr).contains("not permitted here"));
    assert!(!case.path("upper/work/made-by-agent").exists());
}

#[test]
fn root_in_a_user_namespace_of_its_own_is_said_not_to_be_permitted() {
    if !require_root("idmap in a user namespace", &["bwrap", "unshare", "mkfifo"]) {
        return;
    }
    let case = Case::new();
    agentfile_in(case.dir.path());
    // As root in a container with a user namespace of its own: every
    // capability there, ids 0-65535 mapped to the host's, and file
    // systems that belong to the host's user namespace. The maps are
    // written from outside once the namespace exists (FIFOs say when).
    let script = format!(
        "set -e; cd {dir}; mkfifo ready go; \
         unshare --user --mount sh -c 'echo > ready; read _ < go; exec \"$@\"' sh \"$@\" & \
         child=$!; read _ < ready; \
         echo '0 0 65536' > /proc/$child/uid_map; echo '0 0 65536' > /proc/$child/gid_map; \
         echo > go; wait $child",
        dir = case.dir.path().display()
    );
    let out = run_after(&case, &script);
    never_ran(
        &case,
        &out,
        "through an idmapped mount, which is not permitted here (Operation not permitted",
        &["run constle there as an unprivileged user"],
    );
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("does not support"), "{stderr}");
    assert!(
        !stderr.contains("refused the sandbox's namespaces"),
        "{stderr}"
    );
}

#[test]
fn root_with_a_read_only_cgroup_is_told_what_it_lacks_not_to_run_as_root() {
    if !require_root("limits as root", &["bwrap", "unshare", "findmnt", "mount"]) {
        return;
    }
    let case = Case::new();
    case.agentfile(
        "sandbox:\n  command: [\"true\"]\n  workdir: ./work\n  network:\n    egress: none\n  limits:\n    pids: 50\n",
    );
    // As a container's are: every cgroup file system read-only, here in a
    // mount namespace of the test's own.
    let script = "exec unshare -m --propagation private sh -c \
                  'for m in $(findmnt -rn -o TARGET -R /sys/fs/cgroup); do \
                  mount -o remount,bind,ro \"$m\"; done; exec \"$@\"' sh \"$@\"";
    let out = run_after(&case, script);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{}", report(&out));
    let said = "it runs as root, but the cgroup file system it sees is read-only or does not \
                delegate the controller to it";
    assert!(stderr.contains(said), "{stderr}");
    assert!(stderr.contains("pod's resources"), "{stderr}");
    assert!(!stderr.contains("run it as root"), "{stderr}");
    let finished = run_finished(&case);
    assert!(
        finished["error"]
            .as_str()
            .unwrap_or_default()
            .contains(said),
        "{finished}"
    );
}
