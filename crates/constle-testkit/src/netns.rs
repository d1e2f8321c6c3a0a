//! [`TestHost`]: a simulated outside host in a network namespace.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::child::dying_with_test;
use crate::require::find_tool;

/// Where slot locks live.
pub(crate) const LOCK_DIR: &str = "/run/constle-testkit";

/// Slots 2 to 127: slot `n` owns 203.0.113.n, 203.0.113.(n+128) and
/// 2001:db8::n. 203.0.113.1 and 2001:db8::1 are the host's side.
const FIRST_SLOT: u8 = 2;
const LAST_SLOT: u8 = 127;

/// The host's address on every test link.
pub const HOST_SIDE_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
/// The host's IPv6 address on every test link.
pub const HOST_SIDE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// How long an accepted connection may sit idle before the host drops it.
const IDLE: Duration = Duration::from_secs(30);

/// A simulated outside host: a network namespace `cnst-<n>` joined to this
/// machine by a veth pair, with a TCP listener inside.
///
/// Addressing (`n` is the slot, 2 to 127):
///
/// | side | interface | addresses |
/// |---|---|---|
/// | host | `cnst<n>h` | 203.0.113.1 (point-to-point to 203.0.113.n), 2001:db8::1/128 |
/// | namespace | `cnst<n>n` | 203.0.113.n/24, 203.0.113.(n+128)/32, 2001:db8::n/64 |
///
/// The host side routes only these addresses (and any [trapped](Self::trap)
/// ones) into the namespace: /32 and /128 routes, so that several test
/// hosts, in this process or in others, coexist. Nothing is forwarded: the
/// namespace has no route anywhere but the host.
///
/// The listener (port 443 unless [`TestHostBuilder::port`] says otherwise)
/// listens on every address of the namespace, IPv4 and IPv6. For each
/// connection it writes [`TestHost::banner_for`] the address that was
/// reached, then echoes what it reads until the peer closes. A host built
/// [without it](TestHostBuilder::without_listener) leaves the namespace's
/// ports to a server the test runs there ([`TestHost::command`]).
///
/// Drop kills the listener, closes its connections and deletes the
/// namespace and the veth pair (with their routes), also while a test
/// panics.
pub struct TestHost {
    slot: u8,
    ns: String,
    host_if: String,
    ns_if: String,
    port: u16,
    shared: Arc<Shared>,
    listener: Option<Arc<TcpListener>>,
    accept_thread: Option<JoinHandle<()>>,
    _lock: File,
}

/// Options for a [`TestHost`].
#[derive(Clone, Debug)]
pub struct TestHostBuilder {
    port: u16,
    listener: bool,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    accepted: AtomicUsize,
    next_id: AtomicUsize,
    open: Mutex<HashMap<usize, TcpStream>>,
}

impl Default for TestHostBuilder {
    fn default() -> Self {
        TestHostBuilder {
            port: 443,
            listener: true,
        }
    }
}

impl TestHostBuilder {
    /// The port the listener uses (default 443).
    #[must_use]
    pub fn port(mut self, port: u16) -> TestHostBuilder {
        self.port = port;
        self
    }

    /// No echo listener: the test serves a protocol of its own in the
    /// namespace, started with [`TestHost::command`].
    #[must_use]
    pub fn without_listener(mut self) -> TestHostBuilder {
        self.listener = false;
        self
    }

    /// Creates the namespace, the link and the listener.
    pub fn start(self) -> io::Result<TestHost> {
        let (slot, lock) = take_slot()?;
        let mut host = TestHost {
            slot,
            ns: format!("cnst-{slot}"),
            host_if: format!("cnst{slot}h"),
            ns_if: format!("cnst{slot}n"),
            port: self.port,
            shared: Arc::new(Shared::default()),
            listener: None,
            accept_thread: None,
            _lock: lock,
        };
        // Leftovers of a killed test process that held this slot.
        host.teardown_links();
        // On error, `host` drops here and removes what was built.
        host.build_links()?;
        if self.listener {
            host.start_listener()?;
        }
        Ok(host)
    }
}

