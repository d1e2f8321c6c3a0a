//! `constle doctor` as a user runs it: here as the caller, as a plain user
//! (`setpriv`, when the suite is root), and with a layer taken away for
//! real: `/proc` masked in a private mount namespace, as a container masks
//! it; limits declared by a user whose cgroup is not delegated; `unshare`
//! refused by a seccomp filter (`tests/doctor/seccomp_unshare.py`), as
//! Docker's default profile refuses it; a work directory on a file system
//! without idmapped mounts (ramfs), and one whose mount belongs to another
//! user namespace's root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use constle_testkit::{find_tool, require_root, require_tools};
use serde_json::Value;

/// The checks, in the order every report lists them.
const IDS: [&str; 8] = [
    "user",
    "user_namespaces",
    "system_calls",
    "proc_mount",
    "idmapped_mounts",
    "cgroup_delegation",
    "bwrap",
    "squid",
];

/// The plain user the root variants run as.
const USER: &str = "1000";

/// A directory anyone may enter, holding a copy of the binary (the build
/// may live where a plain user cannot enter) and the Agentfiles.
struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        let dir = tempfile::Builder::new()
            .prefix("constle-doctor-")
            .tempdir_in("/tmp")
            .unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::copy(env!("CARGO_BIN_EXE_constle"), dir.path().join("constle")).unwrap();
        Case { dir }
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("constle")
    }

    /// An Agentfile with `sandbox_extra` appended to its `sandbox:`, and
    /// its work directory, made writable by anyone.
    fn agentfile(&self, sandbox_extra: &str) -> PathBuf {
        let work = self.dir.path().join("work");
        fs::create_dir_all(&work).unwrap();
        fs::set_permissions(&work, fs::Permissions::from_mode(0o777)).unwrap();
        self.agentfile_with(&work, sandbox_extra)
    }

    /// An Agentfile whose work directory is `work` (not made here).
    fn agentfile_with(&self, work: &Path, sandbox_extra: &str) -> PathBuf {
        let file = self.dir.path().join("agent.yaml");
        fs::write(
            &file,
            format!(
                "name: doctor-test\nsandbox:\n  command: [\"true\"]\n  workdir: {}\n{sandbox_extra}",
                work.display()
            ),
        )
        .unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        file
    }

    /// `constle ARGS` as the caller.
    fn run(&self, args: &[&str]) -> Output {
        Command::new(self.bin())
            .args(args)
            .env("NO_COLOR", "1")
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }

    /// `sh -c SCRIPT` in a mount namespace of its own, where `$CONSTLE`
    /// is the binary and `$AS_USER` runs a command as [`USER`].
    fn run_in_own_mounts(&self, script: &str) -> Output {
        let setpriv = find_tool("setpriv").unwrap();
        Command::new(find_tool("unshare").unwrap())
            .args(["--mount", "--propagation", "private", "sh", "-c", script])
            .env("NO_COLOR", "1")
            .env("CONSTLE", self.bin())
            .env(
                "AS_USER",
                format!(
                    "{} --reuid {USER} --regid {USER} --clear-groups",
                    setpriv.display()
                ),
            )
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }
}

/// The JSON report in `out`, checked for its shape: one line, `ok`, and
/// each check with every field, in order; `ok` and the exit status agree
/// with the required checks' statuses.
fn report(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    // One object on one line, as `validate` prints each of its own.
    assert!(
        stdout.ends_with('\n') && stdout.lines().count() == 1,
        "{stdout}"
    );
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let checks = report["checks"].as_array().unwrap();
    let ids: Vec<&str> = checks.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, IDS);
    for check in checks {
        assert!(check["required"].is_boolean(), "{check}");
        let status = check["status"].as_str().unwrap();
        assert!(["ok", "missing", "unknown"].contains(&status), "{check}");
        assert!(!check["finding"].as_str().unwrap().is_empty(), "{check}");
        for engine in ["docker", "podman", "kubernetes"] {
            let fix = &check["fixes"][engine];
            assert!(fix.is_null() || fix.is_string(), "{check}");
            if status != "missing" {
                assert!(fix.is_null(), "a fix for a layer that is there: {check}");
            }
        }
    }
    let blocked = checks
        .iter()
        .any(|c| c["required"] == true && c["status"] == "missing");
    assert_eq!(report["ok"], !blocked, "{report}");
    assert_eq!(
        out.status.code(),
        Some(if blocked { 1 } else { 0 }),
        "{report}"
    );
    report
}

fn check<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap()
}

