//! The sandbox's own network namespace, for a spec with a [`Network`]:
//! made by the launcher before bwrap, which then shares it instead of
//! making an empty one.
//!
//! In it, the launcher brings `lo` up, binds the doors' listeners and, for
//! a name service, routes the placeholder ranges to `lo` (`local … dev
//! lo`, so a connection to any placeholder is delivered to this
//! namespace's own listeners) and binds the service's sockets; it sends
//! them all to `constle run` on the host over the spec's channel
//! (`SCM_RIGHTS`), closing its own copies before bwrap starts. Served on
//! the host, the sockets are reachable from inside only as a peer: nothing
//! in the sandbox holds them, and the namespace belongs to a user
//! namespace (the host's, or the launcher's own) in which the agent has no
//! capability, so it can neither unbind, reroute nor sniff.
//!
//! The sockets, in the order they travel ([`NamespaceSockets`]): each
//! door's listener, in the spec's order; then for a name service DNS over
//! UDP and TCP on 127.0.0.1:53, the capture listeners on 0.0.0.0:443 and
//! `[::]:443` (IPv6 only), and a raw TCP socket of each family, whose copy
//! of every SYN tells the host about a connection to a placeholder's other
//! ports (which the kernel refuses at once, there being no listener).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::link::{LinkFlags, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{Socket, SocketAddr as NetlinkAddr, protocols::NETLINK_ROUTE};
use nix::sched::{CloneFlags, unshare};
use nix::sys::socket::{
    AddressFamily as Family, Backlog, SockFlag, SockType, SockaddrIn, SockaddrIn6, bind,
    getsockopt, listen, setsockopt, socket, sockopt,
};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use socket2::{Domain, Protocol, SockFilter, Socket as RawSocket, Type};

use crate::layout::{CAPTURED_PORT, MAX_SOCKETS, NAME_SERVER, NAME_SOCKETS};
use crate::spec::{Door, Network};

/// `lo`'s index in a new network namespace.
const LOOPBACK_INDEX: u32 = 1;

/// The kernel's `local` routing table.
const LOCAL_TABLE: u8 = 255;

/// The sockets of a sandbox's network namespace, as the host receives them.
#[derive(Debug)]
pub struct NamespaceSockets {
    /// Each door's listener, in the spec's order.
    pub doors: Vec<TcpListener>,
    /// The name service's, if the spec has one.
    pub names: Option<NameSockets>,
}

/// The name service's sockets.
#[derive(Debug)]
pub struct NameSockets {
    /// DNS over UDP, on [`NAME_SERVER`] port 53.
    pub dns_udp: UdpSocket,
    /// DNS over TCP, on [`NAME_SERVER`] port 53.
    pub dns_tcp: TcpListener,
    /// Connections to an IPv4 placeholder's [`CAPTURED_PORT`] (listening
    /// on `0.0.0.0`: the accepted stream's local address is the
    /// placeholder).
    pub capture_v4: TcpListener,
    /// The same for IPv6 (`[::]`, IPv6 only).
    pub capture_v6: TcpListener,
    /// A raw IPv4 `IPPROTO_TCP` socket: a copy of every TCP segment the
    /// namespace receives, IP header first. Only ever read.
    pub syn_v4: OwnedFd,
    /// The same for IPv6: TCP header only, the destination in an
    /// `IPV6_PKTINFO` control message (asked for).
    pub syn_v6: OwnedFd,
}

/// Why the namespace could not be set up.
#[derive(Debug)]
pub(crate) struct NetnsFailed {
    pub what: String,
    pub source: io::Error,
}

fn failed(what: impl Into<String>) -> impl FnOnce(nix::Error) -> NetnsFailed {
    let what = what.into();
    move |errno| NetnsFailed {
        what,
        source: errno.into(),
    }
}

fn failed_io(what: impl Into<String>) -> impl FnOnce(io::Error) -> NetnsFailed {
    let what = what.into();
    move |source| NetnsFailed { what, source }
}

