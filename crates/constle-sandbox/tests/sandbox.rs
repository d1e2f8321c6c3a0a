//! End-to-end tests of the sandbox, each proved from inside a real `bwrap`.
//!
//! This test binary has its own `main` (`harness = false`): started as
//! `<this exe> sandbox-init …` it is the sandbox's first process, exactly
//! as the `constle` binary is (it calls [`init_main`]), so
//! `std::env::current_exe()` serves as `constle_exe`. Otherwise it runs the
//! tests through `libtest-mimic` (same flags and output as `cargo test`).
//!
//! The tests need root, `/usr/bin/bwrap` and `/usr/bin/python3` (the probes
//! are Python and sh scripts run as the agent). Without them each test prints
//! `skipped: REASON`, unless `CONSTLE_E2E=require`, which turns a skip into
//! a failure. No test sends traffic anywhere: the network probes dial
//! documentation addresses from inside a network namespace that has no route
//! to them, and the relays run over loopback and Unix sockets.

// A harness-less test binary is not compiled with `cfg(test)`, so clippy's
// test allowances do not apply; the tests report through panics and stderr.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use constle_sandbox::{
    AGENT_HOME, CommandIo, DEFAULT_PATH, Door, HOSTNAME, INIT_SUBCOMMAND, LAUNCH_SUBCOMMAND,
    NameService, Network, Private, SandboxError, SandboxSpec, TmpfsSizes, init_main, launch_main,
    receive_sockets, sandbox_command, seccomp_programs,
};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use sha2::{Digest, Sha256};
use tempfile::TempDir;

const PYTHON: &str = "/usr/bin/python3";
const BWRAP: &str = "/usr/bin/bwrap";
/// No sandboxed probe takes this long; a hung one fails its test.
const TIMEOUT: Duration = Duration::from_secs(60);

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == INIT_SUBCOMMAND) {
        std::process::exit(init_main(args[2..].to_vec()));
    }
    if args.get(1).is_some_and(|a| a == LAUNCH_SUBCOMMAND) {
        std::process::exit(launch_main(args[2..].to_vec()));
    }
    let tests = vec![
        e2e("network_is_unreachable_v4_and_v6", network_is_unreachable),
        e2e(
            "a_name_service_namespace_reaches_the_host_only_as_a_peer",
            name_service_namespace,
        ),
        e2e(
            "host_abstract_sockets_unreachable",
            host_abstract_sockets_unreachable,
        ),
        e2e(
            "environment_is_exactly_the_spec",
            environment_is_exactly_the_spec,
        ),
        e2e("constle_home_is_invisible", constle_home_is_invisible),
        e2e("only_workdir_is_writable", only_workdir_is_writable),
        e2e(
            "etc_holds_only_the_listed_files",
            etc_holds_only_the_listed_files,
        ),
        e2e("workdir_under_tmp", workdir_under_tmp),
        e2e("tmp_is_private", tmp_is_private),
        e2e("home_is_private_and_empty", home_is_private_and_empty),
        e2e(
            "memory_file_systems_are_bounded",
            memory_file_systems_are_bounded,
        ),
        e2e("own_pid_namespace", own_pid_namespace),
        e2e("no_new_privs_no_capabilities_no_userns", no_privileges),
        e2e("hostname", hostname),
        e2e("stdin_is_not_the_terminal", stdin_is_not_the_terminal),
        e2e(
            "no_keystroke_injection_into_the_terminal",
            no_keystroke_injection_into_the_terminal,
        ),
        e2e("exit_status_is_propagated", exit_status_is_propagated),
        e2e("host_fds_do_not_leak_in", host_fds_do_not_leak_in),
        e2e("door_concurrent_connections", door_concurrent_connections),
        e2e("door_large_transfer", door_large_transfer),
        e2e("door_half_close_both_ways", door_half_close_both_ways),
        e2e("two_doors", two_doors),
        e2e(
            "stdio_socket_is_the_commands_stdin_and_stdout",
            stdio_socket_is_the_commands_stdin_and_stdout,
        ),
        e2e(
            "stdio_command_that_cannot_start_is_reported",
            stdio_command_that_cannot_start_is_reported,
        ),
        e2e("door_throughput", door_throughput),
        e2e("door_host_down_refuses", door_host_down_refuses),
        e2e("door_channel_down_fails_run", door_channel_down_fails_run),
        e2e(
            "killing_bwrap_kills_everything",
            killing_bwrap_kills_everything,
        ),
        e2e(
            "killing_the_parent_kills_everything",
            killing_the_parent_kills_everything,
        ),
        e2e(
            "closing_the_lifeline_ends_the_sandbox",
            closing_the_lifeline_ends_the_sandbox,
        ),
        e2e(
            "agent_exit_kills_its_background_processes",
            agent_exit_kills_background,
        ),
        e2e("rootfs_replaces_system_dirs", rootfs_replaces_system_dirs),
        e2e("startup_overhead", startup_overhead),
        e2e(
            "seccomp_filter_seen_from_inside",
            seccomp_filter_seen_from_inside,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

// ---------------------------------------------------------------------------
// Harness

type TestResult = Result<(), Failed>;

fn e2e(name: &str, test: fn() -> TestResult) -> Trial {
    Trial::ignorable_test(name, move || {
        if let Some(reason) = missing_prerequisite() {
            if std::env::var_os("CONSTLE_E2E").is_some_and(|v| v == "require") {
                panic!("CONSTLE_E2E=require, but {reason}");
            }
            eprintln!("skipped: {reason}");
            return Ok(Completion::ignored_with(format!("skipped: {reason}")));
        }
        test().map(|()| Completion::Completed)
    })
}

fn missing_prerequisite() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned));
    if euid.as_deref() != Some("0") {
        return Some("not root".into());
    }
    if !Path::new(BWRAP).is_file() {
        return Some(format!("{BWRAP} is missing (install bubblewrap)"));
    }
    if !Path::new(PYTHON).is_file() {
        return Some(format!("{PYTHON} is missing"));
    }
    None
}

/// A work directory and a spec around it. Everything lives under
/// `CARGO_TARGET_TMPDIR`, not `/tmp`, so that a host path being invisible
/// inside is not merely `/tmp` being private.
struct Fixture {
    dir: TempDir,
    workdir: PathBuf,
    /// In the system's temporary directory, whose parents anyone may
    /// search (the launcher's stage must be).
    stage: TempDir,
    /// The host id the sandbox runs as (the tests run as root).
    host_id: constle_hostids::HostId,
}

impl Fixture {
    fn new() -> Fixture {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(base).unwrap();
        let dir = tempfile::tempdir_in(base).unwrap();
        let workdir = dir.path().join("work");
        std::fs::create_dir(&workdir).unwrap();
        let stage = tempfile::tempdir().unwrap();
        Fixture {
            dir,
            workdir,
            stage,
            host_id: constle_hostids::HostId::allocate().unwrap(),
        }
    }

    fn spec(&self, command: &[&str]) -> SandboxSpec {
        SandboxSpec {
            command: command.iter().map(|s| s.to_string()).collect(),
            workdir: self.workdir.clone(),
            env: BTreeMap::new(),
            rootfs: None,
            stdio: CommandIo::Inherit,
            constle_exe: std::env::current_exe().unwrap(),
            private: Vec::new(),
            stage: self.stage.path().to_path_buf(),
            cgroup_procs: Vec::new(),
            host_id: Some(self.host_id.get()),
            tmpfs: TmpfsSizes::DEFAULT,
            workdir_inode: None,
            etc_files: BTreeMap::new(),
            home: None,
            home_inode: None,
            network: None,
        }
    }

    fn python(&self, script: &str, args: &[&str]) -> SandboxSpec {
        let mut command = vec![PYTHON, "-c", script];
        command.extend_from_slice(args);
        self.spec(&command)
    }

    /// Doors on `ports`, each served by [`serve`] on the host once its
    /// listener arrives, launch after launch: the network to put in the
    /// spec, and what each door's `HALF` connections received.
    fn doors(&self, doors: &[(&str, u16)]) -> (Network, Vec<Arc<Mutex<Vec<u8>>>>) {
        let channel = self.dir.path().join("network.sock");
        let listener = UnixListener::bind(&channel).unwrap();
        let doors: Vec<Door> = doors
            .iter()
            .map(|(name, port)| Door {
                name: name.to_string(),
                listen: format!("127.0.0.1:{port}").parse().unwrap(),
            })
            .collect();
        let seen: Vec<_> = doors.iter().map(|_| Arc::default()).collect();
        let (served, spec) = (seen.clone(), doors.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let sockets = receive_sockets(&stream, &doors, false).unwrap();
                for ((listener, door), seen) in sockets.doors.into_iter().zip(&doors).zip(&served) {
                    serve(listener, &door.name, Arc::clone(seen));
                }
            }
        });
        let network = Network {
            channel,
            doors: spec,
            name_service: None,
        };
        (network, seen)
    }
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    /// `key=value` lines of stdout.
    fn values(&self) -> BTreeMap<String, String> {
        self.stdout
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn value(&self, key: &str) -> String {
        self.values()
            .remove(key)
            .unwrap_or_else(|| panic!("no {key}= in the probe's output\n{self}"))
    }

    fn assert_success(&self) {
        assert!(self.status.success(), "the sandbox failed\n{self}");
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status: {:?}\n--- stdout\n{}--- stderr\n{}---",
            self.status, self.stdout, self.stderr
        )
    }
}

