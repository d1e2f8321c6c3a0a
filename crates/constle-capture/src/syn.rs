//! The SYN watch: reads the raw TCP sockets of the sandbox's network
//! namespace and records each connection attempt to a placeholder on a
//! port other than 443. Nothing listens there, so the kernel has already
//! answered with a reset; the watch only records.

use std::io::{self, IoSliceMut};
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::Arc;

use nix::cmsg_space;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::libc::in6_pktinfo;
use nix::sys::socket::{
    AddressFamily, ControlMessageOwned, MsgFlags, SockaddrLike as _, SockaddrStorage, getsockname,
    recv, recvmsg, setsockopt, sockopt,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::error::CaptureError;
use crate::event::{Event, Recorder};
use crate::packet::{self, Refused};

const WHAT: &str = "SYN watch";

/// Enough for the longest IPv4 header and the TCP header's first 14
/// bytes (ports, flags); a longer packet is cut, which is all it needs.
const READ: usize = 60 + 20;

/// The family of a raw socket, and so what a read gives.
#[derive(Clone, Copy)]
enum Family {
    /// The IP header, then TCP.
    Ipv4,
    /// The TCP header only; the destination comes as `IPV6_PKTINFO`.
    Ipv6,
}

/// Reads `socket` (`SOCK_RAW`, `IPPROTO_TCP`), recording each refused
/// attempt before reading on, until `closing`: then what the socket still
/// holds is recorded, and the watch ends.
pub(crate) async fn watch<R: Recorder>(
    socket: OwnedFd,
    context: Arc<Context<R>>,
    closing: CancellationToken,
) -> Result<(), CaptureError> {
    let family = prepare(&socket).map_err(CaptureError::socket(WHAT))?;
    // Deprecated because an arbitrary `AsRawFd` may close or swap its
    // descriptor while registered; an `OwnedFd` never does, so this use is
    // sound, and the replacement (`register_with_interest`) is `unsafe`,
    // which the crate forbids (as in `constle-human-gate`'s terminal).
    #[allow(deprecated)]
    let socket =
        AsyncFd::with_interest(socket, Interest::READABLE).map_err(CaptureError::socket(WHAT))?;
    let mut buffer = [0; READ];
    loop {
        let mut ready = tokio::select! {
            ready = socket.readable() => ready.map_err(CaptureError::socket(WHAT))?,
            () = closing.cancelled() => return drain(socket.get_ref(), family, &context).await,
        };
        let read = ready.try_io(|socket| read_one(socket.get_ref(), family, &mut buffer));
        let refused = match read {
            Ok(read) => read_or_fail(read)?,
            Err(_would_block) => None,
        };
        record(refused, &context).await?;
    }
}

/// Records every attempt the socket (non-blocking) still holds.
async fn drain<R: Recorder>(
    socket: &OwnedFd,
    family: Family,
    context: &Context<R>,
) -> Result<(), CaptureError> {
    let mut buffer = [0; READ];
    loop {
        match read_one(socket, family, &mut buffer) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            read => record(read_or_fail(read)?, context).await?,
        }
    }
}

/// A read's attempt, if any; an interrupted read is none.
fn read_or_fail(read: io::Result<Option<Refused>>) -> Result<Option<Refused>, CaptureError> {
    match read {
        Ok(refused) => Ok(refused),
        Err(error) if error.kind() == io::ErrorKind::Interrupted => Ok(None),
        Err(source) => Err(CaptureError::Socket { what: WHAT, source }),
    }
}

async fn record<R: Recorder>(
    refused: Option<Refused>,
    context: &Context<R>,
) -> Result<(), CaptureError> {
    let Some(Refused { address, port }) = refused else {
        return Ok(());
    };
    let name = context.name_for(address);
    context
        .record(Event::PortRefused {
            address,
            name,
            port,
        })
        .await
}

/// Non-blocking, and for IPv6 with each packet's destination beside it.
fn prepare(socket: &OwnedFd) -> io::Result<Family> {
    let flags = OFlag::from_bits_retain(fcntl(socket, FcntlArg::F_GETFL)?);
    fcntl(socket, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    let local: SockaddrStorage = getsockname(socket.as_raw_fd())?;
    match local.family() {
        Some(AddressFamily::Inet) => Ok(Family::Ipv4),
        Some(AddressFamily::Inet6) => {
            setsockopt(socket, sockopt::Ipv6RecvPacketInfo, &true)?;
            Ok(Family::Ipv6)
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an IPv4 or IPv6 raw socket",
        )),
    }
}

/// One packet, kept if it is a refused attempt.
fn read_one(socket: &OwnedFd, family: Family, buffer: &mut [u8]) -> io::Result<Option<Refused>> {
    match family {
        Family::Ipv4 => {
            let length = recv(socket.as_raw_fd(), buffer, MsgFlags::empty())?;
            Ok(packet::ipv4(buffer.get(..length).unwrap_or_default()))
        }
        Family::Ipv6 => {
            let (destination, length) = read_ipv6(socket, buffer)?;
            let tcp = buffer.get(..length).unwrap_or_default();
            Ok(destination.and_then(|destination| packet::ipv6(destination, tcp)))
        }
    }
}

/// One IPv6 packet's TCP header into `buffer`: its destination (from its
/// `IPV6_PKTINFO`) and how many bytes were read.
fn read_ipv6(socket: &OwnedFd, buffer: &mut [u8]) -> io::Result<(Option<Ipv6Addr>, usize)> {
    let mut control = cmsg_space!(in6_pktinfo);
    let mut iov = [IoSliceMut::new(buffer)];
    let message = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut control),
        MsgFlags::empty(),
    )?;
    let destination = message.cmsgs()?.find_map(|cmsg| match cmsg {
        ControlMessageOwned::Ipv6PacketInfo(info) => Some(Ipv6Addr::from(info.ipi6_addr.s6_addr)),
        _ => None,
    });
    Ok((destination, message.bytes))
}
