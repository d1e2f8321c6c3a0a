//! One running server process: the lines written to its stdin, the lines
//! read from its stdout and where each goes, and the task that watches it
//! until it ends.
//!
//! - A response goes to the request waiting for its id. Two requests with
//!   one id are never in flight at once (the second is refused), so every
//!   response has exactly one caller.
//! - A request or notification from the server goes to the agent's `GET`
//!   stream, when it has one open (and it is not full). Otherwise a
//!   notification is dropped, and a request is answered `-32601`.
//! - The process ends when its stdout closes, when it exits, when a request
//!   waits longer than the response timeout (it is then stopped), or when
//!   the bridge stops it; every waiting request then gets
//!   [`Answer::Ended`].

use std::collections::HashMap;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use constle_mcp_gate::{Reason, RequestId, error_body};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::message::{self, Kind};
use crate::process::{ExitCause, Process, ServerEvent, describe};

/// Longest line read from the server: the gate relays no message larger
/// than its body limit anyway. A longer line is skipped.
const MAX_LINE: usize = constle_mcp_gate::MAX_BODY_BYTES + 1024;

/// How long a stopped server may take to exit once its stdin is closed
/// (what the MCP stdio transport asks a client to allow) before it is
/// killed; and how long its last lines may take once it has exited.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// Messages from the server that may wait for the agent to read its `GET`
/// stream; past that, they are handled as if no stream were open.
const STREAM_BACKLOG: usize = 64;

/// Answers to server requests that may wait to be written at once; a
/// server that sends more while not reading its stdin gets no answer to
/// the rest, rather than constle's memory.
const MAX_REFUSALS_IN_FLIGHT: usize = 64;

/// What a waiting request gets.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The server's response, its exact bytes.
    Response(Bytes),
    /// The agent cancelled the request (`notifications/cancelled`).
    Cancelled,
    /// The process ended first: how.
    Ended(String),
}

/// Why a request cannot be sent.
#[derive(Debug)]
pub(crate) enum Refused {
    /// An id already waiting for its response.
    DuplicateId(RequestId),
    /// The process has ended: how.
    Ended(String),
}

struct Waiter {
    answer: oneshot::Sender<Answer>,
    deadline: Instant,
}

#[derive(Default)]
struct Routes {
    pending: HashMap<RequestId, Waiter>,
    stream: Option<mpsc::Sender<Bytes>>,
    /// How the process ended, once it has.
    ended: Option<String>,
}

/// The bridge's handle on one running process.
pub(crate) struct Link {
    server: Arc<str>,
    input: tokio::sync::Mutex<Option<Pin<Box<dyn AsyncWrite + Send>>>>,
    routes: Mutex<Routes>,
    /// Wakes the watch when a request starts waiting: its deadline may be
    /// the earliest now.
    waiting: tokio::sync::Notify,
    /// Answers to server requests not yet written.
    refusals: AtomicUsize,
}

/// How to stop a process, and learn when it is gone.
pub(crate) struct Stopper {
    stop: mpsc::Sender<ExitCause>,
    done: tokio::task::JoinHandle<()>,
}

impl Stopper {
    /// Stops the process for `cause` and waits until it is gone.
    pub async fn stop(self, cause: ExitCause) {
        // A process that already ended has dropped its receiver.
        let _ = self.stop.send(cause).await;
        let _ = self.done.await;
    }
}

impl Link {
    /// Takes over `process`: its stdout is read and routed, it is watched
    /// until it ends, and its end goes to `events`.
    pub fn start(
        server: Arc<str>,
        process: Process,
        timeout: Duration,
        events: mpsc::UnboundedSender<ServerEvent>,
    ) -> (Arc<Link>, Stopper) {
        let Process {
            input,
            output,
            child,
            hold,
        } = process;
        let link = Arc::new(Link {
            server,
            input: tokio::sync::Mutex::new(Some(input)),
            routes: Mutex::new(Routes::default()),
            waiting: tokio::sync::Notify::new(),
            refusals: AtomicUsize::new(0),
        });
        let (stop, stops) = mpsc::channel(1);
        let watch = Watch {
            link: Arc::clone(&link),
            child,
            timeout,
            stops,
        };
        let done = tokio::spawn(async move {
            let (cause, status) = watch.run(output).await;
            drop(hold);
            let _ = events.send(ServerEvent::Exited { cause, status });
        });
        (link, Stopper { stop, done })
    }

