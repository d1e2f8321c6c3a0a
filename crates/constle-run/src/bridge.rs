//! The host end of a sandbox exit: a Unix socket, mounted into the sandbox,
//! whose every connection is forwarded to a TCP service on host loopback
//! (Squid, later the MCP gate).
//!
//! The sandbox has no network, so a Unix socket is the only thing both sides
//! can reach; the in-sandbox relay carries the agent's TCP connections to it.
//!
//! Bytes are spliced, not copied (see [`splice_bidirectional`]). Handing the
//! sandbox a TCP socket already connected to Squid (`SCM_RIGHTS`) would save
//! this hop but is not done: a socket of the host's network namespace can be
//! dissolved with `connect(AF_UNSPEC)` and connected anywhere the host can
//! reach, and whatever can connect to this Unix socket, the agent included,
//! would receive one.

use std::io;
use std::net::SocketAddr;
use std::path::Path;

use constle_sandbox::splice_bidirectional;
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Binds `socket` and forwards each connection to the address `target`
/// comes to hold, until the returned task is aborted. A connection that
/// arrives before there is an address waits for it (the sandbox starts
/// while the proxy does); one that arrives when `target` can no longer
/// get one (the proxy did not start) is closed.
pub fn forward(
    socket: &Path,
    target: watch::Receiver<Option<SocketAddr>>,
) -> io::Result<JoinHandle<()>> {
    let listener = UnixListener::bind(socket)?;
    Ok(tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(splice(client, target.clone()));
        }
    }))
}

async fn splice(client: UnixStream, mut target: watch::Receiver<Option<SocketAddr>>) {
    let Ok(Some(target)) = target.wait_for(Option::is_some).await.map(|t| *t) else {
        return;
    };
    // A refused or broken connection is the proxy's answer to give; the
    // agent sees its connection close, and Squid logs what it decided.
    if let Ok(upstream) = TcpStream::connect(target).await {
        let _ = upstream.set_nodelay(true);
        let _ = splice_bidirectional(&client, &upstream).await;
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;

    /// A connection made before the proxy listens waits for it, and one
    /// made after the proxy failed to start is closed.
    #[tokio::test]
    async fn an_early_connection_waits_for_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let (target, address) = watch::channel(None);
        let bridge = forward(&socket, address).unwrap();
        let mut early = UnixStream::connect(&socket).await.unwrap();
        early.write_all(b"ping").await.unwrap();
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        target.send(Some(upstream.local_addr().unwrap())).unwrap();
        let (mut accepted, _) = upstream.accept().await.unwrap();
        let mut got = [0; 4];
        accepted.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        bridge.abort();

        let socket = dir.path().join("failed.sock");
        let (target, address) = watch::channel(None);
        let _bridge = forward(&socket, address).unwrap();
        let mut late = UnixStream::connect(&socket).await.unwrap();
        drop(target);
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            late.read_to_end(&mut rest),
        );
        assert_eq!(read.await.unwrap().unwrap(), 0, "closed, nothing said");
    }
}