fn run_spec(spec: &SandboxSpec) -> Run {
    run(sandbox_command(spec).unwrap())
}

/// Runs to completion with output captured; kills the sandbox after
/// [`TIMEOUT`].
fn run(mut cmd: Command) -> Run {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn bwrap");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the sandbox did not finish within {TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(2));
    };
    Run {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Serves a door's listener. The first line of each connection picks the
/// behaviour:
/// - `NAME`: answers the server's name;
/// - `ECHO`: echoes until EOF, then closes its writing side;
/// - `SINK`: reads to EOF, then answers `<length> <sha256>` (so it answers
///   only if the client's half-close arrived);
/// - `SOURCE <n>`: sends `n` bytes of [`pattern`], then closes;
/// - `HALF`: sends `bye`, closes its writing side, then records everything it
///   still receives (so the client can still send after the server's
///   half-close) into `seen`.
fn serve(listener: TcpListener, name: &str, seen: Arc<Mutex<Vec<u8>>>) {
    let name = name.to_owned();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { break };
            let name = name.clone();
            let seen = Arc::clone(&seen);
            thread::spawn(move || {
                let _ = handle(conn, &name, &seen);
            });
        }
    });
}

fn handle(mut conn: TcpStream, name: &str, seen: &Mutex<Vec<u8>>) -> std::io::Result<()> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while conn.read(&mut byte)? == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let mut words = line.split_whitespace();
    match words.next() {
        Some("NAME") => conn.write_all(format!("{name}\n").as_bytes())?,
        Some("ECHO") => {
            let mut buf = vec![0u8; 65536];
            loop {
                let n = conn.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                conn.write_all(&buf[..n])?;
            }
        }
        Some("SINK") => {
            let mut hasher = Sha256::new();
            let mut len = 0u64;
            let mut buf = vec![0u8; 65536];
            loop {
                let n = conn.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                len += n as u64;
                hasher.update(&buf[..n]);
            }
            conn.write_all(format!("{len} {}\n", hex(&hasher.finalize())).as_bytes())?;
        }
        Some("SOURCE") => {
            let mut n: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
            // whole periods of the pattern, so every chunk starts alike
            let chunk = pattern(251 * 1024);
            while n > 0 {
                let len = n.min(chunk.len());
                conn.write_all(&chunk[..len])?;
                n -= len;
            }
        }
        Some("HALF") => {
            conn.write_all(b"bye\n")?;
            conn.shutdown(Shutdown::Write)?;
            let mut rest = Vec::new();
            conn.read_to_end(&mut rest)?;
            seen.lock().unwrap().extend_from_slice(&rest);
        }
        _ => {}
    }
    conn.shutdown(Shutdown::Write)
}

/// The bytes `SOURCE` sends (and the Python probes rebuild).
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check(cond: bool, msg: impl FnOnce() -> String) -> TestResult {
    if cond { Ok(()) } else { Err(msg().into()) }
}

/// All host processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(marker)
        {
            pids.push(pid);
        }
    }
    pids
}

/// How many processes run the agent's Python with `marker`.
fn agent_processes(marker: &str) -> usize {
    processes_with(marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(PYTHON.as_bytes()))
        })
        .count()
}

/// Waits until no process carries `marker`; on timeout, kills the
/// leftovers (this test's own processes, found by their unique marker) and
/// fails.
fn wait_until_gone(marker: &str) -> TestResult {
    let gone = wait_until("no sandbox process is left", Duration::from_secs(5), || {
        processes_with(marker).is_empty()
    });
    if gone.is_err() {
        let left: Vec<String> = processes_with(marker)
            .into_iter()
            .map(|pid| {
                let status =
                    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let state = status
                    .lines()
                    .find(|l| l.starts_with("State:"))
                    .unwrap_or("");
                let ppid = status
                    .lines()
                    .find(|l| l.starts_with("PPid:"))
                    .unwrap_or("");
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                format!("{pid} {state} {ppid} {}", &cmd[..cmd.len().min(60)])
            })
            .collect();
        for pid in processes_with(marker) {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .status();
        }
        return Err(format!("processes of the sandbox outlived it: {left:?}").into());
    }
    Ok(())
}

fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) -> TestResult {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() > deadline {
            return Err(format!("timed out after {timeout:?} waiting until {what}").into());
        }
        thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

// ---------------------------------------------------------------------------
// Network

fn network_is_unreachable() -> TestResult {
    let fx = Fixture::new();
    let run = run_spec(&fx.python(
        r#"
import errno, socket
for name, family, addr in (("v4", socket.AF_INET, ("203.0.113.10", 443)),
                           ("v6", socket.AF_INET6, ("2001:db8::10", 443))):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(addr)
        print(f"{name}=CONNECTED")
    except OSError as e:
        print(f"{name}={errno.errorcode.get(e.errno, e.errno)} {e.strerror}")
    u = socket.socket(family, socket.SOCK_DGRAM)
    try:
        u.sendto(b"x", addr)
        print(f"{name}_udp=SENT")
    except OSError as e:
        print(f"{name}_udp={errno.errorcode.get(e.errno, e.errno)}")
ifaces = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
print("interfaces=" + ",".join(sorted(ifaces)))
"#,
        &[],
    ));
    run.assert_success();
    for family in ["v4", "v6"] {
        check(
            run.value(family) == "ENETUNREACH Network is unreachable",
            || format!("{family}: {}", run.value(family)),
        )?;
        check(run.value(&format!("{family}_udp")) == "ENETUNREACH", || {
            format!("{family} udp: {run}")
        })?;
    }
    check(run.value("interfaces") == "lo", || {
        format!("interfaces: {run}")
    })
}

/// With a name service, the launcher's namespace: the host receives its
/// sockets; a placeholder's port 443 reaches the capture listener (the
/// accepted stream's local address is the placeholder), its other ports
/// are refused at once and seen by the SYN watch, DNS reaches the host,
/// and every other address still has no route.
fn name_service_namespace() -> TestResult {
    use std::os::unix::net::UnixListener;
    let fx = Fixture::new();
    let channel = fx.dir.path().join("network.sock");
    let listener = UnixListener::bind(&channel).unwrap();
    let mut spec = fx.python(
        r#"
import errno, socket
def attempt(name, family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(addr)
        s.sendall(name.encode())
        s.recv(1)
        print(f"{name}=CONNECTED")
    except OSError as e:
        print(f"{name}={errno.errorcode.get(e.errno, e.errno)}")
attempt("v4", socket.AF_INET, ("198.18.0.7", 443))
attempt("v6", socket.AF_INET6, ("2001:2::c612:7", 443))
attempt("v4_other_port", socket.AF_INET, ("198.18.0.7", 80))
attempt("v6_other_port", socket.AF_INET6, ("2001:2::c612:7", 8443))
attempt("elsewhere", socket.AF_INET, ("203.0.113.10", 443))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"query", ("127.0.0.1", 53))
print("resolv=" + open("/etc/resolv.conf").read().split()[1])
"#,
        &[],
    );
    spec.network = Some(Network {
        channel: channel.clone(),
        doors: Vec::new(),
        name_service: Some(NameService {
            local_routes: vec![
                ("198.18.0.0".parse().unwrap(), 15),
                ("2001:2::".parse().unwrap(), 48),
            ],
        }),
    });
    let host = thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let sockets = receive_sockets(&stream, &[], true).unwrap().names.unwrap();
        let mut seen = Vec::new();
        for capture in [&sockets.capture_v4, &sockets.capture_v6] {
            let (mut conn, _) = capture.accept().unwrap();
            let mut name = [0u8; 2];
            conn.read_exact(&mut name).unwrap();
            conn.write_all(b"!").unwrap();
            seen.push(format!(
                "{} {}",
                String::from_utf8_lossy(&name),
                conn.local_addr().unwrap().ip()
            ));
        }
        let mut datagram = [0u8; 16];
        let (n, _) = sockets.dns_udp.recv_from(&mut datagram).unwrap();
        seen.push(String::from_utf8_lossy(&datagram[..n]).into_owned());
        seen.push(format!("syn to port {}", syn_port(&sockets.syn_v4, true)));
        seen.push(format!("syn to port {}", syn_port(&sockets.syn_v6, false)));
        // The kernel's filter kept nothing else: no DNS, no tunnel's
        // segments, no SYN to port 443.
        for raw in [&sockets.syn_v4, &sockets.syn_v6] {
            let mut file = std::fs::File::from(raw.try_clone().unwrap());
            nix::fcntl::fcntl(
                &file,
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            )
            .unwrap();
            let mut rest = [0u8; 128];
            let left = file.read(&mut rest).map_err(|e| e.kind());
            seen.push(format!("then {left:?}"));
        }
        seen
    });
    let run = run_spec(&spec);
    run.assert_success();
    let seen = host.join().unwrap();
    check(
        seen == [
            "v4 198.18.0.7",
            "v6 2001:2::c612:7",
            "query",
            "syn to port 80",
            "syn to port 8443",
            "then Err(WouldBlock)",
            "then Err(WouldBlock)",
        ],
        || format!("the host saw {seen:?}\n{run}"),
    )?;
    for (key, expected) in [
        ("v4", "CONNECTED"),
        ("v6", "CONNECTED"),
        ("v4_other_port", "ECONNREFUSED"),
        ("v6_other_port", "ECONNREFUSED"),
        ("elsewhere", "ENETUNREACH"),
        ("resolv", "127.0.0.1"),
    ] {
        check(run.value(key) == expected, || format!("{key}: {run}"))?;
    }
    Ok(())
}

