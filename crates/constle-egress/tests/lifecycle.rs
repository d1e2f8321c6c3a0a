//! The Squid child's life: start-up, its run directory, death, stop.

#![allow(clippy::expect_used, reason = "test helpers panic on setup failure")]

use std::path::Path;
use std::time::Duration;

use constle_egress::{EgressError, EgressPolicy, Squid};
use constle_manifest::Hostname;
use constle_testkit::{require_e2e, require_tools};

/// Squid and setpriv; no root needed (as root, Squid runs as `proxy`).
fn require_squid(test: &str) -> bool {
    require_tools(test, &["squid", "setpriv"])
}

fn policy() -> EgressPolicy {
    EgressPolicy::restricted([Hostname::new("api.example.test").expect("host")])
}

fn hosts_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("hosts");
    std::fs::write(&path, "203.0.113.9 api.example.test\n").expect("hosts");
    path
}

/// Whether `pid` is gone or a zombie (dead, not yet reaped).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn exited_resolves_when_squid_dies_and_the_proxy_is_gone() {
    if !require_squid("squid dies mid-run") {
        return;
    }
    let run_dir = tempfile::tempdir().expect("run dir");
    let hosts_dir = tempfile::tempdir().expect("dir");
    let mut squid = Squid::start(
        run_dir.path(),
        &policy(),
        Some(&hosts_file(hosts_dir.path())),
    )
    .await
    .expect("start");
    let mut events = squid.take_events().expect("events");
    let addr = squid.addr();
    let pid = squid.pid().expect("pid");
    // Not dead yet.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), squid.exited())
            .await
            .is_err()
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill squid");
    let status = tokio::time::timeout(Duration::from_secs(5), squid.exited())
        .await
        .expect("exited() resolves")
        .expect("status");
    assert!(!status.success());
    // Resolves again at once, and the pid is no longer claimed.
    assert_eq!(squid.exited().await.expect("status"), status);
    assert_eq!(squid.pid(), None);
    // Fail closed: nothing listens any more, and the event stream ends.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    let end = tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .expect("the channel ends");
    assert!(end.is_none(), "{end:?}");
    squid.stop().await;
}

#[test]
fn squid_dies_with_the_thread_that_started_it() {
    if !require_squid("parent-death signal") {
        return;
    }
    let run_dir = tempfile::tempdir().expect("run dir");
    let hosts_dir = tempfile::tempdir().expect("dir");
    let hosts = hosts_file(hosts_dir.path());
    let path = run_dir.path().to_path_buf();
    let pid = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let squid = Squid::start(&path, &policy(), Some(&hosts))
                .await
                .expect("start");
            let pid = squid.pid().expect("pid");
            let service = squid.service_name().to_owned();
            // Neither stop() nor Drop: only the kernel can end it now.
            std::mem::forget(squid);
            (pid, service)
        })
    })
    .join()
    .expect("thread");
    let (pid, service) = pid;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !dead(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "squid {pid} outlived the thread that started it"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // What stop() would have removed.
    for entry in std::fs::read_dir("/dev/shm").expect("shm").flatten() {
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&format!("{service}-")))
        {
            std::fs::remove_file(entry.path()).expect("remove segment");
        }
    }
}

#[tokio::test]
async fn start_is_fast_and_stop_leaves_no_process() {
    if !require_squid("start-up latency") {
        return;
    }
    let hosts_dir = tempfile::tempdir().expect("dir");
    let hosts = hosts_file(hosts_dir.path());
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let run_dir = tempfile::tempdir().expect("run dir");
        let t = std::time::Instant::now();
        let squid = Squid::start(run_dir.path(), &policy(), Some(&hosts))
            .await
            .expect("start");
        let total = t.elapsed();
        let pid = squid.pid().expect("pid");
        latencies.push((squid.start_latency(), total));
        let t = std::time::Instant::now();
        squid.stop().await;
        let stop = t.elapsed();
        assert!(dead(pid) || !Path::new(&format!("/proc/{pid}")).exists());
        eprintln!(
            "squid start: spawn→accepting {:?}, start() total {:?}, stop() {:?}",
            latencies.last().map(|l| l.0),
            total,
            stop
        );
    }
    latencies.sort();
    let median = latencies[latencies.len() / 2].1;
    assert!(median < Duration::from_secs(2), "median start {median:?}");
}

#[tokio::test]
async fn run_dir_must_be_private_plain_and_reachable() {
    if !require_e2e("run directory checks") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().expect("dir");

    let open = base.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let err = Squid::start(&open, &policy(), None)
        .await
        .expect_err("0777");
    assert!(matches!(err, EgressError::RunDir { .. }), "{err}");
    assert!(err.to_string().contains("open"), "{err}");

    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let spaced = base.path().join("a b");
    std::fs::create_dir(&spaced).expect("mkdir");
    std::fs::set_permissions(&spaced, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let err = Squid::start(&spaced, &policy(), None)
        .await
        .expect_err("space");
    assert!(matches!(err, EgressError::UnsafePath { .. }), "{err}");

    // As root Squid runs as `proxy`, which cannot enter a 0700 root directory.
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let hidden = base.path().join("hidden");
    std::fs::create_dir(&hidden).expect("mkdir");
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let err = Squid::start(&hidden, &policy(), None)
        .await
        .expect_err("unreachable");
    assert!(matches!(err, EgressError::NotSearchable { .. }), "{err}");
    assert!(
        err.to_string().contains(&base.path().display().to_string()),
        "{err}"
    );

    let missing = base.path().join("missing");
    let err = Squid::start(&missing, &policy(), None)
        .await
        .expect_err("missing");
    assert!(err.to_string().contains("missing"), "{err}");
}
