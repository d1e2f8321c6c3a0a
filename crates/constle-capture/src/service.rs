//! [`serve`]: every socket of [`Sockets`] served by a task of its own, all
//! stopping at the first failure.

use std::net::{SocketAddr, TcpListener as StdTcpListener, UdpSocket as StdUdpSocket};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use constle_dns::Resolver;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::accept;
use crate::capture;
use crate::context::Context;
use crate::dns;
use crate::error::CaptureError;
use crate::event::Recorder;
use crate::limits::Limits;
use crate::syn;
use crate::tasks::Tasks;

/// The sockets of a sandbox's network namespace, made and bound there
/// before the agent starts. Blocking or not: [`serve`] makes them
/// non-blocking.
#[derive(Debug, Default)]
pub struct Sockets {
    /// The resolver's UDP sockets (port 53).
    pub dns_udp: Vec<StdUdpSocket>,
    /// The resolver's TCP listeners (port 53).
    pub dns_tcp: Vec<StdTcpListener>,
    /// The capture listeners: port 443 of every address the placeholders
    /// are routed to (`0.0.0.0`, `[::]`).
    pub capture: Vec<StdTcpListener>,
    /// Raw TCP sockets (`SOCK_RAW`, `IPPROTO_TCP`), IPv4 or IPv6, that see
    /// every connection attempt in the namespace.
    pub syn_watch: Vec<OwnedFd>,
}

/// Serves `sockets` with `resolver` until an event cannot be recorded or a
/// socket fails (the error), or until `closing` is cancelled: then DNS and
/// the capture stop at once (their connections with them), and the SYN
/// watch records what its sockets still hold before `serve` returns
/// `Ok`, so an attempt refused before the close is never lost. Dropping
/// the future stops everything. `proxy` gives the address of the egress
/// proxy captured connections go through, once it has one. Must be polled
/// inside a Tokio runtime with I/O and time enabled.
pub async fn serve<R: Recorder>(
    sockets: Sockets,
    resolver: Resolver,
    proxy: watch::Receiver<Option<SocketAddr>>,
    recorder: R,
    limits: Limits,
    closing: CancellationToken,
) -> Result<(), CaptureError> {
    let dns_slots = Arc::new(Semaphore::new(limits.dns_connections));
    let capture_slots = Arc::new(Semaphore::new(limits.captured_connections));
    let context = Arc::new(Context::new(resolver, recorder, proxy, limits));
    let mut tasks = Tasks::default();
    for socket in sockets.dns_udp {
        let socket = udp(socket).map_err(CaptureError::socket("DNS over UDP"))?;
        tasks.spawn(dns::udp(socket, Arc::clone(&context)));
    }
    for listener in sockets.dns_tcp {
        let listener = tcp(listener).map_err(CaptureError::socket("DNS over TCP"))?;
        let context = Arc::clone(&context);
        let handle = move |stream| dns::tcp(stream, Arc::clone(&context));
        tasks.spawn(accept::serve(listener, Arc::clone(&dns_slots), handle));
    }
    for listener in sockets.capture {
        let listener = tcp(listener).map_err(CaptureError::socket("capture"))?;
        let context = Arc::clone(&context);
        let handle = move |stream| capture::connection(stream, Arc::clone(&context));
        tasks.spawn(accept::serve(listener, Arc::clone(&capture_slots), handle));
    }
    let mut watches = Tasks::default();
    for socket in sockets.syn_watch {
        watches.spawn(syn::watch(socket, Arc::clone(&context), closing.clone()));
    }
    tokio::select! {
        error = tasks.failed() => return Err(error),
        error = watches.failed() => return Err(error),
        () = closing.cancelled() => {}
    }
    drop(tasks);
    watches.finished().await
}

fn udp(socket: StdUdpSocket) -> std::io::Result<UdpSocket> {
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
}

fn tcp(listener: StdTcpListener) -> std::io::Result<TcpListener> {
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}
