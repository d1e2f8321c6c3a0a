//! A sandbox's network namespace as the launcher makes it (placeholders
//! routed to `lo`, the sockets bound there), served by [`serve`] in the
//! test's runtime; a DNS client; a `CONNECT` proxy on host loopback; a
//! recorder that keeps what it is given.

#![allow(dead_code, reason = "each test uses part of this")]
#![allow(clippy::unwrap_used, reason = "test helpers panic on setup failure")]

use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener as StdTcpListener};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::process::Command;
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Duration;

use constle_capture::{CancellationToken, CaptureError, Event, Limits, Recorder, Sockets, serve};
use constle_dns::Resolver;
use constle_egress::EgressPolicy;
use constle_manifest::Hostname;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use nix::sched::{CloneFlags, unshare};
use nix::sys::socket::{
    AddressFamily, Backlog, SockFlag, SockProtocol, SockType, SockaddrIn6, bind, listen,
    setsockopt, socket, sockopt,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The names the resolver answers; the test proxy opens a tunnel only to
/// the first.
pub const ALLOWED: &str = "api.example.com";
pub const PROXY_REFUSES: &str = "blocked.example.com";

type Job = Box<dyn FnOnce() + Send>;

/// A thread in a network namespace of its own, running what it is given:
/// a socket made there stays there, whichever thread uses it later.
pub struct Namespace {
    jobs: mpsc::Sender<Job>,
}

impl Namespace {
    /// A new namespace with `lo` up and both placeholder ranges routed
    /// to it, as the launcher makes them.
    pub fn new() -> Namespace {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready, started) = mpsc::channel();
        thread::spawn(move || {
            ready.send(enter()).unwrap();
            for job in queue {
                job();
            }
        });
        started.recv().unwrap().unwrap();
        Namespace { jobs }
    }

    /// What `make` gives, made in the namespace.
    pub fn run<T: Send + 'static>(&self, make: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, result) = mpsc::channel();
        self.jobs
            .send(Box::new(move || done.send(make()).unwrap()))
            .unwrap();
        result.recv().unwrap()
    }
}

/// Moves this thread into a new network namespace prepared as the
/// launcher prepares the sandbox's; what failed, if anything.
fn enter() -> Result<(), String> {
    unshare(CloneFlags::CLONE_NEWNET).map_err(|e| format!("unshare: {e}"))?;
    for args in [
        &["link", "set", "lo", "up"][..],
        &["route", "add", "local", "198.18.0.0/15", "dev", "lo"],
        &["-6", "route", "add", "local", "2001:2::/48", "dev", "lo"],
    ] {
        let status = Command::new("ip").args(args).status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            return Err(format!("ip {args:?}: {status:?}"));
        }
    }
    Ok(())
}

/// The sockets the launcher binds: DNS on 127.0.0.1:53, capture on
/// 0.0.0.0:443 and [::]:443 (IPv6 only), raw TCP in both families.
fn sockets() -> Sockets {
    Sockets {
        dns_udp: vec![std::net::UdpSocket::bind("127.0.0.1:53").unwrap()],
        dns_tcp: vec![StdTcpListener::bind("127.0.0.1:53").unwrap()],
        capture: vec![
            StdTcpListener::bind("0.0.0.0:443").unwrap(),
            ipv6_only_listener(443),
        ],
        syn_watch: vec![raw(AddressFamily::Inet), raw(AddressFamily::Inet6)],
    }
}

fn ipv6_only_listener(port: u16) -> StdTcpListener {
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    setsockopt(&fd, sockopt::Ipv6V6Only, &true).unwrap();
    let any = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0);
    bind(fd.as_raw_fd(), &SockaddrIn6::from(any)).unwrap();
    listen(&fd, Backlog::MAXCONN).unwrap();
    StdTcpListener::from(fd)
}

fn raw(family: AddressFamily) -> OwnedFd {
    socket(
        family,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::Tcp,
    )
    .unwrap()
}

/// Every event recorded, in order.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Event>>>);

impl Log {
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }

    /// A recorder that waits `delay`, then keeps the event, or (`fail`)
    /// keeps nothing and says the log is full.
    pub fn recorder(&self, delay: Duration, fail: bool) -> impl Recorder {
        let log = self.clone();
        move |event| {
            let log = log.clone();
            async move {
                tokio::time::sleep(delay).await;
                if fail {
                    return Err("the log's disk is full".to_owned());
                }
                log.0.lock().unwrap().push(event);
                Ok(())
            }
        }
    }
}

/// A proxy on host loopback: opens a tunnel to [`ALLOWED`] (after
/// `delay`, then sends `hello\n` right after its head, then echoes),
/// refuses anything else with 403; keeps each request head.
#[derive(Clone)]
pub struct Proxy {
    pub address: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    pub async fn start(delay: Duration) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Proxy {
            address: listener.local_addr().unwrap(),
            heads: Arc::default(),
        };
        let heads = Arc::clone(&proxy.heads);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(tunnel(stream, Arc::clone(&heads), delay));
            }
        });
        proxy
    }

    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

