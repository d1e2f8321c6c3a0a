//! Relaying between two stream sockets with `splice(2)`: each direction moves
//! bytes from one socket into a pipe and from the pipe into the other socket,
//! so the payload never enters user space. Page references move instead of
//! bytes being copied into and out of the process at each hop: on a bulk
//! transfer that was about 40 % of the relay's and the bridge's CPU time.
//!
//! The sockets stay non-blocking and tokio's reactor tells when they are
//! ready; the pipes are non-blocking too, so a call never waits.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{OFlag, SpliceFFlags, splice};
use nix::sys::socket::{Shutdown, shutdown};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// Bytes asked for per call; a call moves at most what the pipe holds. The
/// pipe keeps its default size (16 buffers, each a page or a fragment of a
/// socket buffer): measured, a 1 MiB pipe (`F_SETPIPE_SZ`) saved no CPU, and
/// it would charge 256 pages per pipe to the user's soft limit of pipe pages
/// (`/proc/sys/fs/pipe-user-pages-soft`), which an agent holding a few dozen
/// connections open would exhaust, shrinking every new pipe of that user.
const CHUNK: usize = 1024 * 1024;

/// A connected tokio stream socket: its readiness drives the splices.
pub trait SpliceSocket: AsFd + Sync {
    /// Waits until the socket may be ready for `interest`.
    fn ready_for(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    /// Runs `f`; a `WouldBlock` from it clears the readiness it consumed.
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

macro_rules! stream {
    ($type:ty) => {
        impl SpliceSocket for $type {
            async fn ready_for(&self, interest: Interest) -> io::Result<()> {
                self.ready(interest).await.map(drop)
            }
            fn try_io<R>(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                <$type>::try_io(self, interest, f)
            }
        }
    };
}
stream!(TcpStream);
stream!(UnixStream);

/// Relays between `a` and `b` both ways until both directions have ended,
/// like [`tokio::io::copy_bidirectional`]: the end of one direction's input
/// shuts down the writing side of its output (the half-close goes on) and
/// the other direction carries on. An error in either direction ends both;
/// the sockets are closed when the caller drops them.
pub async fn splice_bidirectional(a: &impl SpliceSocket, b: &impl SpliceSocket) -> io::Result<()> {
    tokio::try_join!(one_way(a, b), one_way(b, a))?;
    Ok(())
}

/// Moves what `from` reads into `to` until `from` ends, then shuts down
/// `to`'s writing side.
async fn one_way(from: &impl SpliceSocket, to: &impl SpliceSocket) -> io::Result<()> {
    let (pipe_out, pipe_in) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
    loop {
        let mut held = fill(from, &pipe_in).await?;
        if held == 0 {
            shutdown(to.as_fd().as_raw_fd(), Shutdown::Write)?;
            return Ok(());
        }
        while held > 0 {
            held -= drain(&pipe_out, to, held).await?;
        }
    }
}

/// Splices what `from` has into the (empty) pipe; `Ok(0)` at end of stream.
/// The pipe is empty, so `EAGAIN` can only mean `from` has nothing yet.
async fn fill(from: &impl SpliceSocket, pipe_in: &OwnedFd) -> io::Result<usize> {
    retry(from, Interest::READABLE, || {
        Ok(splice(from, None, pipe_in, None, CHUNK, flags())?)
    })
    .await
}

/// Splices up to `held` bytes from the pipe into `to`. The pipe holds them,
/// so `EAGAIN` can only mean `to`'s send buffer is full.
async fn drain(pipe_out: &OwnedFd, to: &impl SpliceSocket, held: usize) -> io::Result<usize> {
    match retry(to, Interest::WRITABLE, || {
        Ok(splice(pipe_out, None, to, None, held, flags())?)
    })
    .await?
    {
        // Cannot happen with bytes in the pipe; never spin on it.
        0 => Err(io::ErrorKind::WriteZero.into()),
        n => Ok(n),
    }
}

/// Runs `f` whenever `stream` is ready for `interest`, until it does not
/// return `WouldBlock`.
async fn retry(
    stream: &impl SpliceSocket,
    interest: Interest,
    mut f: impl FnMut() -> io::Result<usize>,
) -> io::Result<usize> {
    loop {
        stream.ready_for(interest).await?;
        match stream.try_io(interest, &mut f) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            result => return result,
        }
    }
}

fn flags() -> SpliceFFlags {
    SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK
}