/// The destination port of the first packet the raw socket holds (IPv4:
/// the IP header first; IPv6: the TCP header only): a SYN, the filter
/// keeping nothing else.
fn syn_port(raw: &std::os::fd::OwnedFd, ipv4: bool) -> u16 {
    let mut file = std::fs::File::from(raw.try_clone().unwrap());
    let mut packet = [0u8; 128];
    let n = file.read(&mut packet).unwrap();
    let header = match ipv4 {
        true => usize::from(packet[0] & 0x0f) * 4,
        false => 0,
    };
    let tcp = &packet[header..n];
    assert_eq!(tcp[13] & 0x12, 0x02, "not a SYN alone");
    u16::from_be_bytes([tcp[2], tcp[3]])
}

fn host_abstract_sockets_unreachable() -> TestResult {
    use std::os::linux::net::SocketAddrExt;
    let name = unique("constle-test-abstract");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let fx = Fixture::new();
    let run = run_spec(&fx.python(
        r#"
import errno, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0" + sys.argv[1])
    print("abstract=CONNECTED")
except OSError as e:
    print("abstract=" + errno.errorcode.get(e.errno, str(e.errno)))
"#,
        &[&name],
    ));
    run.assert_success();
    check(run.value("abstract") == "ECONNREFUSED", || run.to_string())?;
    check(listener.accept().is_err(), || {
        "the host listener got a connection".into()
    })
}

// ---------------------------------------------------------------------------
// Environment and files

fn environment_is_exactly_the_spec() -> TestResult {
    let fx = Fixture::new();
    // No PATH in the spec: the default one.
    let mut spec = fx.spec(&["env"]);
    spec.env.insert("FOO".into(), "bar baz".into());
    spec.env
        .insert("HTTPS_PROXY".into(), "http://127.0.0.1:3128".into());
    let mut cmd = sandbox_command(&spec).unwrap();
    // As if the caller had let its environment through: bwrap's --clearenv
    // must still drop it.
    cmd.env("CONSTLE_TEST_SECRET", "s3cr3t")
        .env("HUMAN_GATE_WEBHOOK_URL", "https://hooks.example/secret")
        .env("PATH", "/root/.secret-bin:/usr/bin");
    let run = run(cmd);
    run.assert_success();
    let lines: BTreeSet<&str> = run.stdout.lines().collect();
    let default_path = format!("PATH={DEFAULT_PATH}");
    let default_home = format!("HOME={AGENT_HOME}");
    // bwrap sets PWD after --chdir
    let pwd = format!("PWD={}", fx.workdir.canonicalize().unwrap().display());
    let expected: BTreeSet<&str> = [
        "FOO=bar baz",
        "HTTPS_PROXY=http://127.0.0.1:3128",
        default_path.as_str(),
        default_home.as_str(),
        pwd.as_str(),
    ]
    .into();
    check(lines == expected, || format!("environment inside: {run}"))?;
    check(!run.stdout.contains("s3cr3t"), || "secret leaked".into())?;

    // A PATH and a HOME in the spec are used as they are.
    let mut spec = fx.spec(&["env"]);
    spec.env.insert("PATH".into(), "/usr/bin".into());
    spec.env.insert("HOME".into(), "/tmp".into());
    let run = run_spec(&spec);
    run.assert_success();
    let lines: BTreeSet<&str> = run.stdout.lines().collect();
    let expected: BTreeSet<&str> = ["PATH=/usr/bin", "HOME=/tmp", pwd.as_str()].into();
    check(lines == expected, || run.to_string())
}

/// The agent's home: its own (owner, mode), empty at each start, in its
/// `passwd` entry, and left nowhere on the host.
fn home_is_private_and_empty() -> TestResult {
    let fx = Fixture::new();
    let marker = unique("constle-test-home");
    let probe = fx.python(
        r#"
import os, pwd, stat, sys
home = os.environ["HOME"]
st = os.stat(home)
print(f"home={home}")
print(f"passwd={pwd.getpwuid(os.getuid()).pw_dir}")
print(f"owner={st.st_uid}:{st.st_gid}")
print(f"mode={stat.S_IMODE(st.st_mode):o}")
print("home_entries=" + ",".join(sorted(os.listdir("/home"))))
print("entries=" + ",".join(sorted(os.listdir(home))))
os.makedirs(os.path.join(home, ".cache", sys.argv[1]))
print("written=" + ",".join(sorted(os.listdir(os.path.join(home, ".cache")))))
"#,
        &[&marker],
    );
    for _ in 0..2 {
        let run = run_spec(&probe);
        run.assert_success();
        for (key, want) in [
            ("home", AGENT_HOME),
            ("passwd", AGENT_HOME),
            ("owner", "1000:1000"),
            ("mode", "700"),
            ("home_entries", "agent"),
            ("entries", ""),
            ("written", marker.as_str()),
        ] {
            check(run.value(key) == want, || format!("{key}: {run}"))?;
        }
    }
    check(
        !Path::new(AGENT_HOME).join(".cache").join(&marker).exists(),
        || "the agent's home is on the host".into(),
    )
}

/// Nothing the agent writes in memory is unbounded: `/tmp`, its home and
/// `/dev/shm` stop at their sizes (`ENOSPC`), the rest of `/dev` takes no
/// file at all, and the sizes are the spec's.
fn memory_file_systems_are_bounded() -> TestResult {
    let fx = Fixture::new();
    let mut spec = fx.python(
        r#"
import errno, os
for where in ["/tmp", os.environ["HOME"], "/dev/shm"]:
    st = os.statvfs(where)
    print(f"{where}.size={st.f_blocks * st.f_frsize}")
    written, chunk = 0, b"x" * (1 << 20)
    try:
        with open(os.path.join(where, "fill"), "wb") as f:
            for _ in range(64):
                f.write(chunk)
                f.flush()
                written += len(chunk)
        print(f"{where}.fill=all {written}")
    except OSError as e:
        print(f"{where}.fill={errno.errorcode[e.errno]} after {written >> 20} MiB")
for name in ["/dev/planted", "/dev/pts/planted"]:
    try:
        open(name, "wb").write(b"x")
        print(f"{name}=written")
    except OSError as e:
        print(f"{name}={errno.errorcode[e.errno]}")
"#,
        &[],
    );
    spec.tmpfs = TmpfsSizes {
        tmp: 4 << 20,
        home: 8 << 20,
        shm: 2 << 20,
    };
    let run = run_spec(&spec);
    run.assert_success();
    let home = AGENT_HOME;
    for (key, want) in [
        ("/tmp.size", (4u64 << 20).to_string()),
        (&format!("{home}.size"), (8u64 << 20).to_string()),
        ("/dev/shm.size", (2u64 << 20).to_string()),
        ("/tmp.fill", "ENOSPC after 4 MiB".into()),
        (&format!("{home}.fill"), "ENOSPC after 8 MiB".into()),
        ("/dev/shm.fill", "ENOSPC after 2 MiB".into()),
        ("/dev/planted", "EROFS".into()),
    ] {
        check(run.value(key) == want, || {
            format!("{key}: want {want}: {run}")
        })?;
    }
    check(run.value("/dev/pts/planted") != "written", || {
        format!("a file was made in /dev/pts: {run}")
    })
}

