//! [`DnsServer`]: a tiny authoritative DNS server on 127.0.0.1:53.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::netns::LOCK_DIR;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;

/// A DNS server on `127.0.0.1:53` (UDP) answering A and AAAA queries from a
/// fixed table, with TTL 0, and recording every query.
///
/// A hosts file gives Squid one address per name (its last line for that
/// name wins); names with several answers, in both families, need DNS.
/// Squid's `dns_nameservers` is 127.0.0.1 whenever a hosts file is given,
/// so names missing from the hosts file are asked here.
///
/// Port 53 is one per machine: [`DnsServer::start`] waits for a lock under
/// `/run/constle-testkit/`, so tests that use it (in any process) run one
/// at a time. Needs root. Unknown names get NXDOMAIN; a known name without
/// records of the asked type gets an empty answer.
pub struct DnsServer {
    shared: Arc<DnsShared>,
    thread: Option<JoinHandle<()>>,
    _lock: File,
}

#[derive(Default)]
struct DnsShared {
    stop: AtomicBool,
    records: HashMap<String, Vec<IpAddr>>,
    queries: Mutex<Vec<(String, u16)>>,
}

impl DnsServer {
    /// Serves `records` (name → address; a name may repeat) until dropped.
    pub fn start(records: &[(&str, IpAddr)]) -> io::Result<DnsServer> {
        let lock = take_lock()?;
        let socket = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 53)))?;
        socket.set_read_timeout(Some(Duration::from_millis(50)))?;
        let mut table: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (name, addr) in records {
            table.entry(normalize(name)).or_default().push(*addr);
        }
        let shared = Arc::new(DnsShared {
            records: table,
            ..DnsShared::default()
        });
        let serving = Arc::clone(&shared);
        let thread = std::thread::spawn(move || serve(&socket, &serving));
        Ok(DnsServer {
            shared,
            thread: Some(thread),
            _lock: lock,
        })
    }

    /// How many queries (any type) named `name`.
    pub fn queries_for(&self, name: &str) -> usize {
        let name = normalize(name);
        self.shared
            .queries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(n, _)| *n == name)
            .count()
    }

    /// Every query so far: (name, type) in arrival order; type 1 is A, 28
    /// AAAA.
    pub fn queries(&self) -> Vec<(String, u16)> {
        self.shared
            .queries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn take_lock() -> io::Result<File> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(LOCK_DIR)?;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(Path::new(LOCK_DIR).join("dns-53.lock"))?;
    file.lock()?;
    Ok(file)
}

fn serve(socket: &UdpSocket, shared: &DnsShared) {
    let mut buf = [0u8; 1500];
    while !shared.stop.load(Ordering::SeqCst) {
        let Ok((n, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let Some((name, qtype, question_end)) = parse_query(&buf[..n]) else {
            continue;
        };
        shared
            .queries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name.clone(), qtype));
        let reply = answer(&buf[..n], question_end, shared.records.get(&name), qtype);
        let _ = socket.send_to(&reply, peer);
    }
}

/// The question's name (lower case, no trailing dot), type, and where the
/// question ends.
fn parse_query(msg: &[u8]) -> Option<(String, u16, usize)> {
    if msg.len() < 12 || msg[2] & 0x80 != 0 || u16::from_be_bytes([msg[4], msg[5]]) != 1 {
        return None;
    }
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*msg.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None;
        }
        labels.push(String::from_utf8_lossy(msg.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*msg.get(i)?, *msg.get(i + 1)?]);
    Some((labels.join("."), qtype, i + 4))
}

fn answer(query: &[u8], question_end: usize, records: Option<&Vec<IpAddr>>, qtype: u16) -> Vec<u8> {
    let matching: Vec<&IpAddr> = records
        .map(|r| {
            r.iter()
                .filter(|a| match a {
                    IpAddr::V4(_) => qtype == TYPE_A,
                    IpAddr::V6(_) => qtype == TYPE_AAAA,
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(&query[0..2]); // id
    let rd = query[2] & 0x01;
    out.push(0x84 | rd); // QR, AA, RD copied
    out.push(if records.is_some() { 0x80 } else { 0x83 }); // RA; NXDOMAIN
    out.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
    out.extend_from_slice(&u16::try_from(matching.len()).unwrap_or(0).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]); // NSCOUNT, ARCOUNT
    out.extend_from_slice(&query[12..question_end]);
    for addr in matching {
        out.extend_from_slice(&[0xc0, 0x0c]); // the question's name
        let (rtype, data) = match addr {
            IpAddr::V4(v4) => (TYPE_A, v4.octets().to_vec()),
            IpAddr::V6(v6) => (TYPE_AAAA, v6.octets().to_vec()),
        };
        out.extend_from_slice(&rtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes()); // TTL 0
        out.extend_from_slice(&u16::try_from(data.len()).unwrap_or(0).to_be_bytes());
        out.extend_from_slice(&data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_a_query() {
        // id 0x1234, RD, one question: a.example.test A IN
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in ["a", "example", "test"] {
            q.push(u8::try_from(label.len()).expect("short"));
            q.extend_from_slice(label.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        let (name, qtype, end) = parse_query(&q).expect("query");
        assert_eq!((name.as_str(), qtype, end), ("a.example.test", 1, q.len()));
        let records = vec![
            IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)),
            IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ];
        let reply = answer(&q, end, Some(&records), TYPE_A);
        assert_eq!(&reply[0..4], &[0x12, 0x34, 0x85, 0x80]);
        assert_eq!(&reply[6..8], &[0, 1]);
        assert_eq!(&reply[reply.len() - 4..], &[203, 0, 113, 9]);
        let nx = answer(&q, end, None, TYPE_A);
        assert_eq!(nx[3] & 0x0f, 3);
    }
}
