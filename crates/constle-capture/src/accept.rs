//! Serving one listener: each connection in a task of its own, at most so
//! many at once, and the first failure of one stopping them all.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::error::CaptureError;
use crate::tasks::Tasks;

/// How long to wait after an accept error that is not the connection's
/// own (out of descriptors, say) before accepting again.
const PAUSE_AFTER_ERROR: Duration = Duration::from_millis(50);

/// Accepts on `listener` for ever, handing each connection to `handle` in
/// a task of its own while `slots` has a permit for it; returns the first
/// error a handler returns.
pub(crate) async fn serve<F, Fut>(
    listener: TcpListener,
    slots: Arc<Semaphore>,
    handle: F,
) -> Result<(), CaptureError>
where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = Result<(), CaptureError>> + Send + 'static,
{
    let mut connections = Tasks::default();
    loop {
        // The permit comes before the accept: past the cap, connections
        // wait in the kernel's backlog instead of holding descriptors here.
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => permit,
            error = connections.failed() => return Err(error),
        };
        let Ok(permit) = permit else {
            // The semaphore is never closed; if it were, nothing could be
            // served any more.
            return Ok(());
        };
        let stream = tokio::select! {
            stream = accept(&listener) => stream,
            error = connections.failed() => return Err(error),
        };
        let connection = handle(stream);
        connections.spawn(async move {
            let _permit = permit;
            connection.await
        });
    }
}

/// The next connection. Errors never end the loop: they are the
/// connection's (it went away) or the system's (out of descriptors),
/// which passes.
async fn accept(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => return stream,
            Err(error) if is_the_connections(&error) => {}
            Err(_) => tokio::time::sleep(PAUSE_AFTER_ERROR).await,
        }
    }
}

fn is_the_connections(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}