fn constle_home_is_invisible() -> TestResult {
    let fx = Fixture::new();
    let home = fx.dir.path().join("constle-home");
    std::fs::create_dir_all(home.join("keys")).unwrap();
    std::fs::create_dir_all(home.join("logs")).unwrap();
    std::fs::write(home.join("keys/agent.pem"), "PRIVATE KEY").unwrap();
    let spec = fx.python(
        r#"
import os, sys
home = sys.argv[1]
print("env=" + str(os.environ.get("CONSTLE_HOME")))
for p in (home, home + "/keys", home + "/keys/agent.pem", sys.argv[2]):
    print(f"exists {p}={os.path.exists(p)}")
print("root_entries=" + ",".join(sorted(os.listdir("/"))))
"#,
        &[home.to_str().unwrap(), "/root"],
    );
    let mut spec = spec;
    spec.private.push(Private {
        what: "CONSTLE_HOME".into(),
        path: home.clone(),
    });
    let mut cmd = sandbox_command(&spec).unwrap();
    cmd.env("CONSTLE_HOME", &home);
    let run = run(cmd);
    run.assert_success();
    check(run.value("env") == "None", || run.to_string())?;
    for p in [
        home.clone(),
        home.join("keys"),
        home.join("keys/agent.pem"),
        "/root".into(),
    ] {
        check(
            run.value(&format!("exists {}", p.display())) == "False",
            || format!("{} is visible: {run}", p.display()),
        )?;
    }
    // The root holds the system directories, the sandbox's own mounts and
    // the top of the work directory's path (a bare mount point), no more.
    let top = fx.workdir.components().nth(1).unwrap();
    let mut expected: BTreeSet<String> = ["bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr"]
        .iter()
        .filter(|d| Path::new("/").join(d).symlink_metadata().is_ok())
        .map(|d| d.to_string())
        .collect();
    expected.extend(["dev", "etc", "home", "proc", "run", "tmp"].map(String::from));
    expected.insert(top.as_os_str().to_str().unwrap().to_owned());
    let expected = expected.into_iter().collect::<Vec<_>>().join(",");
    check(run.value("root_entries") == expected, || {
        format!("root holds other than {expected}: {run}")
    })
}

fn only_workdir_is_writable() -> TestResult {
    let fx = Fixture::new();
    let run = run_spec(&fx.python(
        r#"
import errno, os
for p in ("/usr/x", "/etc/x", "/x", "/bin/x", "/lib/x", "/run/x", "/run/constle/x",
          "/etc/passwd", "/usr/lib/os-release", "/usr/bin/python3", "/run/constle/constle", "/proc/x"):
    try:
        with open(p, "a") as f:
            f.write("x")
        print(f"write {p}=OK")
    except OSError as e:
        print(f"write {p}=" + errno.errorcode.get(e.errno, str(e.errno)))
try:
    os.mkdir("/newdir")
    print("mkdir=OK")
except OSError as e:
    print("mkdir=" + errno.errorcode.get(e.errno, str(e.errno)))
with open("out.txt", "w") as f:
    f.write("written inside")
os.mkdir("sub")
print("cwd=" + os.getcwd())
"#,
        &[],
    ));
    run.assert_success();
    for (key, value) in run.values() {
        if key.starts_with("write ") || key == "mkdir" {
            // ETXTBSY: the running python3 and sandbox-init refuse before
            // the read-only mount is even consulted
            check(
                ["EROFS", "EACCES", "ENOENT", "ETXTBSY"].contains(&value.as_str()),
                || format!("{key} = {value}: {run}"),
            )?;
        }
    }
    // Existing files that nothing executes (an executable being run by a
    // parallel test would answer ETXTBSY first).
    for key in ["write /usr/x", "write /x", "write /etc/passwd"] {
        check(run.value(key) == "EROFS", || format!("{key}: {run}"))?;
    }
    if Path::new("/usr/lib/os-release").is_file() {
        check(
            ["EROFS", "EACCES"].contains(&run.value("write /usr/lib/os-release").as_str()),
            || run.to_string(),
        )?;
    }
    check(
        run.value("cwd") == fx.workdir.canonicalize().unwrap().to_str().unwrap(),
        || run.to_string(),
    )?;
    let written = std::fs::read_to_string(fx.workdir.join("out.txt")).unwrap();
    check(written == "written inside", || written.clone())?;
    check(fx.workdir.join("sub").is_dir(), || {
        "sub/ missing on host".into()
    })
}

fn etc_holds_only_the_listed_files() -> TestResult {
    let fx = Fixture::new();
    let run = run_spec(&fx.python(
        r#"
import os, ssl
for p in ("/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh", "/etc/ssl/private",
          "/etc/environment", "/etc/machine-id", "/etc/hosts", "/etc/hostname",
          "/etc/resolv.conf", "/etc/passwd", "/etc/ld.so.cache"):
    print(f"{p}={os.path.exists(p)}")
walk = []
for root, dirs, files in os.walk("/etc"):
    walk.extend(os.path.join(root, f) for f in files)
print("etc_files=" + str(len(walk)))
print("ca=" + str(ssl.create_default_context().cert_store_stats()["x509_ca"] > 0))
"#,
        &[],
    ));
    run.assert_success();
    for hidden in [
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/sudoers",
        "/etc/ssh",
        "/etc/ssl/private",
        "/etc/environment",
        "/etc/machine-id",
        "/etc/hosts",
        "/etc/hostname",
        "/etc/resolv.conf",
    ] {
        check(run.value(hidden) == "False", || {
            format!("{hidden} visible: {run}")
        })?;
    }
    for shown in ["/etc/passwd", "/etc/ld.so.cache"] {
        if Path::new(shown).exists() {
            check(run.value(shown) == "True", || {
                format!("{shown} missing: {run}")
            })?;
        }
    }
    if Path::new("/etc/ssl/certs/ca-certificates.crt").exists() {
        check(run.value("ca") == "True", || {
            format!("no CA certificates: {run}")
        })?;
    }
    Ok(())
}

fn workdir_under_tmp() -> TestResult {
    // The usual case for tests and scratch runs: /tmp is a private tmpfs,
    // and the work directory is bound into it.
    let dir = tempfile::tempdir().unwrap();
    let fx = Fixture::new();
    let mut spec = fx.spec(&["sh", "-c", "echo hi > here.txt && ls -a /tmp | wc -l"]);
    spec.workdir = dir.path().to_path_buf();
    let run = run_spec(&spec);
    run.assert_success();
    check(
        std::fs::read_to_string(dir.path().join("here.txt")).unwrap() == "hi\n",
        || run.to_string(),
    )
}

/// The directory bwrap must create in the private `/tmp` to mount a work
/// directory that lives under the host's `/tmp` (a build in a /tmp clone),
/// or an empty string.
fn tmp_mount_point(workdir: &Path) -> String {
    let workdir = workdir.canonicalize().unwrap();
    match workdir.strip_prefix("/tmp") {
        Ok(rest) => rest
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default(),
        Err(_) => String::new(),
    }
}

fn tmp_is_private() -> TestResult {
    let fx = Fixture::new();
    let host_file = std::env::temp_dir().join(unique("constle-test-host"));
    std::fs::write(&host_file, "host").unwrap();
    let inside_name = unique("constle-test-inside");
    let run = run_spec(&fx.python(
        r#"
import os, sys
print("host_visible=" + str(os.path.exists(sys.argv[1])))
mount_points = set(sys.argv[3:])
print("tmp_entries=" + str(len(set(os.listdir("/tmp")) - mount_points)))
with open("/tmp/" + sys.argv[2], "w") as f:
    f.write("inside")
print("written=" + str(os.path.exists("/tmp/" + sys.argv[2])))
"#,
        &[
            host_file.to_str().unwrap(),
            &inside_name,
            &tmp_mount_point(&fx.workdir),
        ],
    ));
    let _ = std::fs::remove_file(&host_file);
    run.assert_success();
    check(run.value("host_visible") == "False", || run.to_string())?;
    check(run.value("tmp_entries") == "0", || run.to_string())?;
    check(run.value("written") == "True", || run.to_string())?;
    check(!std::env::temp_dir().join(&inside_name).exists(), || {
        "the sandbox's /tmp file is on the host".into()
    })
}

// ---------------------------------------------------------------------------
// Processes and privileges

