//! The host side of a sandbox's ways out: its doors (the proxy's, the
//! gates'), served here on listeners its launcher binds inside the
//! sandbox's network namespace, and the channel those listeners (and the
//! name service's sockets) arrive on.
//!
//! A server (the proxy's bridge, a gate) is handed a [`DoorListener`]
//! before the sandbox exists, and starts accepting on it at once: what the
//! agent connects to waits in the kernel's queue until the listener
//! arrives, a moment later. Only a launcher `constle run` started and
//! announced ([`Launches`]) may hand listeners over, once; they are served
//! for as long as the launch's [`Launched`] is held, and closed with it, so
//! a stdio server's sandboxes, one per session, leave nothing behind.

use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use constle_sandbox::{Door, NameService, NameSockets, Network};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::{RunError, io};

/// How many accepted connections wait for their server before the door's
/// acceptors stop taking more (the rest wait in the kernel's queue).
const ACCEPTED_QUEUE: usize = 64;

/// A door being opened: what the sandbox's spec says of it, and where its
/// listener goes once it arrives.
pub(crate) struct OpenDoor {
    door: Door,
    arrivals: Arrivals,
}

/// Where a door's listener from each launch goes, with the token its
/// launch's end cancels.
type Arrivals = mpsc::UnboundedSender<(TcpListener, CancellationToken)>;

/// Opens door `name` at `listen` in the sandbox: what goes into the spec
/// (through a [`Channel`]), and the listener its server accepts on.
pub(crate) fn open(name: String, listen: SocketAddrV4) -> (OpenDoor, DoorListener) {
    let (arrivals, arrived) = mpsc::unbounded_channel();
    let (queue, accepted) = mpsc::channel(ACCEPTED_QUEUE);
    let door = OpenDoor {
        door: Door { name, listen },
        arrivals,
    };
    let listener = DoorListener {
        listen,
        arrived,
        queue,
        accepted,
        acceptors: JoinSet::new(),
    };
    (door, listener)
}

#[cfg(test)]
impl OpenDoor {
    /// Hands the door a listener, as a launch's channel does, served until
    /// `ended` is cancelled.
    pub(crate) fn arrive(&self, listener: TcpListener, ended: CancellationToken) {
        let _ = self.arrivals.send((listener, ended));
    }
}

/// What a door's server accepts on: the connections to the door of every
/// sandbox launched with it (the agent's one; a stdio server's, one per
/// session), as an [`axum::serve::Listener`].
pub(crate) struct DoorListener {
    listen: SocketAddrV4,
    arrived: mpsc::UnboundedReceiver<(TcpListener, CancellationToken)>,
    queue: mpsc::Sender<(TcpStream, SocketAddr)>,
    accepted: mpsc::Receiver<(TcpStream, SocketAddr)>,
    acceptors: JoinSet<()>,
}

impl axum::serve::Listener for DoorListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            tokio::select! {
                Some((listener, ended)) = self.arrived.recv() => {
                    let queue = self.queue.clone();
                    self.acceptors.spawn(accept_into(listener, queue, ended));
                }
                Some(accepted) = self.accepted.recv() => return accepted,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.listen.into())
    }
}