/// Moves the (single-threaded) launcher into a new network namespace, sets
/// it up, and sends its sockets over `network.channel`. As root with
/// `CAP_SYS_ADMIN` (`as_root`) the namespace belongs to the host's user
/// namespace; otherwise to a new one of the launcher's own, which maps only
/// the launcher's ids to themselves (bwrap's own user namespace, the
/// agent's, is made inside it).
pub(crate) fn enter(as_root: bool, network: &Network) -> Result<(), NetnsFailed> {
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let flags = match as_root {
        true => CloneFlags::CLONE_NEWNET,
        false => CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWUSER,
    };
    unshare(flags).map_err(failed("cannot make the sandbox's network namespace"))?;
    if !as_root {
        map_self(uid.as_raw(), gid.as_raw())?;
    }
    loopback_up()?;
    let mut sockets = network
        .doors
        .iter()
        .map(door)
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(service) = &network.name_service {
        for &(address, prefix) in &service.local_routes {
            route_locally(address, prefix)?;
        }
        sockets.extend(name_sockets(&service.local_routes)?);
    }
    send(&network.channel, &sockets)
}

fn door(door: &Door) -> Result<OwnedFd, NetnsFailed> {
    listening(door.listen.into())
}

/// The new user namespace's only ids: the launcher's own.
fn map_self(uid: u32, gid: u32) -> Result<(), NetnsFailed> {
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text).map_err(failed_io(format!(
            "cannot write the user namespace's {file}"
        )))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1\n"))?;
    write("gid_map", format!("{gid} {gid} 1\n"))
}

fn loopback_up() -> Result<(), NetnsFailed> {
    let mut link = LinkMessage::default();
    link.header.index = LOOPBACK_INDEX;
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    request(RouteNetlinkMessage::SetLink(link), 0)
        .map_err(failed_io("cannot bring the sandbox's loopback up"))
}

/// `ip route add local ADDRESS/PREFIX dev lo` (table `local`).
fn route_locally(address: IpAddr, prefix: u8) -> Result<(), NetnsFailed> {
    let mut route = RouteMessage::default();
    route.header.address_family = match address {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    route.header.destination_prefix_length = prefix;
    route.header.table = LOCAL_TABLE;
    route.header.protocol = RouteProtocol::Boot;
    route.header.scope = RouteScope::Host;
    route.header.kind = RouteType::Local;
    route.attributes = vec![
        RouteAttribute::Destination(RouteAddress::from(address)),
        RouteAttribute::Oif(LOOPBACK_INDEX),
    ];
    request(RouteNetlinkMessage::NewRoute(route), NLM_F_CREATE).map_err(failed_io(format!(
        "cannot route {address}/{prefix} to the sandbox's loopback"
    )))
}

/// Sends one request and waits for the kernel's acknowledgement.
fn request(message: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
    let mut packet = NetlinkMessage::from(message);
    packet.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    packet.finalize();
    let mut bytes = vec![0; packet.buffer_len()];
    packet.serialize(&mut bytes);
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&NetlinkAddr::new(0, 0))?;
    socket.send(&bytes, 0)?;
    let (reply, _) = socket.recv_from_full()?;
    let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&reply)
        .map_err(|e| io::Error::other(format!("unreadable netlink reply: {e}")))?;
    match reply.payload {
        NetlinkPayload::Error(error) if error.code.is_some() => Err(error.to_io()),
        NetlinkPayload::Error(_) => Ok(()),
        other => Err(io::Error::other(format!(
            "unexpected netlink reply {other:?}"
        ))),
    }
}

/// The name service's sockets, bound in the current (the sandbox's)
/// namespace.
fn name_sockets(routes: &[(IpAddr, u8)]) -> Result<[OwnedFd; NAME_SOCKETS], NetnsFailed> {
    let dns = SocketAddr::from((NAME_SERVER, 53));
    let any_v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, CAPTURED_PORT));
    let any_v6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, CAPTURED_PORT));
    Ok([
        bound(dns, SockType::Datagram)?,
        listening(dns)?,
        listening(any_v4)?,
        listening(any_v6)?,
        raw(Family::Inet, routes)?,
        raw(Family::Inet6, routes)?,
    ])
}