fn own_pid_namespace() -> TestResult {
    let fx = Fixture::new();
    let run = run_spec(&fx.python(
        r#"
import os
print("pid=" + str(os.getpid()))
print("pids=" + ",".join(sorted((e for e in os.listdir("/proc") if e.isdigit()), key=int)))
print("init=" + open(f"/proc/{os.getppid()}/comm").read().strip())
"#,
        &[],
    ));
    run.assert_success();
    let pid: u32 = run.value("pid").parse().unwrap();
    let pids: Vec<u32> = run
        .value("pids")
        .split(',')
        .map(|p| p.parse().unwrap())
        .collect();
    // bwrap's reaper is 1, sandbox-init 2, the agent 3.
    check(pid <= 5, || format!("agent pid {pid}: {run}"))?;
    check(pids.len() <= 4 && pids.iter().all(|&p| p <= 5), || {
        format!("processes visible inside: {pids:?}")
    })?;
    check(
        !pids.contains(&std::process::id()) || std::process::id() <= 5,
        || "the test's own pid is visible".into(),
    )
}

fn no_privileges() -> TestResult {
    let fx = Fixture::new();
    let run = run_spec(&fx.spec(&[
        "sh",
        "-c",
        "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd|CapAmb):' /proc/self/status | tr -d '\\t' | tr ':' '='; \
         if unshare -U true 2>/dev/null; then echo userns=created; else echo userns=refused; fi; \
         if unshare -n true 2>/dev/null; then echo netns=created; else echo netns=refused; fi",
    ]));
    run.assert_success();
    check(run.value("NoNewPrivs") == "1", || run.to_string())?;
    for cap in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] {
        check(run.value(cap) == "0000000000000000", || {
            format!("{cap}: {run}")
        })?;
    }
    if Path::new("/usr/bin/unshare").exists() {
        check(run.value("userns") == "refused", || run.to_string())?;
        check(run.value("netns") == "refused", || run.to_string())?;
    }
    Ok(())
}

fn hostname() -> TestResult {
    let fx = Fixture::new();
    let run = run_spec(&fx.python(
        "import socket; print('hostname=' + socket.gethostname()); \
         print('uts=' + open('/proc/sys/kernel/hostname').read().strip())",
        &[],
    ));
    run.assert_success();
    check(run.value("hostname") == HOSTNAME, || run.to_string())?;
    check(run.value("uts") == HOSTNAME, || run.to_string())
}

fn stdin_is_not_the_terminal() -> TestResult {
    let fx = Fixture::new();
    let probe = r#"
import errno, os, sys
print("isatty=" + str(os.isatty(0)))
print("read=" + repr(sys.stdin.read()))
print("stdin=" + os.readlink("/proc/self/fd/0"))
# A new session: the session leader is inside the sandbox (without
# --new-session it would be the host's, outside the pid namespace: 0).
print("sid_inside=" + str(os.getsid(0) != 0))
try:
    open("/dev/tty")
    print("tty=OPENED")
except OSError as e:
    print("tty=" + errno.errorcode.get(e.errno, str(e.errno)))
"#;
    // As built: bwrap's stdin is /dev/null.
    let run1 = run_spec(&fx.python(probe, &[]));
    // Even if the caller hands bwrap a pipe with data (held open, as the
    // lifeline it then is), the agent reads EOF.
    let mut cmd = sandbox_command(&fx.python(probe, &[])).unwrap();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut typed = child.stdin.take().unwrap();
    typed.write_all(b"typed by someone\n").unwrap();
    let out = child.wait_with_output().unwrap();
    drop(typed);
    let run2 = Run {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    for run in [run1, run2] {
        run.assert_success();
        check(run.value("isatty") == "False", || run.to_string())?;
        check(run.value("read") == "''", || run.to_string())?;
        check(run.value("stdin") == "/dev/null", || run.to_string())?;
        check(run.value("sid_inside") == "True", || run.to_string())?;
        check(run.value("tty") == "ENXIO", || run.to_string())?;
    }
    Ok(())
}

/// Runs `argv` with a fresh pseudo-terminal as its controlling terminal and
/// stdout/stderr, as a terminal session would; prints what it wrote.
const PTY_HARNESS: &str = r#"
import os, pty, select, subprocess, sys
master, slave = pty.openpty()
name = os.ttyname(slave)
def take_terminal():
    os.close(os.open(name, os.O_RDWR))  # a session leader opening a tty gets it
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                     start_new_session=True, preexec_fn=take_terminal)
os.close(slave)
out = b""
while True:
    r, _, _ = select.select([master], [], [], 30)
    if not r:
        break
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
p.wait()
sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
"#;

const TIOCSTI_PROBE: &str = r#"
import errno, fcntl, os, termios
print("isatty=" + str(os.isatty(1)))
try:
    fcntl.ioctl(1, termios.TIOCSTI, b"x")
    print("tiocsti=INJECTED")
except OSError as e:
    print("tiocsti=" + errno.errorcode.get(e.errno, str(e.errno)))
"#;

fn no_keystroke_injection_into_the_terminal() -> TestResult {
    // Control: outside the sandbox, the same probe under the same harness
    // can push keystrokes into its terminal.
    let control = Command::new(PYTHON)
        .args(["-c", PTY_HARNESS, PYTHON, "-c", TIOCSTI_PROBE])
        .output()
        .unwrap();
    let control = String::from_utf8_lossy(&control.stdout).into_owned();
    if !control.contains("tiocsti=INJECTED") {
        eprintln!(
            "no_keystroke_injection_into_the_terminal: TIOCSTI is disabled on this kernel \
             (dev.tty.legacy_tiocsti=0?); only the sandbox side is checked: {control}"
        );
    }
    let fx = Fixture::new();
    let bwrap = sandbox_command(&fx.python(TIOCSTI_PROBE, &[])).unwrap();
    let mut cmd = Command::new(PYTHON);
    cmd.args(["-c", PTY_HARNESS])
        .arg(bwrap.get_program())
        .args(bwrap.get_args())
        .env_clear()
        .envs(envs(&bwrap));
    let run = run(cmd);
    run.assert_success();
    check(run.value("isatty") == "True", || run.to_string())?;
    check(run.value("tiocsti") != "INJECTED", || {
        format!("the agent pushed keystrokes into the terminal: {run}")
    })
}

fn exit_status_is_propagated() -> TestResult {
    let fx = Fixture::new();
    std::fs::write(fx.workdir.join("not-executable"), "#!/bin/sh\nexit 0\n").unwrap();
    let cases: &[(&[&str], i32)] = &[
        (&["true"], 0),
        (&["sh", "-c", "exit 7"], 7),
        (&["sh", "-c", "exit 255"], 255),
        (&["sh", "-c", "kill -TERM $$"], 128 + 15),
        (&["sh", "-c", "kill -KILL $$"], 128 + 9),
        (&["no-such-command-anywhere"], 127),
        (&["./not-executable"], 126),
    ];
    for (command, expected) in cases {
        let run = run_spec(&fx.spec(command));
        check(run.status.code() == Some(*expected), || {
            format!("{command:?}: expected {expected}\n{run}")
        })?;
    }
    Ok(())
}

fn host_fds_do_not_leak_in() -> TestResult {
    // The caller's process holds a descriptor without close-on-exec (here a
    // directory, the worst case: openat(fd, "..") walks the host's tree).
    let fx = Fixture::new();
    let secret_dir = fx.dir.path().join("host-secret");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("key"), "k").unwrap();
    let bwrap = sandbox_command(&fx.python(
        r#"
import os
fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
print("fds=" + ",".join(map(str, fds)))
print("targets=" + ",".join(os.readlink(f"/proc/self/fd/{f}") for f in fds if f > 2 and os.path.exists(f"/proc/self/fd/{f}")))
# sandbox-init is not dumpable: its descriptors cannot be followed
init = os.getppid()
print("init=" + open(f"/proc/{init}/comm").read().strip())
try:
    names = os.listdir(f"/proc/{init}/fd")
except OSError as e:
    names = []
    print("init_fd_list=" + type(e).__name__)
opened = []
for name in names or ["0", "1", "2", "3"]:
    try:
        opened.append(os.readlink(f"/proc/{init}/fd/{name}"))
    except OSError:
        pass
print("init_fds_followed=" + str(len(opened)))
# the agent itself is dumpable again (reset by execve)
print("own_fd=" + os.readlink("/proc/self/fd/0"))
"#,
        &[],
    ))
    .unwrap();
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("exec 7<\"$0\"; exec 8>>\"$0/key\"; exec \"$@\"")
        .arg(&secret_dir)
        .arg(bwrap.get_program())
        .args(bwrap.get_args())
        .env_clear()
        .envs(envs(&bwrap))
        .stdin(Stdio::null());
    let run = run(cmd);
    run.assert_success();
    // 0-2, plus the descriptor listing /proc/self/fd
    let fds = run.value("fds");
    check(fds.split(',').count() <= 4, || {
        format!("descriptors inside: {run}")
    })?;
    check(!run.value("targets").contains("host-secret"), || {
        run.to_string()
    })?;
    check(run.value("init_fds_followed") == "0", || {
        format!("the agent can follow init's descriptors: {run}")
    })?;
    check(run.value("own_fd") == "/dev/null", || run.to_string())
}

