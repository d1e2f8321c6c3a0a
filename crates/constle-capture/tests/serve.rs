//! The service in a real network namespace, as the launcher prepares it:
//! real DNS clients, real connections to placeholders, a real `CONNECT`
//! proxy on host loopback. Needs root (a network namespace); skips with a
//! reason otherwise.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::{ALLOWED, PROXY_REFUSES, Served, ask_udp, query, read_reply, read_tcp, send_tcp};
use constle_capture::{CaptureError, Event, Limits};
use constle_dns::Reason;
use hickory_proto::rr::RecordType;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const NOERROR: u16 = 0;
const NXDOMAIN: u16 = 3;
const WAIT: Duration = Duration::from_secs(5);
const V4: &str = "198.18.0.1";
const V6: &str = "2001:2::c612:1";

fn can_run(test: &str) -> bool {
    constle_testkit::require_root(test, &["ip"])
}

async fn start() -> Served {
    Served::start(Duration::ZERO, false, Duration::ZERO, Limits::default()).await
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn names(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|event| match event {
            Event::Named(answered) => format!("named {}", answered.name.as_str()),
            Event::NameRefused(refused) => format!(
                "refused {} {}",
                refused.name.as_deref().unwrap_or("-"),
                refused.reason
            ),
            Event::PortRefused {
                address,
                name,
                port,
            } => format!(
                "port {address} {} {port}",
                name.as_ref().map_or("-", |n| n.as_str())
            ),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Resolves `name` over UDP from inside the namespace: its addresses.
async fn resolve(served: &Served, name: &str, qtype: RecordType) -> Vec<IpAddr> {
    let client = served.udp_client().await;
    let reply = ask_udp(&client, &query(7, name, qtype), WAIT)
        .await
        .unwrap();
    read_reply(&reply).2
}

#[tokio::test]
async fn an_allowed_name_gets_its_placeholders_and_is_recorded_once() {
    if !can_run("an_allowed_name_gets_its_placeholders_and_is_recorded_once") {
        return;
    }
    let served = start().await;
    let client = served.udp_client().await;
    for (id, qtype, address) in [
        (1, RecordType::A, V4),
        (2, RecordType::AAAA, V6),
        (3, RecordType::A, V4),
    ] {
        let reply = ask_udp(&client, &query(id, "API.example.com", qtype), WAIT).await;
        assert_eq!(
            read_reply(&reply.unwrap()),
            (id, NOERROR, vec![ip(address)])
        );
    }
    assert_eq!(names(&served.log.events()), ["named api.example.com"]);
    served.server.abort();
}

#[tokio::test]
async fn a_refused_name_is_recorded_before_its_nxdomain_arrives() {
    if !can_run("a_refused_name_is_recorded_before_its_nxdomain_arrives") {
        return;
    }
    // A slow recorder: a reply sent before the record finished would
    // arrive while the log is still empty.
    let delay = Duration::from_millis(300);
    let served = Served::start(delay, false, Duration::ZERO, Limits::default()).await;
    let client = served.udp_client().await;
    let started = Instant::now();
    let reply = ask_udp(&client, &query(9, "evil.example.com", RecordType::A), WAIT).await;
    assert_eq!(read_reply(&reply.unwrap()), (9, NXDOMAIN, vec![]));
    assert!(started.elapsed() >= delay);
    assert_eq!(
        names(&served.log.events()),
        [format!("refused evil.example.com {}", Reason::NotAllowed)]
    );
    served.server.abort();
}

#[tokio::test]
async fn a_failing_recorder_gets_no_reply_out_and_stops_the_service() {
    if !can_run("a_failing_recorder_gets_no_reply_out_and_stops_the_service") {
        return;
    }
    let mut served = Served::start(Duration::ZERO, true, Duration::ZERO, Limits::default()).await;
    let client = served.udp_client().await;
    let quiet = Duration::from_millis(500);
    let reply = ask_udp(&client, &query(1, "evil.example.com", RecordType::A), quiet).await;
    assert_eq!(reply, None, "no reply without its record");
    let stopped = tokio::time::timeout(WAIT, &mut served.server)
        .await
        .unwrap();
    match stopped.unwrap() {
        Err(CaptureError::Record(why)) => assert_eq!(why, "the log's disk is full"),
        other => panic!("{other:?}"),
    }
    // Stopped: an answer that needs no record gets none either.
    let reply = ask_udp(&client, &query(2, ALLOWED, RecordType::TXT), quiet).await;
    assert_eq!(reply, None);
    let closed = served.connect("127.0.0.1:53".parse().unwrap()).await;
    assert!(closed.is_err(), "the DNS listener is gone");
}

#[tokio::test]
async fn tcp_dns_answers_several_queries_on_one_connection() {
    if !can_run("tcp_dns_answers_several_queries_on_one_connection") {
        return;
    }
    let served = start().await;
    let mut stream = served
        .connect("127.0.0.1:53".parse().unwrap())
        .await
        .unwrap();
    send_tcp(&mut stream, &query(1, ALLOWED, RecordType::AAAA)).await;
    send_tcp(&mut stream, &query(2, "evil.example.com", RecordType::TXT)).await;
    let first = read_tcp(&mut stream, WAIT).await.unwrap();
    assert_eq!(read_reply(&first), (1, NOERROR, vec![ip(V6)]));
    let second = read_tcp(&mut stream, WAIT).await.unwrap();
    assert_eq!(read_reply(&second), (2, NXDOMAIN, vec![]));
    send_tcp(&mut stream, &query(3, ALLOWED, RecordType::A)).await;
    let third = read_tcp(&mut stream, WAIT).await.unwrap();
    assert_eq!(read_reply(&third), (3, NOERROR, vec![ip(V4)]));
    assert_eq!(
        names(&served.log.events()),
        [
            "named api.example.com".to_owned(),
            format!("refused evil.example.com {}", Reason::NotAllowed)
        ]
    );
    served.server.abort();
}

#[tokio::test]
async fn tcp_dns_connections_beyond_the_cap_wait_and_idle_ones_close() {
    if !can_run("tcp_dns_connections_beyond_the_cap_wait_and_idle_ones_close") {
        return;
    }
    let limits = Limits {
        dns_connections: 2,
        dns_idle: Duration::from_secs(2),
        ..Limits::default()
    };
    let served = Served::start(Duration::ZERO, false, Duration::ZERO, limits).await;
    let dns: SocketAddr = "127.0.0.1:53".parse().unwrap();
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(served.connect(dns).await.unwrap());
    }
    for (id, stream) in (1..).zip(&mut streams) {
        send_tcp(stream, &query(id, ALLOWED, RecordType::A)).await;
    }
    let short = Duration::from_millis(500);
    for stream in &mut streams[..2] {
        assert!(read_tcp(stream, WAIT).await.is_some(), "within the cap");
    }
    assert_eq!(read_tcp(&mut streams[2], short).await, None, "over the cap");
    drop(streams.remove(0));
    let late = read_tcp(&mut streams[1], WAIT).await.unwrap();
    assert_eq!(read_reply(&late).0, 3, "served once a slot is free");

    // Idle past the limit: closed by the service (end of stream).
    let mut idle = streams.remove(0);
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(WAIT, idle.read_to_end(&mut rest)).await;
    assert_eq!(closed.unwrap().unwrap(), 0);
    served.server.abort();
}

#[tokio::test]
async fn a_captured_connection_reaches_its_name_through_the_proxy() {
    if !can_run("a_captured_connection_reaches_its_name_through_the_proxy") {
        return;
    }
    // The proxy waits before it answers, so the agent's first bytes are
    // sent before the tunnel is open.
    let served = Served::start(
        Duration::ZERO,
        false,
        Duration::from_millis(300),
        Limits::default(),
    )
    .await;
    assert_eq!(resolve(&served, ALLOWED, RecordType::A).await, [ip(V4)]);
    for placeholder in [V4, V6] {
        let address = SocketAddr::new(ip(placeholder), 443);
        let mut stream = served.connect(address).await.unwrap();
        stream.write_all(b"client hello|").await.unwrap();
        let mut got = vec![0; b"hello\nclient hello|".len()];
        tokio::time::timeout(WAIT, stream.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, b"hello\nclient hello|", "{placeholder}");
        stream.write_all(b"later").await.unwrap();
        let mut later = [0; 5];
        stream.read_exact(&mut later).await.unwrap();
        assert_eq!(&later, b"later");
    }
    let head = format!("CONNECT {ALLOWED}:443 HTTP/1.1\r\nHost: {ALLOWED}:443\r\n\r\n");
    assert_eq!(served.proxy.heads(), [head.clone(), head]);
    assert_eq!(
        names(&served.log.events()),
        ["named api.example.com"],
        "no event of its own"
    );
    served.server.abort();
}

/// Whether the connection to `address` is closed by the service without
/// a byte (reset, or end of stream).
async fn closed_at_once(served: &Served, address: SocketAddr) -> bool {
    let mut stream = served.connect(address).await.unwrap();
    let _ = stream.write_all(b"client hello").await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await;
    matches!(read, Ok(Ok(0) | Err(_)))
}

#[tokio::test]
async fn an_address_that_stands_for_no_name_is_closed() {
    if !can_run("an_address_that_stands_for_no_name_is_closed") {
        return;
    }
    let served = start().await;
    assert_eq!(resolve(&served, ALLOWED, RecordType::A).await, [ip(V4)]);
    for unknown in ["198.18.0.2", "2001:2::c612:2", "2001:2::1"] {
        let address = SocketAddr::new(ip(unknown), 443);
        assert!(closed_at_once(&served, address).await, "{unknown}");
    }
    assert_eq!(served.proxy.heads(), Vec::<String>::new(), "never asked");
    served.server.abort();
}

#[tokio::test]
async fn a_connection_the_proxy_refuses_is_closed() {
    if !can_run("a_connection_the_proxy_refuses_is_closed") {
        return;
    }
    let served = start().await;
    let addresses = resolve(&served, PROXY_REFUSES, RecordType::AAAA).await;
    assert_eq!(addresses, [ip(V6)]);
    assert!(closed_at_once(&served, SocketAddr::new(ip(V6), 443)).await);
    assert_eq!(
        served.proxy.heads(),
        [format!(
            "CONNECT {PROXY_REFUSES}:443 HTTP/1.1\r\nHost: {PROXY_REFUSES}:443\r\n\r\n"
        )]
    );
    served.server.abort();
}

#[tokio::test]
async fn without_a_proxy_a_captured_connection_is_closed() {
    if !can_run("without_a_proxy_a_captured_connection_is_closed") {
        return;
    }
    let mut served = start().await;
    assert_eq!(resolve(&served, ALLOWED, RecordType::A).await, [ip(V4)]);
    served.proxy_fails();
    assert!(closed_at_once(&served, SocketAddr::new(ip(V4), 443)).await);
    assert_eq!(served.proxy.heads(), Vec::<String>::new());
    served.server.abort();
}

#[tokio::test]
async fn a_syn_to_another_port_of_a_placeholder_is_refused_and_recorded() {
    if !can_run("a_syn_to_another_port_of_a_placeholder_is_refused_and_recorded") {
        return;
    }
    let served = start().await;
    assert_eq!(resolve(&served, ALLOWED, RecordType::A).await, [ip(V4)]);
    for (address, port) in [(V4, 80), (V6, 22), ("198.18.0.77", 8443)] {
        let refused = served.connect(SocketAddr::new(ip(address), port)).await;
        let error = refused.unwrap_err();
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "{address}"
        );
    }
    // Not placeholders, or port 443: nothing recorded.
    let _ = served.connect("127.0.0.1:80".parse().unwrap()).await;
    let _ = served.connect("[::1]:80".parse().unwrap()).await;
    drop(served.connect(SocketAddr::new(ip(V4), 443)).await);
    let deadline = Instant::now() + WAIT;
    while served.log.events().len() < 4 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let anything wrongly recorded arrive too.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        names(&served.log.events()),
        [
            "named api.example.com",
            "port 198.18.0.1 api.example.com 80",
            "port 2001:2::c612:1 api.example.com 22",
            "port 198.18.0.77 - 8443",
        ]
    );
    served.server.abort();
}

#[tokio::test]
async fn closing_records_every_attempt_refused_before_it_and_then_ends() {
    if !can_run("closing_records_every_attempt_refused_before_it_and_then_ends") {
        return;
    }
    // A slow recorder: the attempts are still queued when the close comes.
    let record_delay = Duration::from_millis(100);
    let mut served = Served::start(record_delay, false, Duration::ZERO, Limits::default()).await;
    for port in [80, 81, 82] {
        let refused = served.connect(SocketAddr::new(ip(V4), port)).await;
        assert!(refused.is_err(), "{port}");
    }
    served.closing.cancel();
    let ended = tokio::time::timeout(WAIT, &mut served.server)
        .await
        .unwrap();
    assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
    assert_eq!(
        names(&served.log.events()),
        [
            "port 198.18.0.1 - 80",
            "port 198.18.0.1 - 81",
            "port 198.18.0.1 - 82",
        ]
    );
    let closed = served.connect("127.0.0.1:53".parse().unwrap()).await;
    assert!(closed.is_err(), "DNS is closed");
}
