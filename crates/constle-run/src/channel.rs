//! The channel a sandbox's launchers hand its network namespace's sockets
//! over: each door's listener to its server ([`crate::doors`]), the name
//! service's sockets to it ([`crate::names`]).
//!
//! Only a launcher `constle run` started and announced ([`Launches`]) may
//! hand sockets over, once; they are served for as long as the launch's
//! [`Launched`] is held, and closed with it, so a stdio server's sandboxes,
//! one per session, leave nothing behind. A launch whose sockets cannot
//! be taken fails alone ([`Launched::failure`]): its sandbox has no way
//! out, and the channel goes on taking other launches'.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use constle_sandbox::{Door, NameService, NameSockets, Network};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::doors::{Arrivals, OpenDoor};
use crate::error::{RunError, io};

/// Where the name service takes each launch's sockets, with the token its
/// launch's end cancels.
pub(crate) type NameSink = mpsc::UnboundedSender<(NameSockets, CancellationToken)>;

/// The channel of a sandbox's launches (one for the agent, one per
/// session for a stdio server).
pub(crate) struct Channel {
    spec: Network,
    launches: Launches,
    task: JoinHandle<()>,
}

/// Tells the channel which launcher it is to take sockets from next.
#[derive(Clone)]
pub(crate) struct Launches(mpsc::UnboundedSender<(u32, Launch)>);

/// What the channel keeps of an announced launch.
struct Launch {
    ended: CancellationToken,
    failed: watch::Sender<Option<String>>,
}

/// A launch's hold on what its sandbox was handed: dropped (when the
/// sandbox is gone), its doors and name service close.
pub(crate) struct Launched {
    _ended: DropGuard,
    failed: watch::Receiver<Option<String>>,
}

impl Launches {
    /// The sandbox's launcher was started as `pid`: only a launcher so
    /// announced may hand over sockets, once, and they are served while
    /// the returned hold lives.
    pub(crate) fn launched(&self, pid: Option<u32>) -> Launched {
        let ended = CancellationToken::new();
        let (fail, failed) = watch::channel(None);
        if let Some(pid) = pid {
            let launch = Launch {
                ended: ended.clone(),
                failed: fail,
            };
            let _ = self.0.send((pid, launch));
        }
        Launched {
            _ended: ended.drop_guard(),
            failed,
        }
    }
}