    fn routes(&self) -> MutexGuard<'_, Routes> {
        // The map stays consistent whatever a panicking holder left.
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How the process ended, if it has.
    pub fn ended(&self) -> Option<String> {
        self.routes().ended.clone()
    }

    /// Waits for the responses to `ids` (a body's requests), all or none:
    /// an id already waiting, or twice among `ids`, refuses them all.
    pub fn expect(
        &self,
        ids: &[RequestId],
        timeout: Duration,
    ) -> Result<Vec<oneshot::Receiver<Answer>>, Refused> {
        let mut routes = self.routes();
        if let Some(why) = &routes.ended {
            return Err(Refused::Ended(why.clone()));
        }
        for (i, id) in ids.iter().enumerate() {
            if routes.pending.contains_key(id) || ids[..i].contains(id) {
                return Err(Refused::DuplicateId(id.clone()));
            }
        }
        let deadline = Instant::now() + timeout;
        let waits = ids
            .iter()
            .map(|id| {
                let (answer, wait) = oneshot::channel();
                routes
                    .pending
                    .insert(id.clone(), Waiter { answer, deadline });
                wait
            })
            .collect();
        self.waiting.notify_one();
        Ok(waits)
    }

    /// Forgets the requests `ids` after all (their body was not sent).
    pub fn forget(&self, ids: &[RequestId]) {
        let mut routes = self.routes();
        for id in ids {
            routes.pending.remove(id);
        }
    }

    /// The agent cancelled `id`: its caller is answered now, and the server,
    /// which should not answer a cancelled request, is not waited for.
    pub fn cancel(&self, id: &RequestId) {
        if let Some(waiter) = self.routes().pending.remove(id) {
            let _ = waiter.answer.send(Answer::Cancelled);
        }
    }

    /// Writes one line to the server's stdin.
    pub async fn send(&self, line: &[u8]) -> Result<(), String> {
        let mut input = self.input.lock().await;
        let gone = || self.ended().unwrap_or_else(|| "closed its stdin".into());
        let Some(writer) = input.as_mut() else {
            return Err(gone());
        };
        match writer.write_all(line).await.and(writer.flush().await) {
            Ok(()) => Ok(()),
            Err(_) => Err(gone()),
        }
    }

    /// The agent's `GET` stream: from now on, the server's own requests and
    /// notifications go there (a stream opened before ends).
    pub fn open_stream(&self) -> Result<mpsc::Receiver<Bytes>, String> {
        let mut routes = self.routes();
        if let Some(why) = &routes.ended {
            return Err(why.clone());
        }
        let (sender, receiver) = mpsc::channel(STREAM_BACKLOG);
        routes.stream = Some(sender);
        Ok(receiver)
    }

    /// Routes one line of the server's stdout.
    fn route(self: &Arc<Self>, line: Bytes) {
        for message in message::split_line(line).unwrap_or_default() {
            match message::kind(&message) {
                Some(Kind::Response { id }) => {
                    // A response nobody waits for (cancelled, or its caller
                    // gone with the process it asked) is dropped.
                    if let Some(waiter) = self.routes().pending.remove(&id) {
                        let _ = waiter.answer.send(Answer::Response(message));
                    }
                }
                Some(Kind::Request { id, method }) if !self.to_stream(message.clone()) => {
                    self.refuse(id, &method);
                }
                Some(Kind::Request { .. }) => {}
                Some(Kind::Notification { .. }) => {
                    self.to_stream(message);
                }
                None => {}
            }
        }
    }