// ---------------------------------------------------------------------------
// Doors

const DOOR_PROBE: &str = r#"
import hashlib, socket, sys, threading
port = int(sys.argv[2])

def conn():
    return socket.create_connection(("127.0.0.1", port), timeout=20)

def recv_all(s):
    chunks = []
    while True:
        b = s.recv(65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)

def pattern(n):
    return (bytes(range(251)) * (n // 251 + 1))[:n]

mode = sys.argv[1]
if mode == "concurrent":
    n = 16
    barrier = threading.Barrier(n, timeout=20)
    ok = [False] * n
    def one(i):
        s = conn()
        s.sendall(b"ECHO\n")
        first = f"hello {i}\n".encode()
        s.sendall(first)
        got = b""
        while len(got) < len(first):
            got += s.recv(100)
        # every connection is open at once: a serial server never gets here
        barrier.wait()
        rest = (f"{i}-" * 20000).encode()
        s.sendall(rest)
        s.shutdown(socket.SHUT_WR)
        ok[i] = got == first and recv_all(s) == rest
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads: t.start()
    for t in threads: t.join()
    print("concurrent=" + str(sum(ok)))
elif mode == "large":
    size = int(sys.argv[3])
    data = pattern(size)
    s = conn()
    s.sendall(b"SINK\n")
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    print("upload=" + recv_all(s).decode().strip())
    print("upload_expected=" + f"{size} {hashlib.sha256(data).hexdigest()}")
    s = conn()
    s.sendall(f"SOURCE {size}\n".encode())
    got = recv_all(s)
    print("download_ok=" + str(got == data))
    print("download_len=" + str(len(got)))
elif mode == "half":
    # the client half-closes first: the server answers only after our EOF
    s = conn()
    s.sendall(b"SINK\nhello")
    s.shutdown(socket.SHUT_WR)
    print("client_half=" + recv_all(s).decode().strip())
    # the server half-closes first: we can still send afterwards
    s = conn()
    s.sendall(b"HALF\n")
    got = b""
    while not got.endswith(b"\n"):
        b = s.recv(10)
        if not b: break
        got += b
    print("server_said=" + got.decode().strip())
    print("then_eof=" + str(s.recv(10) == b""))
    # megabytes, so some are still on their way when we exit: they must
    # arrive all the same
    s.sendall(b"after your close\n" * 200000)
    s.shutdown(socket.SHUT_WR)
    s.close()
elif mode == "names":
    for p in sys.argv[2:]:
        s = socket.create_connection(("127.0.0.1", int(p)), timeout=20)
        s.sendall(b"NAME\n")
        print(f"name {p}=" + recv_all(s).decode().strip())
elif mode == "throughput":
    import time
    size = int(sys.argv[3])
    s = conn()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    start = time.monotonic()
    s.sendall(f"SOURCE {size}\n".encode())
    got = 0
    while True:
        n = s.recv_into(view)
        if not n:
            break
        got += n
    elapsed = time.monotonic() - start
    print(f"received={got}")
    print(f"seconds={elapsed:.6f}")
elif mode == "down":
    try:
        s = conn()
        s.sendall(b"NAME\n")
        print("down=" + repr(recv_all(s)))
    except ConnectionRefusedError:
        print("down=refused")
    except ConnectionResetError:
        print("down=reset")
    print("still_running=True")
"#;

fn door_concurrent_connections() -> TestResult {
    let fx = Fixture::new();
    let mut spec = fx.python(DOOR_PROBE, &["concurrent", "3128"]);
    spec.network = Some(fx.doors(&[("proxy", 3128)]).0);
    let run = run_spec(&spec);
    run.assert_success();
    check(run.value("concurrent") == "16", || run.to_string())
}

fn door_large_transfer() -> TestResult {
    const SIZE: usize = 8 * 1024 * 1024;
    let fx = Fixture::new();
    let mut spec = fx.python(DOOR_PROBE, &["large", "3128", &SIZE.to_string()]);
    spec.network = Some(fx.doors(&[("proxy", 3128)]).0);
    let start = Instant::now();
    let run = run_spec(&spec);
    let elapsed = start.elapsed();
    run.assert_success();
    check(run.value("upload") == run.value("upload_expected"), || {
        run.to_string()
    })?;
    check(
        run.value("upload_expected") == format!("{SIZE} {}", hex(&Sha256::digest(pattern(SIZE)))),
        || run.to_string(),
    )?;
    check(run.value("download_ok") == "True", || run.to_string())?;
    eprintln!(
        "door_large_transfer: {} MiB up and {} MiB down in {elapsed:?} (sandbox start and Python included)",
        SIZE >> 20,
        SIZE >> 20
    );
    Ok(())
}

/// Download speed through a door against the same client and server on
/// the host's loopback. 256 MiB by default; `CONSTLE_DOOR_BENCH_MIB`
/// changes it (say 1024 for a real measurement).
fn door_throughput() -> TestResult {
    let mib: usize = std::env::var("CONSTLE_DOOR_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let size = (mib << 20).to_string();
    let fx = Fixture::new();
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port().to_string();
    serve(host, "host", Arc::default());
    let direct = Command::new(PYTHON)
        .args(["-c", DOOR_PROBE, "throughput", &port, &size])
        .output()
        .unwrap();
    let direct = Run {
        status: direct.status,
        stdout: String::from_utf8_lossy(&direct.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&direct.stderr).into_owned(),
    };
    direct.assert_success();

    let mut spec = fx.python(DOOR_PROBE, &["throughput", "3128", &size]);
    spec.network = Some(fx.doors(&[("proxy", 3128)]).0);
    let through = run_spec(&spec);
    through.assert_success();

    for run in [&direct, &through] {
        check(run.value("received") == size, || run.to_string())?;
    }
    let rate = |run: &Run| mib as f64 / run.value("seconds").parse::<f64>().unwrap();
    let (direct_rate, door_rate) = (rate(&direct), rate(&through));
    eprintln!(
        "door_throughput ({mib} MiB, Python client, Rust server): on the host's loopback \
         {direct_rate:.0} MiB/s, through the door {door_rate:.0} MiB/s ({:.0}%)",
        100.0 * door_rate / direct_rate
    );
    Ok(())
}

fn door_half_close_both_ways() -> TestResult {
    let fx = Fixture::new();
    let (network, seen) = fx.doors(&[("proxy", 3128)]);
    let mut spec = fx.python(DOOR_PROBE, &["half", "3128"]);
    spec.network = Some(network);
    let run = run_spec(&spec);
    run.assert_success();
    check(
        run.value("client_half") == format!("5 {}", hex(&Sha256::digest(b"hello"))),
        || run.to_string(),
    )?;
    check(run.value("server_said") == "bye", || run.to_string())?;
    check(run.value("then_eof") == "True", || run.to_string())?;
    wait_until(
        "the server got the late bytes",
        Duration::from_secs(5),
        || *seen[0].lock().unwrap() == b"after your close\n".repeat(200_000),
    )
}

fn two_doors() -> TestResult {
    let fx = Fixture::new();
    let mut spec = fx.python(DOOR_PROBE, &["names", "3128", "4100"]);
    spec.network = Some(fx.doors(&[("proxy", 3128), ("mcp-accounting", 4100)]).0);
    let run = run_spec(&spec);
    run.assert_success();
    check(run.value("name 3128") == "proxy", || run.to_string())?;
    check(run.value("name 4100") == "mcp-accounting", || {
        run.to_string()
    })
}

/// With `CommandIo::Socket` the command reads and writes one connection to
/// the host's socket (what a stdio MCP server speaks on), its stderr is the
/// sandbox's, and nothing reaches the sandbox's stdout.
/// The caller's side of a `--stdio` sandbox, on a thread: the command's
/// channel as [`constle_sandbox::accept_stdio`] gives it, or why not.
fn stdio_host(
    path: &Path,
    talk: fn(std::os::unix::net::UnixStream) -> String,
) -> thread::JoinHandle<Result<String, String>> {
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    listener.set_nonblocking(true).unwrap();
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stream = runtime.block_on(async {
            let listener = tokio::net::UnixListener::from_std(listener).unwrap();
            constle_sandbox::accept_stdio(&listener).await
        });
        let stream = stream.map_err(|e| e.to_string())?.into_std().unwrap();
        stream.set_nonblocking(false).unwrap();
        Ok(talk(stream))
    })
}

fn stdio_socket_is_the_commands_stdin_and_stdout() -> TestResult {
    let fx = Fixture::new();
    let path = fx.dir.path().join("io.sock");
    let host = stdio_host(&path, |mut stream| {
        stream.write_all(b"hello\n").unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut said = String::new();
        stream.read_to_string(&mut said).unwrap();
        said
    });
    let mut spec = fx.spec(&[
        "/bin/sh",
        "-c",
        "read line; echo \"got $line\"; read more || echo eof; echo to-stderr >&2",
    ]);
    spec.stdio = CommandIo::Socket(path);
    let run = run_spec(&spec);
    run.assert_success();
    let said = host.join().unwrap();
    check(said.as_deref() == Ok("got hello\neof\n"), || {
        format!("{said:?}\n{run}")
    })?;
    check(run.stdout.is_empty(), || run.to_string())?;
    check(run.stderr.contains("to-stderr"), || run.to_string())
}

/// A command that cannot start is said to the caller before it takes the
/// channel for a running server.
fn stdio_command_that_cannot_start_is_reported() -> TestResult {
    let fx = Fixture::new();
    for (command, code) in [("/no/such/server", 127), ("/etc/os-release", 126)] {
        let path = fx.dir.path().join(format!("io-{code}.sock"));
        let host = stdio_host(&path, |_| String::new());
        let mut spec = fx.spec(&[command]);
        spec.stdio = CommandIo::Socket(path);
        let run = run_spec(&spec);
        let said = host.join().unwrap();
        check(run.status.code() == Some(code), || run.to_string())?;
        check(
            said.as_ref()
                .is_err_and(|e| e.starts_with("its command could not be started: ")),
            || format!("{said:?}\n{run}"),
        )?;
    }
    Ok(())
}

/// The proxy's door alone, its listener sent over `channel`.
fn proxy_door(channel: PathBuf) -> Network {
    Network {
        channel,
        doors: vec![Door {
            name: "proxy".into(),
            listen: "127.0.0.1:3128".parse().unwrap(),
        }],
        name_service: None,
    }
}

/// A door whose listener the host dropped (what is left when its server
/// is gone) refuses at once; the agent runs on.
fn door_host_down_refuses() -> TestResult {
    let fx = Fixture::new();
    let channel = fx.dir.path().join("network.sock");
    let listener = UnixListener::bind(&channel).unwrap();
    let network = proxy_door(channel);
    let doors = network.doors.clone();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            drop(receive_sockets(&stream, &doors, false));
        }
    });
    let mut spec = fx.python(DOOR_PROBE, &["down", "3128"]);
    spec.network = Some(network);
    let run = run_spec(&spec);
    run.assert_success();
    check(run.value("down") == "refused", || run.to_string())?;
    check(run.value("still_running") == "True", || run.to_string())
}

