//! The agent's standard output and error: pipes that constle reads and
//! prints escaped (`constle_escape`), never the operator's terminal itself.
//!
//! Given the terminal, an agent could read the operator's keystrokes, turn
//! off `ISIG` so that Ctrl-C no longer stops it, and draw anything it liked,
//! a fake approval prompt included. Through a pipe it can do none of that:
//! it has no descriptor of the terminal, and every byte it writes that could
//! act on a terminal is shown as an escape instead.
//!
//! Each stream is copied by a thread of its own, a read at a time, so
//! output appears as the agent writes it, a slow reader of constle's output
//! slows the agent down (through the full pipe) rather than piling up
//! memory, and a reader that went away (`constle run … | head`) costs the
//! agent nothing: the rest is read and dropped.
//!
//! While a person is being asked at the terminal ([`OutputHold`]), nothing
//! of the agent's is printed: the agent cannot put lines that look like
//! the question, or another one, beside it.

use std::io::{self, PipeReader, Write};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use constle_escape::{ForwardReport, forward};

/// Held while the terminal is asking a person; the agent's output waits.
#[derive(Clone, Debug, Default)]
pub(crate) struct OutputHold(Arc<tokio::sync::Mutex<()>>);

impl OutputHold {
    /// Holds the agent's output back until the guard is dropped.
    pub(crate) async fn hold(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.0.lock().await
    }
}

/// How much of the start of stderr is kept, escaped ([`AgentOutput::stderr_head`]).
const HEAD_BYTES: usize = 4096;

/// The two copying threads of one run, each reporting when its pipe ended.
pub(crate) struct AgentOutput {
    stdout: Option<oneshot::Receiver<ForwardReport>>,
    stderr: Option<oneshot::Receiver<ForwardReport>>,
    /// The start of stderr, escaped as printed.
    head: Arc<Mutex<Vec<u8>>>,
}

impl AgentOutput {
    /// Pipes for the agent's stdout and stderr, and the threads that print
    /// what comes through them on constle's own.
    pub(crate) fn start(hold: &OutputHold) -> io::Result<(AgentOutput, Stdio, Stdio)> {
        let (out, out_end) = io::pipe()?;
        let (err, err_end) = io::pipe()?;
        let head = Arc::default();
        let output = AgentOutput {
            stdout: Some(copy("stdout", out, Held::new(hold, io::stdout()))?),
            stderr: Some(copy(
                "stderr",
                err,
                Kept::new(Arc::clone(&head), Held::new(hold, io::stderr())),
            )?),
            head,
        };
        Ok((output, out_end.into(), err_end.into()))
    }

    /// The first [`HEAD_BYTES`] of stderr as printed (escaped), once the
    /// pipe has closed, or `grace` has passed. For a sandbox that was never
    /// set up, this is what its launcher and bwrap said: no agent ran.
    pub(crate) async fn stderr_head(&mut self, grace: Duration) -> String {
        if let Some(done) = self.stderr.take() {
            let _ = tokio::time::timeout(grace, done).await;
        }
        let head = self.head.lock().map(|h| h.clone()).unwrap_or_default();
        String::from_utf8_lossy(&head).into_owned()
    }

    /// Waits until everything the agent wrote is printed: both pipes closed
    /// by every process that held them. The sandbox is gone by then, so
    /// this is quick; `grace` bounds it should something still hold a pipe
    /// (the threads are then left to the end of the process).
    pub(crate) async fn finish(self, grace: Duration) {
        let all = async {
            for done in [self.stdout, self.stderr].into_iter().flatten() {
                let _ = done.await;
            }
        };
        let _ = tokio::time::timeout(grace, all).await;
    }
}

/// A writer that keeps the first [`HEAD_BYTES`] written through it.
struct Kept<W> {
    head: Arc<Mutex<Vec<u8>>>,
    inner: W,
}

impl<W> Kept<W> {
    fn new(head: Arc<Mutex<Vec<u8>>>, inner: W) -> Kept<W> {
        Kept { head, inner }
    }
}

impl<W: Write> Write for Kept<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(bytes)?;
        if let Ok(mut head) = self.head.lock() {
            let room = HEAD_BYTES.saturating_sub(head.len());
            head.extend_from_slice(&bytes[..written.min(room)]);
        }
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn copy(
    name: &str,
    from: PipeReader,
    to: impl Write + Send + 'static,
) -> io::Result<oneshot::Receiver<ForwardReport>> {
    let (report, done) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("agent-{name}"))
        .spawn(move || {
            let _ = report.send(forward(from, to));
        })?;
    Ok(done)
}

/// A writer that waits out an [`OutputHold`] before each write.
struct Held<W> {
    hold: OutputHold,
    inner: W,
}

impl<W> Held<W> {
    fn new(hold: &OutputHold, inner: W) -> Held<W> {
        Held {
            hold: hold.clone(),
            inner,
        }
    }
}

impl<W: Write> Write for Held<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let _turn = self.hold.0.blocking_lock();
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        let _turn = self.hold.0.blocking_lock();
        self.inner.flush()
    }
}