    /// Hands `message` to the agent's `GET` stream; whether it could.
    fn to_stream(&self, message: Bytes) -> bool {
        let mut routes = self.routes();
        let Some(stream) = &routes.stream else {
            return false;
        };
        match stream.try_send(message) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => false,
            Err(mpsc::error::TrySendError::Closed(_)) => {
                routes.stream = None;
                false
            }
        }
    }

    /// Answers a request from the server that has nowhere to go. Written
    /// from a task of its own: the server may not read its stdin while it
    /// waits for its stdout to drain.
    fn refuse(self: &Arc<Self>, id: RequestId, method: &str) {
        if self.refusals.fetch_add(1, Ordering::Relaxed) >= MAX_REFUSALS_IN_FLIGHT {
            self.refusals.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let message = format!(
            "the client of MCP server {:?} has no stream open for requests from the server \
             ({method}); the Constle gate answered it",
            self.server
        );
        let body = error_body(Some(&id), Reason::MethodNotAllowed, &message);
        let line = message::to_line(&body);
        let link = Arc::clone(self);
        tokio::spawn(async move {
            let _ = link.send(&line).await;
            link.refusals.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// The earliest deadline of a waiting request.
    fn next_deadline(&self) -> Option<Instant> {
        self.routes().pending.values().map(|w| w.deadline).min()
    }

    /// Records how the process ended and answers everyone waiting.
    fn end(&self, why: String) {
        let mut routes = self.routes();
        routes.ended = Some(why.clone());
        routes.stream = None;
        for (_, waiter) in routes.pending.drain() {
            let _ = waiter.answer.send(Answer::Ended(why.clone()));
        }
    }
}

/// The task that reads a process's stdout and sees it to its end.
struct Watch {
    link: Arc<Link>,
    child: tokio::process::Child,
    timeout: Duration,
    stops: mpsc::Receiver<ExitCause>,
}

impl Watch {
    async fn run(
        mut self,
        output: Pin<Box<dyn AsyncRead + Send>>,
    ) -> (ExitCause, Option<ExitStatus>) {
        let mut lines = Lines::new(output);
        let cause = self.watch(&mut lines).await;
        // No more writes; a server that is being stopped sees its stdin end.
        self.link.input.lock().await.take();
        let status = match cause {
            ExitCause::Exited => {
                self.drain(&mut lines).await;
                self.wait_or_kill().await
            }
            ExitCause::Unresponsive(_) => self.kill().await,
            _ => self.wait_or_kill().await,
        };
        self.link.end(describe(cause, status));
        (cause, status)
    }

    /// Routes lines until the process ends or must be stopped: why.
    async fn watch(&mut self, lines: &mut Lines) -> ExitCause {
        loop {
            let deadline = self.link.next_deadline();
            let overdue = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                line = lines.next() => match line {
                    Some(line) => self.link.route(line),
                    None => return ExitCause::Exited,
                },
                _ = self.child.wait() => return ExitCause::Exited,
                () = overdue => return ExitCause::Unresponsive(self.timeout),
                () = self.link.waiting.notified() => {}
                // The bridge gone (its sender dropped) is the run's end.
                cause = self.stops.recv() => return cause.unwrap_or(ExitCause::RunEnded),
            }
        }
    }

    /// After an exit: the lines still in the pipe are routed (bounded).
    async fn drain(&mut self, lines: &mut Lines) {
        let _ = tokio::time::timeout(STOP_GRACE, async {
            while let Some(line) = lines.next().await {
                self.link.route(line);
            }
        })
        .await;
    }

    /// The exit status, once the process has exited by itself or been
    /// killed after [`STOP_GRACE`].
    async fn wait_or_kill(&mut self) -> Option<ExitStatus> {
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => self.kill().await,
        }
    }

    async fn kill(&mut self) -> Option<ExitStatus> {
        let _ = self.child.start_kill();
        self.child.wait().await.ok()
    }
}

/// The server's stdout, line by line; lines longer than [`MAX_LINE`] are
/// skipped whole.
struct Lines {
    reader: BufReader<Pin<Box<dyn AsyncRead + Send>>>,
    /// The line read so far: kept here, so that a read cancelled halfway
    /// loses nothing.
    partial: Vec<u8>,
    /// Whether the current line is too long and being skipped.
    skipping: bool,
}

impl Lines {
    fn new(output: Pin<Box<dyn AsyncRead + Send>>) -> Lines {
        Lines {
            reader: BufReader::with_capacity(64 * 1024, output),
            partial: Vec::new(),
            skipping: false,
        }
    }

    /// The next non-blank line without its line ending; `None` at the end
    /// (or a read error). Cancel-safe.
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            let buf = self.reader.fill_buf().await.ok()?;
            if buf.is_empty() {
                return None;
            }
            let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
                Some(at) => (&buf[..at], true),
                None => (buf, false),
            };
            if !self.skipping && self.partial.len() + chunk.len() <= MAX_LINE {
                self.partial.extend_from_slice(chunk);
            } else {
                self.skipping = true;
                self.partial.clear();
            }
            let used = chunk.len() + usize::from(found);
            self.reader.consume(used);
            if !found {
                continue;
            }
            let mut line = std::mem::take(&mut self.partial);
            if std::mem::take(&mut self.skipping) || line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Some(line.into());
        }
    }
}
