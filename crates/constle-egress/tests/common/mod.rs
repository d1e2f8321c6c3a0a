//! Shared by the end-to-end tests: a test host in a namespace, a real Squid
//! in front of it, and a client that speaks CONNECT.

#![allow(dead_code, clippy::expect_used)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use constle_egress::{EgressPolicy, NetworkEvent, Squid};
use constle_manifest::Hostname;
use constle_testkit::{HostsFile, TestHost, require_e2e};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// The declared name every fixture maps to its test host.
pub const DECLARED: &str = "api.example.test";

const WAIT: Duration = Duration::from_secs(10);

/// A test host, a run directory and a Squid serving `policy` with a hosts
/// file.
pub struct Fixture {
    pub host: TestHost,
    pub squid: Option<Squid>,
    pub events: mpsc::Receiver<NetworkEvent>,
    pub run_dir: tempfile::TempDir,
    _hosts_dir: tempfile::TempDir,
}

/// What the proxy answered.
#[derive(Debug)]
pub struct Outcome {
    /// The HTTP status of Squid's answer to CONNECT.
    pub status: u16,
    /// With 200: the first line the far end sent through the tunnel.
    pub banner: Option<String>,
}

pub fn host(name: &str) -> Hostname {
    Hostname::new(name).expect("valid host name")
}

/// A restricted policy allowing `names`.
pub fn restricted(names: &[&str]) -> EgressPolicy {
    EgressPolicy::restricted(names.iter().map(|n| host(n)))
}

impl Fixture {
    /// `None` when the machine cannot run it (skipped, with the reason
    /// printed; a failure under `CONSTLE_E2E=require`).
    pub async fn start(
        test: &str,
        policy: EgressPolicy,
        hosts: impl FnOnce(&TestHost) -> HostsFile,
    ) -> Option<Fixture> {
        if !require_e2e(test) {
            return None;
        }
        let host = TestHost::start().expect("test host");
        let hosts_dir = tempfile::tempdir().expect("temp dir");
        let hosts_path = hosts_dir.path().join("hosts");
        hosts(&host).write(&hosts_path).expect("write hosts file");
        let run_dir = tempfile::tempdir().expect("run dir");
        let mut squid = Squid::start(run_dir.path(), &policy, Some(&hosts_path))
            .await
            .expect("squid starts");
        let events = squid.take_events().expect("events");
        assert!(squid.take_events().is_none(), "events are taken once");
        Some(Fixture {
            host,
            squid: Some(squid),
            events,
            run_dir,
            _hosts_dir: hosts_dir,
        })
    }

    /// The standard restricted fixture: `names` allowed, and the hosts file
    /// built by `hosts` plus DECLARED → the test host.
    pub async fn restricted(
        test: &str,
        names: &[&str],
        hosts: impl FnOnce(&TestHost, &mut HostsFile),
    ) -> Option<Fixture> {
        Fixture::start(test, restricted(names), |h| {
            let mut file = HostsFile::new().with(h.ipv4(), DECLARED);
            hosts(h, &mut file);
            file
        })
        .await
    }

    pub fn squid(&self) -> &Squid {
        self.squid.as_ref().expect("squid running")
    }

    /// CONNECT `target` through the proxy.
    pub async fn connect(&self, target: &str) -> Outcome {
        connect_through(self.squid().addr(), target).await
    }

    /// Sends raw bytes as a request; returns the status line's code.
    pub async fn raw(&self, request: &[u8]) -> u16 {
        let mut stream = TcpStream::connect(self.squid().addr())
            .await
            .expect("connect to squid");
        stream.write_all(request).await.expect("send");
        let (status, _) = read_head(&mut stream).await;
        status
    }

    /// The next event; fails after 10 s.
    pub async fn event(&mut self) -> NetworkEvent {
        tokio::time::timeout(WAIT, self.events.recv())
            .await
            .expect("an event within 10 s")
            .expect("the channel is open")
    }

