//! The resolver behind a real UDP socket, asked by a real client
//! (Python's standard library, no resolver library): an allowed name gets
//! its placeholder, and a refused one NXDOMAIN at once, never a timeout.
//! The socket is the test's own; the crate itself has none.

#![allow(clippy::unwrap_used, reason = "test helpers panic on setup failure")]

use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use constle_dns::{Decision, Reason, Resolver, Transport};
use constle_egress::EgressPolicy;
use constle_manifest::Hostname;

/// Asks the server on the port in `argv[1]` each `name type` of
/// `argv[2:]`, waiting at most 5 s for each; prints `name type rcode
/// milliseconds address…` a line.
const CLIENT: &str = r#"
import socket, struct, sys, time
port = int(sys.argv[1])
TYPES = {"A": 1, "AAAA": 28, "TXT": 16, "ANY": 255}
def skip_name(b, i):
    while True:
        n = b[i]
        if n == 0: return i + 1
        if n & 0xC0 == 0xC0: return i + 2
        i += 1 + n
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
for n, (name, qtype) in enumerate(a.split(":") for a in sys.argv[2:]):
    q = struct.pack(">HHHHHH", n + 1, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    q += struct.pack(">HH", TYPES[qtype], 1)
    start = time.monotonic()
    s.sendto(q, ("127.0.0.1", port))
    try:
        r, _ = s.recvfrom(4096)
    except socket.timeout:
        print(name, qtype, "timeout", 5000); continue
    ms = (time.monotonic() - start) * 1000
    rid, flags, qd, an = struct.unpack(">HHHH", r[:8])
    assert rid == n + 1, (rid, n)
    i = skip_name(r, 12) + 4
    addrs = []
    for _ in range(an):
        i = skip_name(r, i)
        rtype, _, _, rdlen = struct.unpack(">HHIH", r[i:i + 10])
        data = r[i + 10:i + 10 + rdlen]
        fam = socket.AF_INET if rtype == 1 else socket.AF_INET6
        addrs.append(socket.inet_ntop(fam, data))
        i += 10 + rdlen
    print(name, qtype, flags & 0xF, round(ms, 3), *addrs)
"#;

#[test]
fn a_real_client_gets_placeholders_and_fast_nxdomain() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let port = socket.local_addr().unwrap().port();
    let policy = EgressPolicy::restricted([Hostname::new("api.example.com").unwrap()]);
    let stop = Arc::new(AtomicBool::new(false));
    let (decisions, recorded) = mpsc::channel();
    let server = thread::spawn({
        let stop = Arc::clone(&stop);
        move || serve(&socket, Resolver::new(Some(&policy)), &stop, &decisions)
    });

    let tunnel = format!("{}.t.example.com", "a".repeat(63));
    let out = Command::new("python3")
        .args(["-c", CLIENT, &port.to_string()])
        .args([
            "api.example.com:A",
            "API.Example.Com:AAAA",
            "evil.example.com:A",
            &format!("{tunnel}:TXT"),
            "api.example.com:TXT",
        ])
        .output()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Vec<String>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').map(str::to_owned).collect())
        .collect();
    eprintln!("{lines:?}");
    assert_eq!(lines.len(), 5);
    let rcodes: Vec<&str> = lines.iter().map(|l| l[2].as_str()).collect();
    assert_eq!(rcodes, ["0", "0", "3", "3", "0"]);
    assert_eq!(lines[0][4..], ["198.18.0.1"]);
    assert_eq!(lines[1][4..], ["2001:2::c612:1"]);
    assert_eq!(lines[4].len(), 4, "NODATA has no address");
    for line in &lines[2..4] {
        // At once: a refusal that waited for a client's timeout would
        // take seconds. Generous for a loaded machine.
        let ms: f64 = line[3].parse().unwrap();
        assert!(ms < 500.0, "{line:?}");
    }

    let recorded: Vec<Decision> = recorded.try_iter().collect();
    assert_eq!(recorded.len(), 5, "every query is handed over");
    let refused: Vec<Reason> = recorded
        .iter()
        .filter_map(|d| match d {
            Decision::Refused(r) => Some(r.reason),
            _ => None,
        })
        .collect();
    assert_eq!(refused, [Reason::NotAllowed, Reason::NotAllowed]);
}

/// Answers datagrams on `socket` until `stop`, handing each decision to
/// `decisions`.
fn serve(
    socket: &UdpSocket,
    mut resolver: Resolver,
    stop: &AtomicBool,
    decisions: &mpsc::Sender<Decision>,
) {
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        let Ok((len, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let answer = resolver.answer(&buf[..len], Transport::Udp);
        if let Some(reply) = answer.reply_after(|d| decisions.send(d).unwrap()) {
            socket.send_to(&reply, peer).unwrap();
        }
    }
}