impl TestHost {
    /// A test host with the default options (listener on port 443).
    pub fn start() -> io::Result<TestHost> {
        TestHostBuilder::default().start()
    }

    /// Options for a test host.
    pub fn builder() -> TestHostBuilder {
        TestHostBuilder::default()
    }

    /// The namespace's name (`cnst-<n>`), for `ip netns exec`.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`),
    /// under `setpriv --pdeathsig KILL` where there is one, so that it dies
    /// with the test (spawn it on the thread that keeps it). Killing it is
    /// the caller's: dropping the host removes the namespace, not the
    /// processes in it.
    pub fn command(&self, program: impl AsRef<OsStr>) -> io::Result<Command> {
        let mut command = dying_with_test(ip_program()?);
        command.args(["netns", "exec", &self.ns]).arg(program);
        Ok(command)
    }

    /// The host side of the veth pair (`cnst<n>h`).
    pub fn host_interface(&self) -> &str {
        &self.host_if
    }

    /// The namespace's IPv4 address, 203.0.113.n.
    pub fn ipv4(&self) -> Ipv4Addr {
        Ipv4Addr::new(203, 0, 113, self.slot)
    }

    /// A second IPv4 address of the namespace, 203.0.113.(n+128): a public
    /// (documentation) address that no name in a test needs to point to.
    pub fn spare_ipv4(&self) -> Ipv4Addr {
        Ipv4Addr::new(203, 0, 113, self.slot + 128)
    }

    /// The namespace's IPv6 address, 2001:db8::n.
    pub fn ipv6(&self) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(self.slot))
    }

    /// The slot number `n` (2 to 127), unique among live test hosts on this
    /// machine; handy for building further unique addresses.
    pub fn slot(&self) -> u8 {
        self.slot
    }

    /// The listener's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The line the listener sends first on a connection that reached
    /// `addr`: `constle-testkit <namespace> <addr>\n`.
    pub fn banner_for(&self, addr: IpAddr) -> String {
        banner(&self.ns, addr)
    }

    /// How many connections the listener has accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Routes `addr` into the namespace and gives the namespace that
    /// address, so the listener answers on it.
    ///
    /// For tests that map a name to an internal address (10/8, 169.254/16,
    /// fc00::/7, …) and expect the proxy to refuse it: if the proxy
    /// connected anyway, the connection would land here (and show in
    /// [`TestHost::connections`]) instead of leaving the machine. The route
    /// is a /32 or /128 on this host's link, with a metric unique to the
    /// slot, so several test hosts can trap the same address; it goes away
    /// with the link.
    ///
    /// Link-local IPv6 addresses (fe80::/10) need no trap: without a zone
    /// they cannot be connected to at all.
    pub fn trap(&self, addr: IpAddr) -> io::Result<()> {
        let metric = (1000 + u32::from(self.slot)).to_string();
        match addr {
            IpAddr::V4(v4) => {
                let prefix = format!("{v4}/32");
                ip(&["-n", &self.ns, "addr", "add", &prefix, "dev", &self.ns_if])?;
                ip(&[
                    "route",
                    "add",
                    &prefix,
                    "dev",
                    &self.host_if,
                    "metric",
                    &metric,
                ])
            }
            IpAddr::V6(v6) => {
                let prefix = format!("{v6}/128");
                ip(&[
                    "-n",
                    &self.ns,
                    "-6",
                    "addr",
                    "add",
                    &prefix,
                    "dev",
                    &self.ns_if,
                    "nodad",
                ])?;
                ip(&[
                    "-6",
                    "route",
                    "add",
                    &prefix,
                    "dev",
                    &self.host_if,
                    "metric",
                    &metric,
                ])
            }
        }
    }

    fn build_links(&self) -> io::Result<()> {
        let (ns, hif, nif) = (self.ns.as_str(), self.host_if.as_str(), self.ns_if.as_str());
        let v4 = self.ipv4();
        let v6 = self.ipv6();
        ip(&["netns", "add", ns])?;
        ip(&[
            "link", "add", hif, "type", "veth", "peer", "name", nif, "netns", ns,
        ])?;
        ip(&[
            "addr",
            "add",
            &HOST_SIDE_V4.to_string(),
            "peer",
            &format!("{v4}/32"),
            "dev",
            hif,
        ])?;
        ip(&[
            "-6",
            "addr",
            "add",
            &format!("{HOST_SIDE_V6}/128"),
            "dev",
            hif,
            "nodad",
        ])?;
        ip(&["link", "set", hif, "up"])?;
        ip(&["-6", "route", "add", &format!("{v6}/128"), "dev", hif])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", nif])?;
        ip(&[
            "-n",
            ns,
            "-6",
            "addr",
            "add",
            &format!("{v6}/64"),
            "dev",
            nif,
            "nodad",
        ])?;
        ip(&["-n", ns, "link", "set", nif, "up"])?;
        self.trap(IpAddr::V4(self.spare_ipv4()))
    }

    fn start_listener(&mut self) -> io::Result<()> {
        let ns_path = format!("/run/netns/{}", self.ns);
        let port = self.port;
        // A socket belongs to the namespace of the thread that creates it:
        // make it on a short-lived thread that moved into the namespace.
        let listener = std::thread::spawn(move || -> io::Result<TcpListener> {
            let ns = File::open(&ns_path)?;
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(io::Error::from)?;
            // [::] takes IPv4 too (bindv6only is 0 in a new namespace).
            TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)))
        })
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))??;
        let listener = Arc::new(listener);
        let shared = Arc::clone(&self.shared);
        let ns = self.ns.clone();
        let accepting = Arc::clone(&listener);
        self.listener = Some(listener);
        self.accept_thread = Some(std::thread::spawn(move || {
            accept_loop(&accepting, &shared, &ns)
        }));
        Ok(())
    }

    /// Deletes the link (which removes its routes and its peer) and the
    /// namespace. Errors are ignored: either may be gone already.
    fn teardown_links(&self) {
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(listener) = self.listener.take() {
            // Wakes the accept loop: accept() on a shut-down listening socket
            // fails at once.
            let _ =
                nix::sys::socket::shutdown(listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        }
        for stream in self
            .shared
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            let _ = stream.shutdown(Shutdown::Both);
        }
        if let Some(thread) = self.accept_thread.take() {
            let _ = thread.join();
        }
        self.teardown_links();
    }
}

