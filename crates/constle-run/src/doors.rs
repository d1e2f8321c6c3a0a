//! The host side of a sandbox's ways out: its doors (the proxy's, the
//! gates'), served here on listeners its launcher binds inside the
//! sandbox's network namespace and hands over through the run's
//! [`Channel`](crate::channel::Channel).
//!
//! A server (the proxy's bridge, a gate) is handed a [`DoorListener`]
//! before the sandbox exists, and starts accepting on it at once: what the
//! agent connects to waits in the kernel's queue until the listener
//! arrives, a moment later. A listener is served until its launch ends.
//!
//! Every connection accepted costs `constle run` descriptors of its own,
//! so the run's doors together accept at most their share
//! ([`crate::descriptors`]) at once; past that, the agent's connections
//! wait in the kernel's queue and hold nothing of the host's. Without the
//! bound an agent could take every descriptor `constle run` may open, and
//! the run's own work (its audit log) would fail.

use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use constle_sandbox::Door;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, SemaphorePermit, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The permits for the connections to the run's doors open at once, all
/// doors and all of the run's sandboxes together (one run per process),
/// sized when the first door opens.
fn connections() -> &'static Semaphore {
    static CONNECTIONS: OnceLock<Semaphore> = OnceLock::new();
    CONNECTIONS.get_or_init(|| Semaphore::new(crate::descriptors::shares().door_connections))
}

// Every door an Agentfile can ask for fits in a sandbox: the proxy's, the
// A2A inbox's, one per MCP server, and one per model gate (at most three:
// one per base-URL variable).
const _: () = assert!(constle_manifest::MAX_MCP_SERVERS + 5 <= constle_sandbox::MAX_DOORS);

/// How many accepted connections wait for their server before the door's
/// acceptors stop taking more (the rest wait in the kernel's queue).
const ACCEPTED_QUEUE: usize = 64;

/// A door being opened: what the sandbox's spec says of it, and where its
/// listener goes once it arrives.
pub(crate) struct OpenDoor {
    pub(crate) door: Door,
    pub(crate) arrivals: Arrivals,
}

/// Where a door's listener from each launch goes, with the token its
/// launch's end cancels.
pub(crate) type Arrivals = mpsc::UnboundedSender<(TcpListener, CancellationToken)>;

/// Opens door `name` at `listen` in the sandbox: what goes into the spec
/// (through a [`Channel`](crate::channel::Channel)), and the listener its
/// server accepts on.
pub(crate) fn open(name: String, listen: SocketAddrV4) -> (OpenDoor, DoorListener) {
    open_within(name, listen, connections())
}

/// [`open`], its connections counted against `permits`.
fn open_within(
    name: String,
    listen: SocketAddrV4,
    permits: &'static Semaphore,
) -> (OpenDoor, DoorListener) {
    let (arrivals, arrived) = mpsc::unbounded_channel();
    let (queue, accepted) = mpsc::channel(ACCEPTED_QUEUE);
    let door = OpenDoor {
        door: Door { name, listen },
        arrivals,
    };
    let listener = DoorListener {
        listen,
        permits,
        arrived,
        queue,
        accepted,
        acceptors: JoinSet::new(),
    };
    (door, listener)
}

/// What a door's server accepts on: the connections to the door of every
/// sandbox launched with it (the agent's one; a stdio server's, one per
/// session), as an [`axum::serve::Listener`].
pub(crate) struct DoorListener {
    listen: SocketAddrV4,
    permits: &'static Semaphore,
    arrived: mpsc::UnboundedReceiver<(TcpListener, CancellationToken)>,
    queue: mpsc::Sender<(DoorStream, SocketAddr)>,
    accepted: mpsc::Receiver<(DoorStream, SocketAddr)>,
    acceptors: JoinSet<()>,
}

impl axum::serve::Listener for DoorListener {
    type Io = DoorStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (DoorStream, SocketAddr) {
        loop {
            tokio::select! {
                Some((listener, ended)) = self.arrived.recv() => {
                    let queue = self.queue.clone();
                    self.acceptors.spawn(accept_into(listener, queue, self.permits, ended));
                }
                Some(accepted) = self.accepted.recv() => return accepted,
                // An ended launch's acceptor, let go of.
                Some(_) = self.acceptors.join_next() => {}
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.listen.into())
    }
}

/// Accepts on `listener` (retrying failed accepts, as axum does) into
/// `queue`, a connection per permit, until the door's server is gone or
/// its launch `ended`; the listener is closed then.
async fn accept_into(
    mut listener: TcpListener,
    queue: mpsc::Sender<(DoorStream, SocketAddr)>,
    permits: &'static Semaphore,
    ended: CancellationToken,
) {
    let accepting = async {
        while let Ok(permit) = permits.acquire().await {
            let (stream, peer) = axum::serve::Listener::accept(&mut listener).await;
            let stream = DoorStream {
                stream,
                _permit: permit,
            };
            if queue.send((stream, peer)).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = accepting => {}
        () = ended.cancelled() => {}
    }
}

/// A connection to a door, holding its place among the doors' connections
/// until it is dropped.
pub(crate) struct DoorStream {
    stream: TcpStream,
    _permit: SemaphorePermit<'static>,
}

impl DoorStream {
    /// The connection itself (for `splice`).
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.stream
    }
}

impl AsyncRead for DoorStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for DoorStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    // hyper writes a response's head and body with one `writev` when the
    // stream can: passed on, so the door costs no extra copy or syscall.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::serve::Listener as _;

    use super::*;

    /// Past the bound, a connection waits in the kernel's queue, and is
    /// accepted once another closes.
    #[tokio::test]
    async fn the_doors_hold_at_most_the_bound_at_once() {
        let permits = Box::leak(Box::new(Semaphore::new(4)));
        let (door, mut listener) =
            open_within("proxy".into(), "127.0.0.1:3128".parse().unwrap(), permits);
        let bound = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = bound.local_addr().unwrap();
        let _ = door.arrivals.send((bound, CancellationToken::new()));
        let mut clients = Vec::new();
        let mut held = Vec::new();
        for _ in 0..4 {
            clients.push(TcpStream::connect(address).await.unwrap());
            held.push(listener.accept().await.0);
        }
        let last = TcpStream::connect(address).await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(300), listener.accept());
        assert!(waiting.await.is_err(), "accepted past the bound");
        drop(held.pop());
        let (accepted, _) = tokio::time::timeout(Duration::from_secs(5), listener.accept())
            .await
            .expect("accepted once one closed");
        assert_eq!(
            accepted.tcp().peer_addr().unwrap(),
            last.local_addr().unwrap()
        );
    }
}