/// Accepts on `listener` (retrying failed accepts, as axum does) into
/// `queue`, until the door's server is gone or its launch `ended`; the
/// listener is closed then.
async fn accept_into(
    mut listener: TcpListener,
    queue: mpsc::Sender<(TcpStream, SocketAddr)>,
    ended: CancellationToken,
) {
    let accepting = async {
        loop {
            let accepted = axum::serve::Listener::accept(&mut listener).await;
            if queue.send(accepted).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = accepting => {}
        () = ended.cancelled() => {}
    }
}

/// The channel a sandbox's launchers send its network namespace's sockets
/// over: each door's listener to its server, the name service's sockets
/// to it.
pub(crate) struct Channel {
    spec: Network,
    launches: Launches,
    /// Why the channel failed, once it has.
    failed: watch::Receiver<Option<String>>,
    task: JoinHandle<()>,
}

/// Where the name service takes each launch's sockets, with the token its
/// launch's end cancels.
pub(crate) type NameSink = mpsc::UnboundedSender<(NameSockets, CancellationToken)>;

/// Tells the channel which launcher it is to take sockets from next.
#[derive(Clone)]
pub(crate) struct Launches(mpsc::UnboundedSender<(u32, CancellationToken)>);

/// A launch's hold on what its sandbox was handed: dropped (when the
/// sandbox is gone), its doors and name service close.
pub(crate) struct Launched {
    _ended: DropGuard,
}

impl Launches {
    /// The sandbox's launcher was started as `pid`: only a launcher so
    /// announced may hand over sockets, once, and they are served while
    /// the returned hold lives.
    pub(crate) fn launched(&self, pid: Option<u32>) -> Launched {
        let ended = CancellationToken::new();
        if let Some(pid) = pid {
            let _ = self.0.send((pid, ended.clone()));
        }
        Launched {
            _ended: ended.drop_guard(),
        }
    }
}

/// What each launch's sockets go to.
struct Routes {
    doors: Vec<Arrivals>,
    names: Option<NameSink>,
}

impl Channel {
    /// Binds the channel under `sockets` (`network.sock`, or
    /// `network-<server>.sock` for a stdio server's sandbox) and takes, in
    /// a task, each announced launcher's sockets: `doors` in this order,
    /// and with `names` the name service's (routed to `names`' ranges).
    pub(crate) fn start(
        sockets: &Path,
        server: Option<&str>,
        doors: Vec<OpenDoor>,
        names: Option<(NameService, NameSink)>,
    ) -> Result<Channel, RunError> {
        let path = match server {
            None => sockets.join("network.sock"),
            Some(id) => sockets.join(format!("network-{id}.sock")),
        };
        let listener =
            UnixListener::bind(&path).map_err(io(format!("cannot bind {}", path.display())))?;
        let (name_service, sink) = names.unzip();
        let (doors, arrivals) = doors.into_iter().map(|d| (d.door, d.arrivals)).unzip();
        let routes = Routes {
            doors: arrivals,
            names: sink,
        };
        let (launches, pids) = mpsc::unbounded_channel();
        let (fail, failed) = watch::channel(None);
        let task = tokio::spawn(async move {
            let why = take_sockets(listener, pids, routes).await;
            let _ = fail.send(Some(why));
        });
        Ok(Channel {
            spec: Network {
                channel: path,
                doors,
                name_service,
            },
            launches: Launches(launches),
            failed,
            task,
        })
    }

    /// What the sandbox's spec asks its launcher to set up.
    pub(crate) fn spec(&self) -> Network {
        self.spec.clone()
    }

    /// Where to announce each launcher.
    pub(crate) fn launches(&self) -> Launches {
        self.launches.clone()
    }

    /// Resolves when the channel fails, with why: a launcher's sockets
    /// that could not be received (their doors would never open).
    pub(crate) fn failure(&self) -> impl Future<Output = String> + Send + use<> {
        failure(&self.failed)
    }
}

/// Resolves with why once `failed` holds it; never, if it never will.
pub(crate) fn failure(
    failed: &watch::Receiver<Option<String>>,
) -> impl Future<Output = String> + Send + use<> {
    let mut failed = failed.clone();
    async move {
        // The guard is not held across an await: the future stays Send.
        let why = failed
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|why| why.clone());
        match why {
            Some(why) => why,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Takes each announced launcher's sockets (a connection from anyone else
/// is dropped) and routes them, until that fails: why.
async fn take_sockets(
    listener: UnixListener,
    mut pids: mpsc::UnboundedReceiver<(u32, CancellationToken)>,
    routes: Routes,
) -> String {
    let mut expected = HashMap::new();
    loop {
        tokio::select! {
            Some((pid, ended)) = pids.recv() => {
                expected.insert(pid, ended);
            }
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => return format!("the sandbox's network channel failed: {e}"),
                };
                let peer = stream.peer_cred().ok().and_then(|cred| cred.pid());
                let Some(pid) = peer.and_then(|pid| u32::try_from(pid).ok()) else { continue };
                let Some(ended) = announced(pid, &mut expected, &mut pids).await else {
                    continue;
                };
                if let Err(why) = route(stream, &routes, &ended).await {
                    return why;
                }
            }
        }
    }
}

/// How long a connection waits for its launcher to be announced: the pid
/// is sent the moment the spawn returns, long before the launcher connects.
const ANNOUNCE_WAIT: Duration = Duration::from_secs(1);

/// The end of `pid`'s launch, if it was announced (it is no longer
/// expected then), waiting a little for an announcement still on its way.
async fn announced(
    pid: u32,
    expected: &mut HashMap<u32, CancellationToken>,
    pids: &mut mpsc::UnboundedReceiver<(u32, CancellationToken)>,
) -> Option<CancellationToken> {
    let wait = async {
        while !expected.contains_key(&pid) {
            match pids.recv().await {
                Some((announced, ended)) => expected.insert(announced, ended),
                None => return,
            };
        }
    };
    let _ = tokio::time::timeout(ANNOUNCE_WAIT, wait).await;
    expected.remove(&pid)
}

/// Receives one launcher's sockets from `stream` and hands each on, to be
/// served until `ended`.
async fn route(
    stream: UnixStream,
    routes: &Routes,
    ended: &CancellationToken,
) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("cannot receive the sandbox's sockets: {e}");
    let stream = stream
        .into_std()
        .and_then(|s| s.set_nonblocking(false).map(|()| s))
        .map_err(failed)?;
    let (doors, names) = (routes.doors.len(), routes.names.is_some());
    let sockets = tokio::task::spawn_blocking(move || {
        constle_sandbox::receive_sockets(&stream, doors, names)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(failed)?;
    for (listener, door) in sockets.doors.into_iter().zip(&routes.doors) {
        listener.set_nonblocking(true).map_err(failed)?;
        let listener = TcpListener::from_std(listener).map_err(failed)?;
        let _ = door.send((listener, ended.clone()));
    }
    if let (Some(sockets), Some(sink)) = (sockets.names, &routes.names) {
        let _ = sink.send((sockets, ended.clone()));
    }
    Ok(())
}