/// A channel nobody accepts on: the launcher cannot hand the doors over,
/// and the run fails before the agent starts. The spec check refuses a
/// door below port 1024 before anything starts.
fn door_channel_down_fails_run() -> TestResult {
    let fx = Fixture::new();
    let channel = fx.dir.path().join("dead.sock");
    drop(UnixListener::bind(&channel).unwrap());
    let mut spec = fx.spec(&["sh", "-c", "echo agent-ran"]);
    spec.network = Some(proxy_door(channel));
    let run = run_spec(&spec);
    check(run.status.code() == Some(125), || run.to_string())?;
    check(!run.stdout.contains("agent-ran"), || run.to_string())?;
    check(
        run.stderr.contains("cannot send the sandbox's sockets"),
        || run.to_string(),
    )?;
    let mut bad = spec.clone();
    if let Some(network) = &mut bad.network {
        network.doors[0].listen = "127.0.0.1:53".parse().unwrap();
    }
    check(
        matches!(
            sandbox_command(&bad),
            Err(SandboxError::InvalidDoorAddress { .. })
        ),
        || "port 53 accepted".into(),
    )
}

// ---------------------------------------------------------------------------
// Lifetime

/// An agent that forks and sleeps, both processes carrying `marker` in
/// their command line.
fn sleeper(fx: &Fixture, marker: &str) -> SandboxSpec {
    fx.python(
        "import os, time, sys\nos.fork()\ntime.sleep(300)",
        &[marker],
    )
}

/// Waits until both of [`sleeper`]'s processes run. Counts only those: the
/// shell and bwrap carry the marker too, and exist before bwrap has set its
/// parent-death signal.
fn wait_for_agent(marker: &str) -> TestResult {
    wait_until("both agent processes run", Duration::from_secs(20), || {
        agent_processes(marker) >= 2
    })
}

fn killing_bwrap_kills_everything() -> TestResult {
    let fx = Fixture::new();
    let marker = unique("constle-test-kill-bwrap");
    let mut cmd = sandbox_command(&sleeper(&fx, &marker)).unwrap();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = wait_for_agent(&marker);
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    started?;
    wait_until_gone(&marker)
}

fn closing_the_lifeline_ends_the_sandbox() -> TestResult {
    // bwrap itself is left alone: only the lifeline's write end closes, as
    // when the caller dies before bwrap has set its parent-death signal.
    let fx = Fixture::new();
    let marker = unique("constle-test-lifeline");
    let (lifeline, held) = std::io::pipe().unwrap();
    let mut cmd = sandbox_command(&sleeper(&fx, &marker)).unwrap();
    let mut child = cmd
        .stdin(lifeline)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(cmd);
    let started = wait_for_agent(&marker);
    drop(held);
    let gone = wait_until_gone(&marker);
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    started?;
    gone?;
    check(status.code() == Some(125), || {
        format!("{status:?}: {stderr}")
    })?;
    check(stderr.contains("the sandbox ends"), || stderr.clone())
}

fn killing_the_parent_kills_everything() -> TestResult {
    // --die-with-parent: the process that spawned bwrap (here a shell) dies
    // by SIGKILL; bwrap and the whole sandbox follow.
    let fx = Fixture::new();
    let marker = unique("constle-test-kill-parent");
    let bwrap = sandbox_command(&sleeper(&fx, &marker)).unwrap();
    let mut parent = Command::new("/bin/sh")
        .arg("-c")
        .arg("\"$@\" & wait")
        .arg("sh")
        .arg(bwrap.get_program())
        .args(bwrap.get_args())
        .env_clear()
        .envs(envs(&bwrap))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = wait_for_agent(&marker);
    parent.kill().unwrap();
    parent.wait().unwrap();
    started?;
    wait_until_gone(&marker)
}

fn agent_exit_kills_background() -> TestResult {
    let fx = Fixture::new();
    let marker = unique("constle-test-background");
    let run = run_spec(&fx.spec(&[
        "sh",
        "-c",
        "python3 -c 'import time; time.sleep(300)' \"$0\" >/dev/null 2>&1 & echo started",
        &marker,
    ]));
    run.assert_success();
    wait_until_gone(&marker)
}

// ---------------------------------------------------------------------------
// rootfs

/// Copies `file` into `rootfs` at the same path.
fn copy_in(rootfs: &Path, file: &Path) {
    let dest = rootfs.join(file.strip_prefix("/").unwrap());
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(file, &dest).unwrap();
}

