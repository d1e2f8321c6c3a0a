//! The test host itself: reachable on its addresses, echoing, gone after drop.

#![allow(clippy::expect_used, reason = "test helpers panic on setup failure")]

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use constle_testkit::{TestHost, require_root};

fn exchange(host: &TestHost, addr: IpAddr) {
    let mut stream =
        TcpStream::connect_timeout(&SocketAddr::new(addr, host.port()), Duration::from_secs(5))
            .expect("connect to the test host");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut banner = String::new();
    reader.read_line(&mut banner).expect("banner");
    assert_eq!(banner, host.banner_for(addr));
    stream.write_all(b"ping\n").expect("write");
    let mut echo = String::new();
    reader.read_line(&mut echo).expect("echo");
    assert_eq!(echo, "ping\n");
}

#[test]
fn reachable_on_every_address_then_gone() {
    if !require_root("test host", &["ip"]) {
        return;
    }
    let host = TestHost::start().expect("test host");
    let other = TestHost::start().expect("a second test host at the same time");
    assert_ne!(host.ipv4(), other.ipv4());
    exchange(&host, host.ipv4().into());
    exchange(&host, host.ipv6().into());
    exchange(&host, host.spare_ipv4().into());
    exchange(&other, other.ipv4().into());
    let trapped: IpAddr = format!("10.99.{}.1", host.slot()).parse().expect("addr");
    host.trap(trapped).expect("trap");
    exchange(&host, trapped);
    let trapped6: IpAddr = format!("fd99::{}", host.slot()).parse().expect("addr");
    host.trap(trapped6).expect("trap v6");
    exchange(&host, trapped6);
    assert_eq!(host.connections(), 5);
    assert_eq!(other.connections(), 1);

    let (ns, link) = (
        host.namespace().to_owned(),
        host.host_interface().to_owned(),
    );
    drop(host);
    assert!(!std::path::Path::new(&format!("/run/netns/{ns}")).exists());
    assert!(!std::path::Path::new(&format!("/sys/class/net/{link}")).exists());
    drop(other);
}

#[test]
fn a_panicking_test_still_tears_down() {
    if !require_root("test host teardown on panic", &["ip"]) {
        return;
    }
    let names = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(|| {
        let host = TestHost::start().expect("test host");
        *names.lock().expect("lock") = Some((
            host.namespace().to_owned(),
            host.host_interface().to_owned(),
        ));
        panic!("a failing test");
    });
    assert!(result.is_err());
    let (ns, link) = names.lock().expect("lock").clone().expect("names");
    assert!(!std::path::Path::new(&format!("/run/netns/{ns}")).exists());
    assert!(!std::path::Path::new(&format!("/sys/class/net/{link}")).exists());
}