async fn tunnel(mut stream: TcpStream, heads: Arc<Mutex<Vec<String>>>, delay: Duration) {
    // Byte by byte, so nothing after the head is taken with it.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let Ok(byte) = stream.read_u8().await else {
            return;
        };
        head.push(byte);
    }
    let head = String::from_utf8(head).unwrap();
    let allowed = head.starts_with(&format!("CONNECT {ALLOWED}:443 "));
    heads.lock().unwrap().push(head);
    tokio::time::sleep(delay).await;
    if !allowed {
        let _ = stream.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
        return;
    }
    let answer = b"HTTP/1.1 200 Connection established\r\n\r\nhello\n";
    if stream.write_all(answer).await.is_ok() {
        let (mut read, mut write) = stream.split();
        let _ = tokio::io::copy(&mut read, &mut write).await;
    }
}

/// A namespace served: the resolver allows [`ALLOWED`] and
/// [`PROXY_REFUSES`].
pub struct Served {
    pub namespace: Namespace,
    pub log: Log,
    pub proxy: Proxy,
    pub server: JoinHandle<Result<(), CaptureError>>,
    /// Closes the service.
    pub closing: CancellationToken,
    proxy_address: Option<watch::Sender<Option<SocketAddr>>>,
}

impl Served {
    /// Serves a new namespace with a recorder that waits `record_delay`
    /// (or fails) and a proxy that waits `proxy_delay`.
    pub async fn start(
        record_delay: Duration,
        fail: bool,
        proxy_delay: Duration,
        limits: Limits,
    ) -> Served {
        let namespace = Namespace::new();
        let sockets = namespace.run(sockets);
        let policy =
            EgressPolicy::restricted([ALLOWED, PROXY_REFUSES].map(|h| Hostname::new(h).unwrap()));
        let log = Log::default();
        let proxy = Proxy::start(proxy_delay).await;
        let (proxy_address, address) = watch::channel(Some(proxy.address));
        let recorder = log.recorder(record_delay, fail);
        let closing = CancellationToken::new();
        let server = tokio::spawn(serve(
            sockets,
            Resolver::new(Some(&policy)),
            address,
            recorder,
            limits,
            closing.clone(),
        ));
        Served {
            namespace,
            log,
            proxy,
            server,
            closing,
            proxy_address: Some(proxy_address),
        }
    }

    /// The proxy's address is taken back and will never come: as when
    /// the proxy did not start.
    pub fn proxy_fails(&mut self) {
        if let Some(address) = self.proxy_address.take() {
            address.send_replace(None);
        }
    }

    /// A UDP socket in the namespace, connected to its resolver.
    pub async fn udp_client(&self) -> UdpSocket {
        let socket = self.namespace.run(|| {
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            socket.set_nonblocking(true).unwrap();
            socket
        });
        let socket = UdpSocket::from_std(socket).unwrap();
        socket.connect("127.0.0.1:53").await.unwrap();
        socket
    }

    /// A TCP connection from inside the namespace to `address`.
    pub async fn connect(&self, address: SocketAddr) -> std::io::Result<TcpStream> {
        let socket = self.namespace.run(move || match address {
            SocketAddr::V4(_) => TcpSocket::new_v4(),
            SocketAddr::V6(_) => TcpSocket::new_v6(),
        })?;
        socket.connect(address).await
    }
}

/// A query for `name` of `qtype`, with `id`.
pub fn query(id: u16, name: &str, qtype: RecordType) -> Vec<u8> {
    let mut message = Message::query();
    message.metadata.id = id;
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    message.to_vec().unwrap()
}

/// A reply's id, response code (as its number) and addresses.
pub fn read_reply(bytes: &[u8]) -> (u16, u16, Vec<IpAddr>) {
    let reply = Message::from_vec(bytes).unwrap();
    let addresses = reply
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
            _ => None,
        })
        .collect();
    (
        reply.metadata.id,
        u16::from(reply.metadata.response_code),
        addresses,
    )
}

/// Asks over UDP; the reply, or `None` after `wait` or when nothing
/// listens (the port said unreachable).
pub async fn ask_udp(client: &UdpSocket, query: &[u8], wait: Duration) -> Option<Vec<u8>> {
    client.send(query).await.ok()?;
    let mut buffer = vec![0; 4096];
    let length = tokio::time::timeout(wait, client.recv(&mut buffer))
        .await
        .ok()?
        .ok()?;
    buffer.truncate(length);
    Some(buffer)
}

/// Sends one length-prefixed query on `stream`.
pub async fn send_tcp(stream: &mut TcpStream, query: &[u8]) {
    let length = u16::try_from(query.len()).unwrap().to_be_bytes();
    stream
        .write_all(&[&length[..], query].concat())
        .await
        .unwrap();
}

/// Reads one length-prefixed reply from `stream`, or `None` after `wait`
/// or when the connection closed.
pub async fn read_tcp(stream: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
    tokio::time::timeout(wait, async {
        let length = stream.read_u16().await.ok()?;
        let mut reply = vec![0; usize::from(length)];
        stream.read_exact(&mut reply).await.ok()?;
        Some(reply)
    })
    .await
    .ok()?
}
