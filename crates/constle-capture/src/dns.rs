//! The sandbox's resolver on its sockets: UDP, a datagram per query, and
//! TCP, length-prefixed queries (RFC 1035 §4.2.2), several per connection.

use std::io;
use std::sync::Arc;

use constle_dns::Transport;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::timeout;

use crate::context::Context;
use crate::error::CaptureError;
use crate::event::Recorder;

/// The largest UDP payload: a datagram is read whole, never cut.
const MAX_DATAGRAM: usize = 65_535;

/// Answers each datagram on `socket` to its sender, one at a time, each
/// after its event is recorded.
pub(crate) async fn udp<R: Recorder>(
    socket: UdpSocket,
    context: Arc<Context<R>>,
) -> Result<(), CaptureError> {
    let mut buffer = vec![0; MAX_DATAGRAM];
    loop {
        let (length, peer) = match socket.recv_from(&mut buffer).await {
            Ok(received) => received,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(CaptureError::socket("DNS over UDP")(error)),
        };
        let query = buffer.get(..length).unwrap_or_default();
        if let Some(reply) = context.resolve(query, Transport::Udp).await? {
            // A reply that cannot be sent is lost as a datagram may be;
            // the client asks again.
            let _ = socket.send_to(&reply, peer).await;
        }
    }
}

/// Answers the queries of one TCP connection in turn, until the client
/// closes it, breaks the framing, or stays idle (or does not take its
/// replies) for `limits.dns_idle`.
pub(crate) async fn tcp<R: Recorder>(
    mut stream: TcpStream,
    context: Arc<Context<R>>,
) -> Result<(), CaptureError> {
    let idle = context.limits.dns_idle;
    while let Ok(Ok(Some(query))) = timeout(idle, read_frame(&mut stream)).await {
        let Some(reply) = context.resolve(&query, Transport::Tcp).await? else {
            continue;
        };
        if !matches!(timeout(idle, stream.write_all(&reply)).await, Ok(Ok(()))) {
            break;
        }
    }
    Ok(())
}

/// One message with its two-byte length in front, as the resolver takes
/// it; `None` when the client closed the connection between messages.
async fn read_frame(stream: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut length = [0; 2];
    match stream.read_exact(&mut length).await {
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let mut frame = vec![0; 2 + usize::from(u16::from_be_bytes(length))];
    frame[..2].copy_from_slice(&length);
    stream.read_exact(&mut frame[2..]).await?;
    Ok(Some(frame))
}