/// The caller's uid, from `id -u`.
fn my_uid() -> String {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn is_root() -> bool {
    my_uid() == "0"
}

#[test]
fn here_as_the_caller() {
    let case = Case::new();
    let report = report(&case.run(&["doctor", "--format", "json"]));
    let user = check(&report, "user")["finding"].as_str().unwrap();
    assert!(
        user.starts_with(&format!("user: uid {} (", my_uid())),
        "{user}"
    );
    // Without an Agentfile, limits are optional and the proxy is not.
    assert_eq!(check(&report, "cgroup_delegation")["required"], false);
    assert_eq!(check(&report, "squid")["required"], true);
    assert_eq!(check(&report, "bwrap")["required"], true);
    if find_tool("bwrap").is_some() {
        let bwrap = check(&report, "bwrap")["finding"].as_str().unwrap();
        assert!(bwrap.contains("(bubblewrap "), "{bwrap}");
    }
}

#[test]
fn text_is_one_aligned_line_per_check_then_the_verdict() {
    let case = Case::new();
    let out = case.run(&["doctor"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let finding_at: Vec<usize> = IDS
        .iter()
        .zip(&lines)
        .map(|(id, line)| {
            let (status, rest) = line.split_once(' ').unwrap();
            assert!(["ok", "MISSING", "unknown"].contains(&status), "{line}");
            assert!(rest.trim_start().starts_with(id), "{line}");
            line.find(if line.contains("required") {
                "required  "
            } else {
                "optional  "
            })
            .unwrap()
        })
        .collect();
    assert!(finding_at.iter().all(|at| *at == finding_at[0]), "{stdout}");
    let last = lines.last().unwrap();
    match out.status.code() {
        Some(0) => assert_eq!(*last, "✓ every layer the sandbox needs is here"),
        _ => assert!(last.starts_with("✗ missing, so a run stops: "), "{stdout}"),
    }
}

#[test]
fn an_agentfile_decides_what_is_required() {
    let case = Case::new();
    let file = case.agentfile("  network:\n    egress: none\n  limits:\n    pids: 64\n");
    let report = report(&case.run(&["doctor", file.to_str().unwrap(), "--format", "json"]));
    assert_eq!(check(&report, "squid")["required"], false);
    assert_eq!(check(&report, "cgroup_delegation")["required"], true);
    let cgroups = check(&report, "cgroup_delegation")["finding"]
        .as_str()
        .unwrap();
    assert!(
        cgroups.starts_with("cgroups for sandbox.limits: "),
        "{cgroups}"
    );
    let idmap = check(&report, "idmapped_mounts");
    assert_eq!(idmap["required"], is_root());
    if is_root() && idmap["status"] == "ok" {
        let finding = idmap["finding"].as_str().unwrap();
        assert!(
            finding.contains(&*case.dir.path().to_string_lossy()),
            "{finding}"
        );
    }
}

#[test]
fn an_invalid_or_missing_agentfile_is_a_usage_error() {
    let case = Case::new();
    let bad = case.dir.path().join("bad.yaml");
    fs::write(&bad, "name: [\n").unwrap();
    let out = case.run(&["doctor", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.yaml is invalid; nothing was checked"),
        "{stderr}"
    );
    let out = case.run(&["doctor", "/nonexistent/agent.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let out = case.run(&["doctor", "--format", "yaml"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn as_a_plain_user() {
    if !require_root("doctor as a plain user", &["setpriv", "unshare"]) {
        return;
    }
    let case = Case::new();
    let report = report(&case.run_in_own_mounts("exec $AS_USER $CONSTLE doctor --format json"));
    let user = check(&report, "user")["finding"].as_str().unwrap();
    assert!(user.starts_with(&format!("user: uid {USER} (")), "{user}");
    assert!(user.ends_with("not root: the unprivileged path"), "{user}");
    let idmap = check(&report, "idmapped_mounts");
    assert_eq!(idmap["required"], false);
    assert_eq!(idmap["status"], "unknown");
    assert_eq!(check(&report, "proc_mount")["status"], "ok", "{report}");
}

#[test]
fn a_masked_proc_is_missing_with_its_fixes() {
    if !require_root("doctor under a masked /proc", &["setpriv", "unshare"]) {
        return;
    }
    let case = Case::new();
    // What docker and podman do to /proc: files masked with /dev/null, and
    // /proc/sys read-only.
    let masked = ["/proc/kcore", "/proc/keys", "/proc/timer_list"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
    let script = format!(
        "mount --bind /dev/null {masked} && mount --bind /proc/sys /proc/sys && \
         mount -o remount,bind,ro /proc/sys && "
    );
    let out = case.run_in_own_mounts(&format!(
        "{script} exec $AS_USER $CONSTLE doctor --format json"
    ));
    let report = report(&out);
    assert_eq!(out.status.code(), Some(1));
    let proc = check(&report, "proc_mount");
    assert_eq!(proc["status"], "missing");
    assert_eq!(proc["required"], true);
    let finding = proc["finding"].as_str().unwrap();
    assert!(
        finding.starts_with("/proc: masked, so a fresh proc cannot be mounted (mounting proc in a new user, PID and mount namespace returned EPERM; "),
        "{finding}"
    );
    assert!(finding.contains(masked), "{finding}");
    assert_eq!(
        proc["fixes"]["docker"],
        "--security-opt systempaths=unconfined"
    );
    assert_eq!(proc["fixes"]["podman"], "--security-opt unmask=/proc/*");
    assert_eq!(
        proc["fixes"]["kubernetes"],
        "securityContext.procMount: Unmasked, with spec.hostUsers: false"
    );
    // The text says the same.
    let out = case.run_in_own_mounts(&format!("{script} exec $AS_USER $CONSTLE doctor"));
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("\nMISSING proc_mount        required  /proc: masked"),
        "{stdout}"
    );
    assert!(
        stdout.contains("to fix proc_mount:\n  docker      --security-opt systempaths=unconfined\n  podman      --security-opt unmask=/proc/*\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("✗ missing, so a run stops: proc_mount\n"),
        "{stdout}"
    );
}

#[test]
fn limits_without_a_delegated_cgroup_are_missing() {
    if !require_root(
        "doctor with limits as a plain user",
        &["setpriv", "unshare"],
    ) {
        return;
    }
    let case = Case::new();
    let file = case.agentfile("  limits:\n    pids: 64\n");
    let out = case.run_in_own_mounts(&format!(
        "exec $AS_USER $CONSTLE doctor {} --format json",
        file.display()
    ));
    let report = report(&out);
    let cgroups = check(&report, "cgroup_delegation");
    assert_eq!(cgroups["required"], true);
    assert_eq!(cgroups["status"], "missing", "{report}");
    let finding = cgroups["finding"].as_str().unwrap();
    assert!(
        finding.starts_with("cgroups for sandbox.limits: cannot enforce the pids limit: "),
        "{finding}"
    );
    assert!(
        cgroups["fixes"]["kubernetes"]
            .as_str()
            .unwrap()
            .starts_with("resources.limits on the container")
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn seccomp_refusing_unshare_is_named_as_the_cause() {
    if !require_tools("doctor under a seccomp filter", &["python3"]) {
        return;
    }
    let case = Case::new();
    let filter = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doctor/seccomp_unshare.py");
    let bin = case.bin();
    let out = Command::new(find_tool("python3").unwrap())
        .arg(filter)
        .arg(&bin)
        .args(["doctor", "--format", "json"])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    let report = report(&out);
    assert_eq!(out.status.code(), Some(1));
    let userns = check(&report, "user_namespaces");
    assert_eq!(userns["status"], "missing");
    let finding = userns["finding"].as_str().unwrap();
    assert!(
        finding.starts_with(
            "user namespaces: blocked by seccomp (unshare(CLONE_NEWUSER) returned EPERM while "
        ),
        "{finding}"
    );
    assert!(finding.contains("user.max_user_namespaces="), "{finding}");
    let docker = userns["fixes"]["docker"].as_str().unwrap();
    assert!(docker.starts_with("--security-opt seccomp="), "{docker}");
    let calls = check(&report, "system_calls");
    assert_eq!(calls["status"], "missing");
    assert_eq!(
        calls["finding"],
        "system calls bwrap needs: refused by seccomp: unshare (EPERM); not tried after that: \
         mount, umount2, pivot_root, sethostname"
    );
    assert_eq!(check(&report, "proc_mount")["status"], "unknown");
}

#[test]
fn idmapped_mounts_unsupported_is_told_from_not_permitted() {
    if !require_root(
        "doctor on a file system without idmapped mounts",
        &["unshare"],
    ) {
        return;
    }
    let case = Case::new();
    let fs_dir = case.dir.path().join("ramfs");
    fs::create_dir(&fs_dir).unwrap();
    let file = case.agentfile_with(&fs_dir.join("work"), "");
    // ramfs has no idmapped mounts.
    let out = case.run_in_own_mounts(&format!(
        "mount -t ramfs none {0} && mkdir {0}/work && exec $CONSTLE doctor {1} --format json",
        fs_dir.display(),
        file.display()
    ));
    let on_ramfs = report(&out);
    let idmap = check(&on_ramfs, "idmapped_mounts");
    assert_eq!(idmap["required"], true, "{on_ramfs}");
    assert_eq!(idmap["status"], "missing", "{on_ramfs}");
    let finding = idmap["finding"].as_str().unwrap();
    assert!(
        finding.starts_with(&format!(
            "idmapped mounts: unsupported by this file system, {}/work (ramfs) (",
            fs_dir.display()
        )),
        "{finding}"
    );
    assert!(finding.contains("Invalid argument"), "{finding}");
    assert_eq!(out.status.code(), Some(1));

    // Root of a user namespace of its own (as in a rootless container):
    // the work directory's mount belongs to the host's.
    let file = case.agentfile("");
    let out = Command::new(find_tool("unshare").unwrap())
        .args(["--user", "--map-root-user"])
        .arg(case.bin())
        .args(["doctor", file.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let report = report(&out);
    let idmap = check(&report, "idmapped_mounts");
    assert_eq!(idmap["status"], "missing", "{report}");
    let finding = idmap["finding"].as_str().unwrap();
    assert!(
        finding.starts_with("idmapped mounts: not permitted on "),
        "{finding}"
    );
    assert!(
        finding.ends_with(
            "this root does not own the mount, as in a container with a user namespace of its own"
        ),
        "{finding}"
    );
    assert_eq!(
        idmap["fixes"]["docker"].as_str().unwrap(),
        "--user 1000:1000 (constle as a non-root user needs no idmapped mount)"
    );
}
