//! Relaying between two stream sockets with `splice(2)`: each direction moves
//! bytes from one socket into a pipe and from the pipe into the other socket,
//! so the payload never enters user space. Page references move instead of
//! bytes being copied into and out of the process at each hop: on a bulk
//! transfer that was about 40 % of the relay's and the bridge's CPU time.
//!
//! The sockets stay non-blocking and tokio's reactor tells when they are
//! ready; the pipes are non-blocking too, so a call never waits.
//!
//! A direction's pipe is kept for a later connection once its input has
//! ended with nothing left in the pipe, up to [`IDLE_PIPES`] pipes: for a
//! connection that carries one request and its answer (a client that
//! connects for each request), making and closing its two pipes was about
//! 15 % of the relay's CPU time (measured: 70 µs per connection with new
//! pipes, 60 µs with kept ones, four clients at a time). A pipe that may
//! still hold bytes (an error, a relay dropped mid-way) is closed, never
//! kept, so no connection ever sees another's bytes.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard, PoisonError};

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

/// Empty pipes kept for the next connections: two per connection, so
/// enough for 16 connections ending at once. Each keeps its 16 pages
/// charged to the user's pipe quota while it waits (512 pages in all, of a
/// soft limit of 16384 by default), so the pool stays small.
const IDLE_PIPES: usize = 32;

/// The empty pipes of this process, for any relay in it.
static IDLE: Pool = Pool::new(IDLE_PIPES);

/// One direction's pipe: bytes go in at `input` and out at `output`.
struct Pipe {
    output: OwnedFd,
    input: OwnedFd,
}

/// Empty pipes, at most `bound` of them.
struct Pool {
    idle: Mutex<Vec<Pipe>>,
    bound: usize,
}

impl Pool {
    const fn new(bound: usize) -> Pool {
        Pool {
            idle: Mutex::new(Vec::new()),
            bound,
        }
    }

    /// An empty pipe: a kept one, else a new one.
    fn take(&self) -> io::Result<Pipe> {
        if let Some(pipe) = self.idle().pop() {
            return Ok(pipe);
        }
        let (output, input) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        Ok(Pipe { output, input })
    }

    /// Keeps `pipe` for another connection, or closes it past the bound.
    /// Only for a pipe known to be empty: one that may hold bytes is
    /// dropped (closed) instead.
    fn keep(&self, pipe: Pipe) {
        let mut idle = self.idle();
        if idle.len() < self.bound {
            idle.push(pipe);
        }
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Pipe>> {
        // A holder that panicked left a list of empty pipes, still usable.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

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
    let pipe = IDLE.take()?;
    loop {
        let mut held = fill(from, &pipe.input).await?;
        if held == 0 {
            // Every fill starts on an empty pipe, and this one put nothing in.
            IDLE.keep(pipe);
            shutdown(to.as_fd().as_raw_fd(), Shutdown::Write)?;
            return Ok(());
        }
        while held > 0 {
            held -= drain(&pipe.output, to, held).await?;
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Whether every kept pipe is empty.
    fn kept_pipes_are_empty() -> bool {
        let mut buf = [0u8; 1];
        IDLE.idle().iter().all(|pipe| {
            matches!(
                nix::unistd::read(&pipe.output, &mut buf),
                Err(nix::errno::Errno::EAGAIN)
            )
        })
    }

    /// Relays one exchange: `ask` from the client end, `answer` back.
    async fn exchange(ask: &[u8], answer: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let (a, mut client) = UnixStream::pair().unwrap();
        let (b, mut server) = UnixStream::pair().unwrap();
        let relay = tokio::spawn(async move { splice_bidirectional(&a, &b).await });
        client.write_all(ask).await.unwrap();
        client.shutdown().await.unwrap();
        let mut asked = Vec::new();
        server.read_to_end(&mut asked).await.unwrap();
        server.write_all(answer).await.unwrap();
        server.shutdown().await.unwrap();
        let mut answered = Vec::new();
        client.read_to_end(&mut answered).await.unwrap();
        relay.await.unwrap().unwrap();
        (asked, answered)
    }

    #[tokio::test]
    async fn kept_pipes_carry_nothing_from_one_connection_to_the_next() {
        for n in 0..3 {
            let (ask, answer) = (format!("ask {n}"), format!("answer {n}"));
            let (asked, answered) = exchange(ask.as_bytes(), answer.as_bytes()).await;
            assert_eq!((asked, answered), (ask.into_bytes(), answer.into_bytes()));
        }
        assert!(
            !IDLE.idle().is_empty(),
            "the pipes of an ended connection are kept"
        );

        // Bytes in a pipe when its connection breaks: the pipe is closed.
        let (a, mut client) = UnixStream::pair().unwrap();
        let (b, server) = UnixStream::pair().unwrap();
        drop(server);
        client.write_all(b"never delivered").await.unwrap();
        assert!(splice_bidirectional(&a, &b).await.is_err());
        assert!(kept_pipes_are_empty());
    }

    #[test]
    fn the_pool_keeps_at_most_its_bound() {
        let pool = Pool::new(2);
        let pipes: Vec<Pipe> = (0..3).map(|_| pool.take().unwrap()).collect();
        for pipe in pipes {
            pool.keep(pipe);
        }
        assert_eq!(pool.idle().len(), 2);
    }
}