fn bound(at: SocketAddr, kind: SockType) -> Result<OwnedFd, NetnsFailed> {
    let what = || format!("cannot bind {at} in the sandbox's network namespace");
    let family = match at {
        SocketAddr::V4(_) => Family::Inet,
        SocketAddr::V6(_) => Family::Inet6,
    };
    let fd = socket(family, kind, SockFlag::SOCK_CLOEXEC, None).map_err(failed(what()))?;
    match at {
        SocketAddr::V4(v4) => bind(fd.as_raw_fd(), &SockaddrIn::from(v4)),
        SocketAddr::V6(v6) => {
            setsockopt(&fd, sockopt::Ipv6V6Only, &true).map_err(failed(what()))?;
            bind(fd.as_raw_fd(), &SockaddrIn6::from(v6))
        }
    }
    .map_err(failed(what()))?;
    Ok(fd)
}

fn listening(at: SocketAddr) -> Result<OwnedFd, NetnsFailed> {
    let fd = bound(at, SockType::Stream)?;
    listen(&fd, Backlog::MAXCONN).map_err(failed(format!("cannot listen on {at}")))?;
    Ok(fd)
}

/// A raw TCP socket that keeps only what the SYN watch is for: a SYN
/// without ACK, to a placeholder, for a port other than 443. Filtered in
/// the kernel, so the agent's other traffic (a tunnel's gigabytes through
/// the proxy's door on `lo`) is neither copied nor wakes the host.
fn raw(family: Family, routes: &[(IpAddr, u8)]) -> Result<OwnedFd, NetnsFailed> {
    let what = "cannot open the sandbox's SYN watch";
    let (domain, filter) = match family {
        Family::Inet6 => (Domain::IPV6, syn_filter_v6(routes)),
        _ => (Domain::IPV4, syn_filter_v4(routes)),
    };
    let socket = RawSocket::new(domain, Type::RAW.cloexec(), Some(Protocol::TCP))
        .map_err(failed_io(what))?;
    socket.attach_filter(&filter).map_err(failed_io(what))?;
    let fd = OwnedFd::from(socket);
    if family == Family::Inet6 {
        setsockopt(&fd, sockopt::Ipv6RecvPacketInfo, &true).map_err(failed(what))?;
    }
    Ok(fd)
}

// Classic BPF, as `linux/filter.h` spells it.
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_H_IND: u16 = 0x48;
const LD_B_IND: u16 = 0x50;
const LDX_B_MSH: u16 = 0xb1;
const AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
/// Where a filter reads the network header from, whatever the data
/// starts with (`SKF_NET_OFF`, as an unsigned offset).
const NET_OFF: u32 = 0xfff0_0000;
/// SYN and ACK in the TCP flags byte, and SYN alone.
const SYN_ACK: u32 = 0x12;
const SYN: u32 = 0x02;
/// How much of a kept packet is queued: the longest IPv4 header and the
/// TCP header's first 20 bytes.
const KEEP: u32 = 80;

/// The mask, in a field `width` bits wide, of a `prefix`'s bits past the
/// first `skip` (those the field before held).
fn mask(prefix: u8, skip: u8, width: u8) -> u32 {
    match u32::from(prefix.saturating_sub(skip).min(width)) {
        0 => 0,
        bits => (u32::MAX << (u32::from(width) - bits)) & (u32::MAX >> (32 - u32::from(width))),
    }
}

/// A filter that keeps nothing: for a family with no route to watch.
fn nothing() -> Vec<SockFilter> {
    vec![SockFilter::new(RET_K, 0, 0, 0)]
}

/// IPv4: the data starts with the IP header. The first IPv4 route is
/// watched.
fn syn_filter_v4(routes: &[(IpAddr, u8)]) -> Vec<SockFilter> {
    let Some((pool, prefix)) = routes.iter().find_map(|&(address, prefix)| match address {
        IpAddr::V4(v4) => Some((u32::from(v4), prefix)),
        IpAddr::V6(_) => None,
    }) else {
        return nothing();
    };
    let mask = mask(prefix, 0, 32);
    vec![
        SockFilter::new(LD_W_ABS, 0, 0, 16), // destination address
        SockFilter::new(AND_K, 0, 0, mask),
        SockFilter::new(JEQ_K, 0, 9, pool & mask),
        SockFilter::new(LD_H_ABS, 0, 0, 6), // a fragment past the first
        SockFilter::new(JSET_K, 7, 0, 0x1fff),
        SockFilter::new(LDX_B_MSH, 0, 0, 0), // X: the IP header's length
        SockFilter::new(LD_B_IND, 0, 0, 13), // TCP flags
        SockFilter::new(AND_K, 0, 0, SYN_ACK),
        SockFilter::new(JEQ_K, 0, 3, SYN),
        SockFilter::new(LD_H_IND, 0, 0, 2), // destination port
        SockFilter::new(JEQ_K, 1, 0, u32::from(CAPTURED_PORT)),
        SockFilter::new(RET_K, 0, 0, KEEP),
        SockFilter::new(RET_K, 0, 0, 0),
    ]
}