impl std::fmt::Debug for TestHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestHost")
            .field("namespace", &self.ns)
            .field("ipv4", &self.ipv4())
            .field("ipv6", &self.ipv6())
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

fn banner(ns: &str, addr: IpAddr) -> String {
    format!("constle-testkit {ns} {}\n", addr.to_canonical())
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, ns: &str) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else {
            // Transient (the peer reset before accept); the stop flag ends us.
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        if let Ok(clone) = stream.try_clone() {
            shared
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, clone);
        }
        let shared = Arc::clone(shared);
        let ns = ns.to_owned();
        std::thread::spawn(move || {
            let _ = serve(stream, &ns);
            shared
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
        });
    }
}

fn serve(mut stream: TcpStream, ns: &str) -> io::Result<()> {
    stream.set_read_timeout(Some(IDLE))?;
    let local = stream.local_addr()?.ip();
    stream.write_all(banner(ns, local).as_bytes())?;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n])?;
    }
}

/// Takes the first free slot, starting at one derived from the pid so that
/// concurrent processes rarely contend. The lock is released when the
/// returned file is closed, also when the process dies.
fn take_slot() -> io::Result<(u8, File)> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(LOCK_DIR)?;
    let span = u32::from(LAST_SLOT - FIRST_SLOT) + 1;
    let start = std::process::id() % span;
    for i in 0..span {
        let offset = u8::try_from((start + i) % span).unwrap_or(0);
        let slot = FIRST_SLOT + offset;
        let path = Path::new(LOCK_DIR).join(format!("slot-{slot}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => return Ok((slot, file)),
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "all {span} test host slots under {LOCK_DIR} are in use"
    )))
}

fn ip_program() -> io::Result<PathBuf> {
    find_tool("ip")
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "`ip` (iproute2) is not installed"))
}

/// Runs `ip ARGS`; a failure carries the command and its stderr.
fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new(ip_program()?).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