/// The shared libraries `exe` needs, by `ldd`.
fn libraries(exe: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(exe).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

fn rootfs_replaces_system_dirs() -> TestResult {
    if !Path::new("/usr/bin/ldd").exists() || !Path::new("/bin/dash").exists() {
        eprintln!(
            "rootfs_replaces_system_dirs: no ldd or dash, building a rootfs is not possible here"
        );
        return Ok(());
    }
    // A minimal rootfs: dash as /bin/sh, and the libraries of dash and of
    // this test binary (which runs as sandbox-init inside).
    let fx = Fixture::new();
    let rootfs = fx.dir.path().join("rootfs");
    let exe = std::env::current_exe().unwrap();
    copy_in(&rootfs, Path::new("/bin/dash"));
    std::fs::rename(rootfs.join("bin/dash"), rootfs.join("bin/sh")).unwrap();
    for lib in libraries(Path::new("/bin/dash"))
        .into_iter()
        .chain(libraries(&exe))
    {
        copy_in(&rootfs, &lib);
    }
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::write(rootfs.join("etc/marker"), "from the rootfs\n").unwrap();
    // A /tmp and a /home in the rootfs are replaced by the sandbox's own.
    for stale in ["tmp/stale", "home/agent/stale"] {
        let path = rootfs.join(stale);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "x").unwrap();
    }

    let mut spec = fx.spec(&[
        "/bin/sh",
        "-c",
        "read m < /etc/marker; echo \"marker=$m\"; \
         [ -e /usr/bin/python3 ] && echo python=host || echo python=absent; \
         [ -e /etc/passwd ] && echo passwd=host || echo passwd=absent; \
         [ -e /tmp/stale ] && echo tmp=rootfs || echo tmp=private; \
         [ -e \"$HOME/stale\" ] && echo home=rootfs || echo home=private; \
         echo z > \"$HOME/z\" && echo home_writable=yes; \
         echo x > /x 2>/dev/null && echo root=writable || echo root=readonly; \
         echo y > /etc/y 2>/dev/null && echo etc=writable || echo etc=readonly; \
         echo ok > out.txt",
    ]);
    spec.rootfs = Some(rootfs);
    let run = run_spec(&spec);
    run.assert_success();
    check(run.value("marker") == "from the rootfs", || run.to_string())?;
    check(run.value("python") == "absent", || run.to_string())?;
    check(run.value("passwd") == "absent", || run.to_string())?;
    check(run.value("tmp") == "private", || run.to_string())?;
    check(run.value("home") == "private", || run.to_string())?;
    check(run.value("home_writable") == "yes", || run.to_string())?;
    check(run.value("root") == "readonly", || run.to_string())?;
    check(run.value("etc") == "readonly", || run.to_string())?;
    check(
        std::fs::read_to_string(fx.workdir.join("out.txt")).unwrap() == "ok\n",
        || run.to_string(),
    )
}

// ---------------------------------------------------------------------------
// Timing

/// The environment `cmd` was given (the launcher's plan), to rebuild it.
fn envs(cmd: &Command) -> Vec<(OsString, OsString)> {
    cmd.get_envs()
        .filter_map(|(k, v)| Some((k.to_os_string(), v?.to_os_string())))
        .collect()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn time_runs(n: usize, make: impl Fn() -> Command) -> Duration {
    let samples = (0..n)
        .map(|_| {
            let mut cmd = make();
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            let start = Instant::now();
            let status = cmd.status().unwrap();
            let elapsed = start.elapsed();
            assert!(status.success(), "{cmd:?} failed");
            elapsed
        })
        .collect();
    median(samples)
}

fn startup_overhead() -> TestResult {
    const RUNS: usize = 21;
    let fx = Fixture::new();
    let spec = fx.spec(&["/usr/bin/true"]);
    // A bare sandbox: bubblewrap alone, no launcher, filters or init.
    let bare_args = [
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--",
        "/usr/bin/true",
    ];
    let mut with_door = spec.clone();
    with_door.network = Some(fx.doors(&[("proxy", 3128)]).0);

    let bare = time_runs(RUNS, || {
        let mut cmd = Command::new(BWRAP);
        cmd.args(bare_args).env_clear().stdin(Stdio::null());
        cmd
    });
    let init = time_runs(RUNS, || sandbox_command(&spec).unwrap());
    let door = time_runs(RUNS, || sandbox_command(&with_door).unwrap());
    eprintln!(
        "startup_overhead (median of {RUNS}): bwrap … true {bare:?}; through sandbox-init {init:?} \
         (+{:?}); with one door {door:?} (+{:?})",
        init.saturating_sub(bare),
        door.saturating_sub(bare),
    );
    check(door < bare + Duration::from_millis(500), || {
        format!("sandbox-init adds more than 500 ms: bare {bare:?}, with a door {door:?}")
    })
}

// ---------------------------------------------------------------------------
// System-call filter

const SYSCALLS_PROBE: &str = include_str!("probes/syscalls.py");

/// What [`SYSCALLS_PROBE`] prints under the filter, line by line.
const SYSCALLS_EXPECTED: &[(&str, &str)] = &[
    ("ptrace PTRACE_TRACEME", "EPERM"),
    ("ptrace PTRACE_ATTACH", "EPERM"),
    ("process_vm_readv", "EPERM"),
    ("process_vm_writev", "EPERM"),
    ("pidfd_getfd", "EPERM"),
    ("kcmp", "EPERM"),
    ("bpf", "EPERM"),
    ("perf_event_open", "EPERM"),
    ("userfaultfd", "EPERM"),
    ("io_uring_setup", "EPERM"),
    ("keyctl", "EPERM"),
    ("add_key", "EPERM"),
    ("mount", "EPERM"),
    ("umount2", "EPERM"),
    ("pivot_root", "EPERM"),
    ("unshare CLONE_NEWUSER", "EPERM"),
    ("setns", "EPERM"),
    ("clone CLONE_NEWUSER", "EPERM"),
    ("clone3", "ENOSYS"),
    ("openat2", "ENOSYS"),
    ("ioctl TIOCSTI", "EPERM"),
    ("ioctl TIOCSTI, high bits", "EPERM"),
    ("ioctl TIOCLINUX", "EPERM"),
    ("socket AF_NETLINK", "EAFNOSUPPORT"),
    ("socket AF_PACKET", "EAFNOSUPPORT"),
    ("socket AF_VSOCK", "EAFNOSUPPORT"),
    ("socket AF_ALG", "EAFNOSUPPORT"),
    ("socket AF_INET SOCK_RAW", "EPERM"),
    ("socket AF_INET SOCK_SEQPACKET", "EPERM"),
    ("socket AF_INET IPPROTO_SCTP", "EPERM"),
    #[cfg(target_arch = "x86_64")]
    ("chmod u+s", "EPERM"),
    #[cfg(target_arch = "x86_64")]
    ("creat u+s", "EPERM"),
    ("fchmod u+s", "EPERM"),
    ("fchmodat g+s", "EPERM"),
    ("fchmodat2 u+s", "EPERM"),
    ("os.chmod u+s", "EPERM"),
    ("os.open O_CREAT u+s", "EPERM"),
    ("os.open O_TMPFILE g+s", "EPERM"),
    ("os.mknod regular u+s", "EPERM"),
    ("no set-id file exists", "OK"),
    ("personality READ_IMPLIES_EXEC", "EPERM"),
    ("shmget 1 MiB", "EINVAL"),
    #[cfg(target_arch = "x86_64")]
    ("x32 getpid", "EPERM"),
    ("fork", "OK"),
    ("posix_spawn", "OK"),
    ("subprocess", "OK"),
    ("python3 -c 'import ssl, json'", "OK"),
    ("thread", "OK"),
    ("tcp over loopback", "OK"),
    ("socket AF_INET6 SOCK_DGRAM", "OK"),
    ("socketpair AF_UNIX", "OK"),
    ("os.chmod 0755", "OK"),
    ("os.open O_CREAT 0644", "OK"),
    ("os.mkfifo", "OK"),
    ("tcgetattr", "OK"),
    ("personality query", "OK"),
    ("memfd_create", "OK"),
    ("shmget 4 KiB", "OK"),
    ("prctl PR_SET_NAME", "OK"),
    ("epoll", "OK"),
    ("splice", "OK"),
];

/// The filters from [`seccomp_programs`], as the launcher installs them
/// (bwrap's `--add-seccomp-fd`) on the sandbox's first process, with the
/// probe as the agent: every refused call fails as specified from inside,
/// and ordinary work (threads, processes, sockets, files) still runs.
fn seccomp_filter_seen_from_inside() -> TestResult {
    let fx = Fixture::new();
    let programs = seccomp_programs().unwrap();
    check(programs.len() >= 3, || {
        format!("{} programs", programs.len())
    })?;
    let cmd = sandbox_command(&fx.python(SYSCALLS_PROBE, &[])).unwrap();
    let run = run(cmd);
    run.assert_success();
    let seen: BTreeMap<&str, &str> = run
        .stdout
        .lines()
        .filter_map(|line| line.split_once(": "))
        .collect();
    let expected: BTreeMap<&str, &str> = SYSCALLS_EXPECTED.iter().copied().collect();
    let wrong: Vec<String> = expected
        .iter()
        .filter(|&(name, want)| seen.get(name) != Some(want))
        .map(|(name, want)| format!("{name}: expected {want}, got {:?}", seen.get(name)))
        .chain(
            seen.keys()
                .filter(|name| !expected.contains_key(*name))
                .map(|name| format!("{name}: not in the table")),
        )
        .collect();
    check(wrong.is_empty(), || format!("{}\n{run}", wrong.join("\n")))
}
