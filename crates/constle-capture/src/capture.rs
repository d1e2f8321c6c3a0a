//! Captured connections: a connection to a placeholder on port 443 becomes
//! a `CONNECT` for its name through the proxy, and then a splice.

use std::sync::Arc;

use constle_manifest::Hostname;
use tokio::io::{AsyncWriteExt as _, copy_bidirectional};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::connect::{read_answer, request};
use crate::context::Context;
use crate::error::CaptureError;
use crate::event::Recorder;

/// Serves one captured connection. Nothing is recorded here: the proxy
/// records the `CONNECT` (allowed or blocked) as for any client. A
/// connection to an address that stands for no name, or that the proxy
/// does not open, is reset at once.
pub(crate) async fn connection<R: Recorder>(
    agent: TcpStream,
    context: Arc<Context<R>>,
) -> Result<(), CaptureError> {
    // The address the agent connected to is the listener's side of it.
    let name = agent
        .local_addr()
        .ok()
        .and_then(|local| context.name_for(local.ip()));
    let tunnel = match name {
        Some(name) => open(&name, &context).await,
        None => None,
    };
    match tunnel {
        Some((upstream, early)) => splice(agent, upstream, &early).await,
        None => reset(agent),
    }
    Ok(())
}

/// A tunnel to `name` through the proxy, with what the proxy sent after
/// its answer head; `None` when there is no proxy or it did not open one.
async fn open<R: Recorder>(name: &Hostname, context: &Context<R>) -> Option<(TcpStream, Vec<u8>)> {
    let proxy = context.proxy().await?;
    let mut upstream = TcpStream::connect(proxy).await.ok()?;
    let _ = upstream.set_nodelay(true);
    upstream.write_all(request(name).as_bytes()).await.ok()?;
    let early = timeout(context.limits.proxy_answer, read_answer(&mut upstream))
        .await
        .ok()?
        .ok()??;
    Some((upstream, early))
}

/// Both ways until both sides are done. What the agent sent before the
/// tunnel opened (its TLS ClientHello) waited in its socket and goes
/// first; `early` is what the proxy sent after its answer head.
async fn splice(mut agent: TcpStream, mut upstream: TcpStream, early: &[u8]) {
    let _ = agent.set_nodelay(true);
    if agent.write_all(early).await.is_ok() {
        // How a tunnel ends is the two ends' business; the proxy logged it.
        let _ = copy_bidirectional(&mut agent, &mut upstream).await;
    }
}

/// Closes with a reset, so the client fails at once rather than after
/// a handshake that cannot succeed.
fn reset(agent: TcpStream) {
    let _ = agent.set_zero_linger();
}