    /// CONNECT `target`, expect it refused with `reason`, before any
    /// connection to the test host.
    pub async fn refused(&mut self, target: &str, reason: &str) -> NetworkEvent {
        let before = self.host.connections();
        let outcome = self.connect(target).await;
        assert_eq!(outcome.status, 403, "CONNECT {target}: {outcome:?}");
        let event = self.event().await;
        assert!(!event.allowed, "{target}: {event:?}");
        assert_eq!(event.squid_result, "TCP_DENIED/403", "{target}: {event:?}");
        assert_eq!(event.reason.as_deref(), Some(reason), "{target}: {event:?}");
        assert_eq!(event.resolved, None, "{target}: {event:?}");
        assert_eq!(event.method, "CONNECT");
        assert_eq!(
            self.host.connections(),
            before,
            "{target}: the test host was reached"
        );
        event
    }

    /// CONNECT `target`, expect the tunnel to reach the test host at `addr`,
    /// and return the event.
    pub async fn tunnels_to(&mut self, target: &str, addr: IpAddr) -> NetworkEvent {
        let before = self.host.connections();
        let outcome = self.connect(target).await;
        assert_eq!(outcome.status, 200, "CONNECT {target}: {outcome:?}");
        assert_eq!(
            outcome.banner.as_deref(),
            Some(self.host.banner_for(addr).as_str()),
            "CONNECT {target}"
        );
        assert_eq!(self.host.connections(), before + 1);
        let event = self.event().await;
        assert!(event.allowed, "{target}: {event:?}");
        assert_eq!(event.squid_result, "TCP_TUNNEL/200", "{target}: {event:?}");
        assert_eq!(event.reason, None, "{target}: {event:?}");
        assert_eq!(event.resolved, Some(addr), "{target}: {event:?}");
        assert_eq!(event.port, 443);
        event
    }

    /// Stops Squid and checks that no event is left over (exactly one
    /// event per request) and that the process is gone.
    pub async fn finish(mut self) {
        let squid = self.squid.take().expect("squid running");
        let pid = squid.pid().expect("pid");
        squid.stop().await;
        let extra = tokio::time::timeout(WAIT, self.events.recv())
            .await
            .expect("the channel ends after stop");
        assert!(extra.is_none(), "an event nobody asked for: {extra:?}");
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "squid {pid} outlived stop()"
        );
    }
}

/// CONNECT `target` through the proxy at `proxy`; on 200, read the far
/// end's banner and check that it echoes.
pub async fn connect_through(proxy: SocketAddr, target: &str) -> Outcome {
    let mut stream = TcpStream::connect(proxy).await.expect("connect to squid");
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let (status, rest) = read_head(&mut stream).await;
    if status != 200 {
        return Outcome {
            status,
            banner: None,
        };
    }
    let mut reader = BufReader::new(rest.as_slice().chain(stream));
    let mut banner = String::new();
    tokio::time::timeout(WAIT, reader.read_line(&mut banner))
        .await
        .expect("banner within 10 s")
        .expect("banner");
    let mut stream = reader.into_inner().into_inner().1;
    stream
        .write_all(b"ping\n")
        .await
        .expect("send through tunnel");
    let mut echo = [0u8; 5];
    tokio::time::timeout(WAIT, stream.read_exact(&mut echo))
        .await
        .expect("echo within 10 s")
        .expect("echo");
    assert_eq!(&echo, b"ping\n");
    stream.shutdown().await.expect("close");
    Outcome {
        status,
        banner: Some(banner),
    }
}

/// Reads an HTTP response head; returns the status and any bytes after it.
async fn read_head(stream: &mut TcpStream) -> (u16, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        assert!(buf.len() < 64 * 1024, "response head too long");
        let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
            .await
            .expect("response within 10 s")
            .expect("read response");
        assert!(n > 0, "squid closed before answering: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {head:?}"));
    (status, buf[end..].to_vec())
}
