//! The proxy's door: every connection the agent makes to it is forwarded
//! to Squid on host loopback.
//!
//! Bytes are spliced, not copied (see [`splice_bidirectional`]). Handing the
//! sandbox a TCP socket already connected to Squid (`SCM_RIGHTS`) would save
//! this hop but is not done: a socket of the host's network namespace can be
//! dissolved with `connect(AF_UNSPEC)` and connected anywhere the host can
//! reach.

use std::net::SocketAddr;

use axum::serve::Listener as _;
use constle_sandbox::splice_bidirectional;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::doors::{DoorListener, DoorStream};

/// Forwards each connection to the door to the address `target` comes to
/// hold, until the returned task is aborted. A connection that arrives
/// before there is an address waits for it (the sandbox starts while the
/// proxy does); one that arrives when `target` can no longer get one (the
/// proxy did not start) is closed.
pub fn forward(
    mut listener: DoorListener,
    target: watch::Receiver<Option<SocketAddr>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await;
            tokio::spawn(splice(client, target.clone()));
        }
    })
}

async fn splice(client: DoorStream, mut target: watch::Receiver<Option<SocketAddr>>) {
    let Ok(Some(target)) = target.wait_for(Option::is_some).await.map(|t| *t) else {
        return;
    };
    // A refused or broken connection is the proxy's answer to give; the
    // agent sees its connection close, and Squid logs what it decided.
    if let Ok(upstream) = TcpStream::connect(target).await {
        let _ = upstream.set_nodelay(true);
        let _ = client.tcp().set_nodelay(true);
        let _ = splice_bidirectional(client.tcp(), &upstream).await;
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;

    /// A door whose listener is on host loopback (the sandbox's
    /// namespace in production), and a client connected to it.
    async fn door() -> (crate::doors::OpenDoor, DoorListener, TcpStream) {
        let (door, listener) =
            crate::doors::open("proxy".into(), "127.0.0.1:3128".parse().unwrap());
        let bound = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(bound.local_addr().unwrap())
            .await
            .unwrap();
        let _ = door
            .arrivals
            .send((bound, tokio_util::sync::CancellationToken::new()));
        (door, listener, client)
    }

    /// A connection made before the proxy listens waits for it, and one
    /// made after the proxy failed to start is closed.
    #[tokio::test]
    async fn an_early_connection_waits_for_the_target() {
        let (target, address) = watch::channel(None);
        let (_door, listener, mut early) = door().await;
        let bridge = forward(listener, address);
        early.write_all(b"ping").await.unwrap();
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        target.send(Some(upstream.local_addr().unwrap())).unwrap();
        let (mut accepted, _) = upstream.accept().await.unwrap();
        let mut got = [0; 4];
        accepted.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        bridge.abort();

        let (target, address) = watch::channel(None);
        let (_door, listener, mut late) = door().await;
        let _bridge = forward(listener, address);
        drop(target);
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            late.read_to_end(&mut rest),
        );
        assert_eq!(read.await.unwrap().unwrap(), 0, "closed, nothing said");
    }
}
