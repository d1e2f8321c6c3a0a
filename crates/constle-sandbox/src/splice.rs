//! Relaying between two stream sockets with `splice(2)`: each direction moves
//! bytes from one socket into a pipe and from the pipe into the other socket,
//! so the payload never enters user space. Page references move instead of
//! bytes being copied twice per hop, which is what a bulk transfer through
//! the relay and the host bridge spent most of its CPU on.
//!
//! The sockets stay non-blocking and tokio's reactor tells when they are
//! ready; the pipes are non-blocking too, so a call never waits.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use nix::sys::socket::{Shutdown, shutdown};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// Bytes the pipe of each direction holds, asked for with `F_SETPIPE_SZ`.
/// The 64 KiB default holds only 16 socket buffer fragments, often less than
/// one TCP window; the limit for unprivileged processes is 1 MiB
/// (`/proc/sys/fs/pipe-max-size`), and a user over the soft limit of pipe
/// pages keeps the default (the call is best effort).
const PIPE_SIZE: i32 = 1024 * 1024;

/// Bytes asked for per call: as much as the pipe can take.
const CHUNK: usize = PIPE_SIZE as usize;

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
    let _ = fcntl(&pipe_in, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE));
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