/// IPv6: the data starts with the TCP header; the destination address is
/// read from the network header. The first IPv6 route is watched, on its
/// first 48 bits at most (a longer prefix is watched as its /48).
fn syn_filter_v6(routes: &[(IpAddr, u8)]) -> Vec<SockFilter> {
    let Some((pool, prefix)) = routes.iter().find_map(|&(address, prefix)| match address {
        IpAddr::V6(v6) => Some((v6.segments(), prefix)),
        IpAddr::V4(_) => None,
    }) else {
        return nothing();
    };
    let [a, b, c, ..] = pool;
    let (high, low) = (mask(prefix, 0, 32), mask(prefix, 32, 16));
    vec![
        SockFilter::new(LD_W_ABS, 0, 0, NET_OFF + 24), // destination, first 32 bits
        SockFilter::new(AND_K, 0, 0, high),
        SockFilter::new(JEQ_K, 0, 9, ((u32::from(a) << 16) | u32::from(b)) & high),
        SockFilter::new(LD_H_ABS, 0, 0, NET_OFF + 28), // the next 16 bits
        SockFilter::new(AND_K, 0, 0, low),
        SockFilter::new(JEQ_K, 0, 6, u32::from(c) & low),
        SockFilter::new(LD_B_ABS, 0, 0, 13), // TCP flags
        SockFilter::new(AND_K, 0, 0, SYN_ACK),
        SockFilter::new(JEQ_K, 0, 3, SYN),
        SockFilter::new(LD_H_ABS, 0, 0, 2), // destination port
        SockFilter::new(JEQ_K, 1, 0, u32::from(CAPTURED_PORT)),
        SockFilter::new(RET_K, 0, 0, KEEP),
        SockFilter::new(RET_K, 0, 0, 0),
    ]
}

/// Connects to the host's `channel` and sends every socket in one message.
fn send(channel: &Path, sockets: &[OwnedFd]) -> Result<(), NetnsFailed> {
    let what = || format!("cannot send the sandbox's sockets to {}", channel.display());
    if sockets.len() > MAX_SOCKETS {
        return Err(failed_io(what())(io::Error::other(format!(
            "more than {MAX_SOCKETS} of them"
        ))));
    }
    let stream = UnixStream::connect(channel).map_err(failed_io(what()))?;
    let fds: Vec<BorrowedFd<'_>> = sockets.iter().map(AsFd::as_fd).collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SOCKETS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(failed_io(what())(io::Error::other(
            "no room for the descriptors",
        )));
    }
    match sendmsg(
        &stream,
        &[IoSlice::new(b"n")],
        &mut control,
        SendFlags::empty(),
    ) {
        Ok(1) => Ok(()),
        Ok(_) => Err(failed_io(what())(io::Error::other("short write"))),
        Err(errno) => Err(failed_io(what())(errno.into())),
    }
}

/// `fd` as door `door`'s listener, if it is one: a TCP socket listening
/// on the door's address.
fn listening_on(door: &Door, fd: OwnedFd) -> io::Result<TcpListener> {
    let socket = RawSocket::from(fd);
    let local = socket.local_addr()?.as_socket();
    let is_tcp = socket.r#type()? == Type::STREAM && socket.protocol()? == Some(Protocol::TCP);
    let listening = getsockopt(&socket, sockopt::AcceptConn)?;
    if !(is_tcp && listening && local == Some(door.listen.into())) {
        return Err(io::Error::other(format!(
            "what came for door {} is not a TCP socket listening on {}",
            door.name, door.listen
        )));
    }
    Ok(socket.into())
}