/// Resolves when `launched`'s sockets could not be taken, with why (its
/// sandbox then has no way out); never otherwise, nor without a launch.
pub(crate) async fn failure_of(launched: Option<&Launched>) -> String {
    match launched {
        Some(launched) => failure(&launched.failed).await,
        None => std::future::pending().await,
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

/// What each launch's sockets go to.
struct Routes {
    doors: Vec<Door>,
    arrivals: Vec<Arrivals>,
    names: Option<NameSink>,
}

impl Channel {
    /// Binds the channel under `sockets` (`network.sock`, or
    /// `network-<server>.sock` for a stdio server's sandbox) and takes, in
    /// a task, each announced launcher's sockets: `doors` in this order,
    /// and with `names` the name service's.
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
        let (doors, arrivals): (Vec<_>, _) =
            doors.into_iter().map(|d| (d.door, d.arrivals)).unzip();
        let routes = Routes {
            doors: doors.clone(),
            arrivals,
            names: sink,
        };
        let (launches, pids) = mpsc::unbounded_channel();
        let task = tokio::spawn(take_sockets(listener, pids, routes));
        Ok(Channel {
            spec: Network {
                channel: path,
                doors,
                name_service,
            },
            launches: Launches(launches),
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
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long the channel waits before accepting again after it failed to
/// (out of descriptors, say).
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Takes each announced launcher's sockets (a connection from anyone else
/// is dropped) and routes them; a launch whose sockets cannot be taken is
/// told so, and ended.
async fn take_sockets(
    listener: UnixListener,
    mut pids: mpsc::UnboundedReceiver<(u32, Launch)>,
    routes: Routes,
) {
    let mut expected = HashMap::new();
    loop {
        tokio::select! {
            Some((pid, launch)) = pids.recv() => {
                // Launches that ended before they connected, let go of.
                expected.retain(|_, launch: &mut Launch| !launch.ended.is_cancelled());
                expected.insert(pid, launch);
            }
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                };
                let peer = stream.peer_cred().ok().and_then(|cred| cred.pid());
                let Some(pid) = peer.and_then(|pid| u32::try_from(pid).ok()) else { continue };
                let Some(launch) = announced(pid, &mut expected, &mut pids).await else {
                    continue;
                };
                if let Err(why) = route(stream, &routes, &launch.ended).await {
                    launch.ended.cancel();
                    let _ = launch.failed.send(Some(why));
                }
            }
        }
    }
}

/// How long a connection waits for its launcher to be announced: the pid
/// is sent the moment the spawn returns, long before the launcher connects.
const ANNOUNCE_WAIT: Duration = Duration::from_secs(1);

/// `pid`'s launch, if it was announced and has not ended (it is no longer
/// expected then), waiting a little for an announcement still on its way.
async fn announced(
    pid: u32,
    expected: &mut HashMap<u32, Launch>,
    pids: &mut mpsc::UnboundedReceiver<(u32, Launch)>,
) -> Option<Launch> {
    let wait = async {
        while !expected.contains_key(&pid) {
            match pids.recv().await {
                Some((announced, launch)) => expected.insert(announced, launch),
                None => return,
            };
        }
    };
    let _ = tokio::time::timeout(ANNOUNCE_WAIT, wait).await;
    expected
        .remove(&pid)
        .filter(|launch| !launch.ended.is_cancelled())
}

/// How long a launcher may take to send its sockets once connected.
const RECEIVE_WAIT: Duration = Duration::from_secs(5);

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
        .and_then(|s| s.set_read_timeout(Some(RECEIVE_WAIT)).map(|()| s))
        .map_err(failed)?;
    let (doors, names) = (routes.doors.clone(), routes.names.is_some());
    let sockets = tokio::task::spawn_blocking(move || {
        constle_sandbox::receive_sockets(&stream, &doors, names)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(failed)?;
    for (listener, door) in sockets.doors.into_iter().zip(&routes.arrivals) {
        listener.set_nonblocking(true).map_err(failed)?;
        let listener = TcpListener::from_std(listener).map_err(failed)?;
        let _ = door.send((listener, ended.clone()));
    }
    if let (Some(sockets), Some(sink)) = (sockets.names, &routes.names) {
        let _ = sink.send((sockets, ended.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::IoSlice;
    use std::net::SocketAddr;
    use std::os::fd::AsRawFd as _;

    use axum::serve::Listener as _;
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};

    use super::*;
    use crate::doors::{self, DoorListener};

    /// Connects to `channel` as a launcher would, sending `listener` (or
    /// nothing); the channel may have hung up already.
    async fn hand_over(channel: &Path, listener: Option<std::net::TcpListener>) {
        let channel = channel.to_path_buf();
        let send = move || {
            let stream = std::os::unix::net::UnixStream::connect(channel)?;
            let fds: Vec<_> = listener.iter().map(|l| l.as_raw_fd()).collect();
            let rights = [ControlMessage::ScmRights(&fds)];
            let control = if fds.is_empty() { &[][..] } else { &rights[..] };
            let bytes = [IoSlice::new(b"n")];
            sendmsg::<()>(stream.as_raw_fd(), &bytes, control, MsgFlags::empty(), None)?;
            Ok::<_, std::io::Error>(())
        };
        let _ = tokio::task::spawn_blocking(send).await.unwrap();
    }

    /// A channel whose one door is where a listener of this test's is (on
    /// host loopback), that listener, and the door's server side.
    fn proxy_channel(dir: &Path) -> (Channel, std::net::TcpListener, DoorListener) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(at) = listener.local_addr().unwrap() else {
            unreachable!("bound on IPv4")
        };
        let (door, served) = doors::open("proxy".into(), at);
        let channel = Channel::start(dir, None, vec![door], None).unwrap();
        (channel, listener, served)
    }

    /// A launch whose launcher sends nothing fails, alone: the next
    /// launch's door is served.
    #[tokio::test]
    async fn a_launch_that_sends_nothing_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (channel, listener, mut door) = proxy_channel(dir.path());
        let path = channel.spec().channel;
        let first = channel.launches().launched(Some(std::process::id()));
        hand_over(&path, None).await;
        let why = tokio::time::timeout(Duration::from_secs(5), failure_of(Some(&first))).await;
        assert!(why.unwrap().contains("expected 1 sockets, got 0"));

        let address = listener.local_addr().unwrap();
        let _second = channel.launches().launched(Some(std::process::id()));
        hand_over(&path, Some(listener)).await;
        let client = tokio::net::TcpStream::connect(address).await.unwrap();
        let accepted = tokio::time::timeout(Duration::from_secs(5), door.accept()).await;
        let (accepted, _) = accepted.expect("the second launch's door is served");
        assert_eq!(
            accepted.tcp().peer_addr().unwrap(),
            client.local_addr().unwrap()
        );
    }

    /// A launch that ended before its launcher connected is not served:
    /// its listener is dropped, and nothing is accepted.
    #[tokio::test]
    async fn an_ended_launch_is_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let (channel, listener, mut door) = proxy_channel(dir.path());
        let address = listener.local_addr().unwrap();
        let path = channel.spec().channel;
        drop(channel.launches().launched(Some(std::process::id())));
        hand_over(&path, Some(listener)).await;
        let refused = tokio::time::timeout(Duration::from_secs(2), async {
            tokio::net::TcpStream::connect(address).await.is_err()
        });
        assert!(
            refused.await.unwrap(),
            "the ended launch's door still listens"
        );
        let waiting = tokio::time::timeout(Duration::from_millis(300), door.accept());
        assert!(waiting.await.is_err());
    }
}