/// Receives a launcher's sockets from `stream` (accepted on the channel,
/// its peer checked by the caller), for a spec of `doors` and a name
/// service or not: exactly as many as those send, each door a TCP socket
/// listening on its address, or an error.
pub fn receive_sockets(
    stream: &UnixStream,
    doors: &[Door],
    name_service: bool,
) -> io::Result<NamespaceSockets> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SOCKETS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = recvmsg(
        stream,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if received.flags.contains(ReturnFlags::CTRUNC) {
        return Err(io::Error::other("the sandbox's sockets arrived truncated"));
    }
    let fds: Vec<OwnedFd> = control
        .drain()
        .filter_map(|message| match message {
            RecvAncillaryMessage::ScmRights(fds) => Some(fds),
            _ => None,
        })
        .flatten()
        .collect();
    let expected = doors.len() + if name_service { NAME_SOCKETS } else { 0 };
    if fds.len() != expected {
        return Err(io::Error::other(format!(
            "expected {expected} sockets, got {}",
            fds.len()
        )));
    }
    let mut fds = fds.into_iter();
    let doors = doors
        .iter()
        .zip(fds.by_ref())
        .map(|(door, fd)| listening_on(door, fd))
        .collect::<io::Result<_>>()?;
    let names = match <[OwnedFd; NAME_SOCKETS]>::try_from(fds.collect::<Vec<_>>()) {
        Ok([dns_udp, dns_tcp, capture_v4, capture_v6, syn_v4, syn_v6]) => Some(NameSockets {
            dns_udp: dns_udp.into(),
            dns_tcp: dns_tcp.into(),
            capture_v4: capture_v4.into(),
            capture_v6: capture_v6.into(),
            syn_v4,
            syn_v6,
        }),
        Err(_) => None,
    };
    Ok(NamespaceSockets { doors, names })
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    /// Sends `sockets` over a channel and receives them for `doors`.
    fn hand_over(sockets: Vec<OwnedFd>, doors: &[Door]) -> io::Result<NamespaceSockets> {
        let dir = tempfile::tempdir().unwrap();
        let channel = dir.path().join("network.sock");
        let listener = UnixListener::bind(&channel).unwrap();
        let sender = std::thread::spawn(move || send(&channel, &sockets).map_err(|e| e.what));
        let (stream, _) = listener.accept().unwrap();
        let received = receive_sockets(&stream, doors, false);
        sender.join().unwrap().unwrap();
        received
    }

    fn door(listen: SocketAddr) -> Door {
        let SocketAddr::V4(listen) = listen else {
            panic!("{listen}")
        };
        Door {
            name: "proxy".into(),
            listen,
        }
    }

    /// A door's listener is taken only as what it must be: a TCP socket
    /// listening on the door's own address.
    #[test]
    fn a_door_is_taken_only_listening_on_its_address() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let got = hand_over(vec![listener.into()], &[door(address)]).unwrap();
        assert_eq!(got.doors[0].local_addr().unwrap(), address);

        let elsewhere = TcpListener::bind("127.0.0.1:0").unwrap();
        let wanted = door("127.0.0.1:3128".parse().unwrap());
        let err = hand_over(vec![elsewhere.into()], std::slice::from_ref(&wanted)).unwrap_err();
        assert!(
            err.to_string()
                .contains("not a TCP socket listening on 127.0.0.1:3128"),
            "{err}"
        );

        let bound_only = RawSocket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
        bound_only.bind(&any_port.into()).unwrap();
        let at = bound_only.local_addr().unwrap().as_socket().unwrap();
        let err = hand_over(vec![bound_only.into()], &[door(at)]).unwrap_err();
        assert!(
            err.to_string().contains("not a TCP socket listening"),
            "{err}"
        );

        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let at = udp.local_addr().unwrap();
        let err = hand_over(vec![udp.into()], &[door(at)]).unwrap_err();
        assert!(
            err.to_string().contains("not a TCP socket listening"),
            "{err}"
        );

        let err = hand_over(Vec::new(), &[wanted]).unwrap_err();
        assert!(
            err.to_string().contains("expected 1 sockets, got 0"),
            "{err}"
        );
    }
}
