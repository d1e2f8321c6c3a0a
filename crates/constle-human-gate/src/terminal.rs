//! The terminal channel: the prompt on the host's terminal and its answer.
//!
//! A terminal answer is an unsigned local action. The caller records an
//! approval from here with `decided_by: terminal`; nothing is signed, so
//! unlike a webhook decision it cannot be re-verified later.
//!
//! Everything the prompt shows that did not come from us (the tool name, the
//! server id, the arguments, and for good measure the agent name) goes
//! through [`escape`] first, and lines holding it are cut so that on a
//! terminal at least 80 columns wide no line the agent controls can begin
//! where the real prompt's lines begin.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::time::Instant;

use constle_approval::quorum::BallotRequest;
use constle_approval::rules::OnTimeout;
use constle_approval::{PendingRequest, SubjectDigest};

// The one definition of what may reach a terminal lives in `constle-escape`;
// re-exported so callers of this crate keep `constle_human_gate::escape`.
pub use constle_escape::escape;

/// Arguments longer than this many bytes (after escaping) are too large to
/// show, and so can be denied but never approved at the terminal.
pub const MAX_SHOWN_BYTES: usize = 4096;

/// Arguments spanning more than this many lines are too large to show.
pub const MAX_SHOWN_LINES: usize = 40;

/// Compact JSON up to this many bytes is shown on one line, as sent;
/// anything longer is pretty-printed.
const COMPACT_BYTES: usize = 72;

/// Lines with text the agent controls are cut at this many columns
/// (counting every non-ASCII character as two), so an 80-column terminal
/// never wraps them itself.
const WRAP_COLUMNS: usize = 76;

/// Indent of every line after the first.
const INDENT: &str = "   ";

/// Prefix of a line continuing one that was cut at [`WRAP_COLUMNS`].
const CONTINUATION: &str = "   ↳ ";

/// How many unrecognised answers are re-asked before the terminal gives up
/// (and [`TerminalOutcome::NoAnswer`] lets the webhook or the timeout decide).
pub const MAX_ATTEMPTS: usize = 5;

/// The longest answer line read; longer lines count as unrecognised.
const MAX_ANSWER_BYTES: usize = 256;

/// What the caller prints, once, when [`open_host_tty`] finds no terminal.
pub const NO_TERMINAL_MESSAGE: &str = "no terminal: the gate waits for the webhook or the timeout";

/// What the terminal prompt shows: one gated call, how long the gate waits
/// and what it does then.
#[derive(Debug)]
pub struct PromptRequest {
    agent: String,
    server: String,
    tool: String,
    arguments: Value,
    subject_digest: SubjectDigest,
    timeout: Duration,
    on_timeout: OnTimeout,
}

impl PromptRequest {
    /// The prompt for `request`, whose gate waits `timeout` in all and then
    /// does `on_timeout`. It keeps its own copy of what it shows, so the
    /// request itself can go to the webhook at the same time.
    pub fn new(
        request: &PendingRequest,
        timeout: Duration,
        on_timeout: OnTimeout,
    ) -> PromptRequest {
        PromptRequest {
            agent: request.agent().to_owned(),
            server: request.server().to_owned(),
            tool: request.tool().to_owned(),
            arguments: request.arguments().clone(),
            subject_digest: request.subject_digest().clone(),
            timeout,
            on_timeout,
        }
    }

    /// The prompt for a version 2 request (several approvers), as
    /// [`PromptRequest::new`].
    pub fn for_ballot(
        request: &BallotRequest,
        timeout: Duration,
        on_timeout: OnTimeout,
    ) -> PromptRequest {
        let binding = request.binding();
        PromptRequest {
            agent: binding.agent.clone(),
            server: binding.server.clone(),
            tool: binding.tool.clone(),
            arguments: request.arguments().clone(),
            subject_digest: request.subject_digest().clone(),
            timeout,
            on_timeout,
        }
    }

    /// Whether the arguments are too large to show in full. Such a call can
    /// be denied at the terminal, never approved there.
    pub fn too_large_to_show(&self) -> bool {
        shown_arguments(&self.arguments).too_large
    }
}

/// The arguments as the prompt shows them.
struct Shown {
    /// Byte and line count of the JSON text, before escaping.
    bytes: usize,
    lines: usize,
    /// The JSON text, escaped, split into lines.
    escaped: Vec<String>,
    too_large: bool,
}

/// The arguments are rendered from the parsed value, never from the bytes
/// the agent sent: the value is what was digested and what is forwarded, so
/// duplicate keys or odd spellings in the raw bytes cannot show one call and
/// approve another.
fn shown_arguments(arguments: &Value) -> Shown {
    let compact = arguments.to_string();
    let text = if compact.len() <= COMPACT_BYTES {
        compact
    } else {
        serde_json::to_string_pretty(arguments).unwrap_or(compact)
    };
    let escaped: Vec<String> = text.split('\n').map(escape).collect();
    let escaped_bytes: usize = escaped.iter().map(|l| l.len() + 1).sum();
    Shown {
        bytes: text.len(),
        lines: escaped.len(),
        too_large: escaped.len() > MAX_SHOWN_LINES || escaped_bytes > MAX_SHOWN_BYTES,
        escaped,
    }
}

/// The terminal prompt for one gated call, ending with the question (no
/// newline after it).
///
/// ```text
/// ⏸  human gate: agent "invoice-processor" wants to call
///    MCP tool "pay_invoice" on server "accounting"
///    subject: sha256:<64 hex>
///    arguments (25 bytes, 1 lines) — shown in full:
///    {"invoice_id":"INV-0042"}
///    approve? [a]pprove / [d]eny (timeout 300s → abort):
/// ```
///
/// The subject digest is shown in full, not shortened to its first and last
/// four digits: a person comparing it with what the webhook endpoint shows
/// needs all of it, and 32 bits are few enough for an agent to grind a
/// second call that matches an abbreviation.
///
/// Arguments are shown as compact JSON up to 72 bytes and pretty-printed
/// beyond, each line indented. Above [`MAX_SHOWN_BYTES`] or
/// [`MAX_SHOWN_LINES`] they are not shown and the question offers only
/// `[d]eny`. Every line holding text the agent controls is escaped and cut
/// at 76 columns, the rest continuing on lines that start with `   ↳ `; so
/// on a terminal 80 or more columns wide, no such line can begin like the
/// prompt's own first or last line.
pub fn render_prompt(req: &PromptRequest) -> String {
    let shown = shown_arguments(&req.arguments);
    let mut out = String::new();
    push_wrapped(
        &mut out,
        &format!(
            "⏸  human gate: agent \"{}\" wants to call",
            escape(&req.agent)
        ),
    );
    push_wrapped(
        &mut out,
        &format!(
            "{INDENT}MCP tool \"{}\" on server \"{}\"",
            escape(&req.tool),
            escape(&req.server)
        ),
    );
    let _ = writeln!(out, "{INDENT}subject: {}", req.subject_digest);
    let size = format!("arguments ({} bytes, {} lines)", shown.bytes, shown.lines);
    if shown.too_large {
        let _ = writeln!(out, "{INDENT}{size} — too large to show: deny only");
    } else {
        let _ = writeln!(out, "{INDENT}{size} — shown in full:");
        for line in &shown.escaped {
            push_wrapped(&mut out, &format!("{INDENT}{line}"));
        }
    }
    let timeout = format!(
        "(timeout {}s → {})",
        req.timeout.as_secs(),
        req.on_timeout.word()
    );
    if shown.too_large {
        let _ = write!(out, "{INDENT}deny? [d]eny only {timeout}: ");
    } else {
        let _ = write!(out, "{INDENT}approve? [a]pprove / [d]eny {timeout}: ");
    }
    out
}

/// Appends `line` and a newline, cut at [`WRAP_COLUMNS`] with the rest on
/// [`CONTINUATION`] lines. `line` must already be escaped.
fn push_wrapped(out: &mut String, line: &str) {
    let width = |c: char| if c.is_ascii() { 1 } else { 2 };
    let mut columns = 0;
    for c in line.chars() {
        if columns + width(c) > WRAP_COLUMNS {
            out.push('\n');
            out.push_str(CONTINUATION);
            columns = CONTINUATION.chars().map(width).sum();
        }
        out.push(c);
        columns += width(c);
    }
    out.push('\n');
}

/// What the person at the terminal decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TerminalOutcome {
    /// `a` or `approve`: an unsigned local approval, to be recorded with
    /// `decided_by: terminal`. Never returned when the arguments were too
    /// large to show.
    Approved,
    /// `d` or `deny`.
    Denied,
    /// End of input, a read or write error, the deadline, or
    /// [`MAX_ATTEMPTS`] unrecognised answers: the terminal did not decide,
    /// so the webhook or `on_timeout` does.
    NoAnswer,
}

/// Shows the prompt on `tty` and reads answers until one decides, input
/// ends or `deadline` passes.
///
/// `a`/`approve` and `d`/`deny` are accepted, ignoring case and surrounding
/// blanks; anything else is re-asked, at most [`MAX_ATTEMPTS`] times in all.
/// When the arguments are too large to show, an approval is refused and
/// re-asked. `tty` must be the host's terminal ([`open_host_tty`]), never
/// the agent's standard input.
///
/// Cancel-safe in the sense the race with the webhook needs: dropping the
/// future decides nothing.
pub async fn ask_terminal<T>(tty: &mut T, req: &PromptRequest, deadline: Instant) -> TerminalOutcome
where
    T: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    tokio::time::timeout_at(deadline, converse(tty, req))
        .await
        .unwrap_or(TerminalOutcome::NoAnswer)
}

async fn converse<T>(tty: &mut T, req: &PromptRequest) -> TerminalOutcome
where
    T: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let prompt = render_prompt(req);
    let too_large = req.too_large_to_show();
    let question = prompt.rsplit('\n').next().unwrap_or_default().to_owned();
    if say(tty, &prompt).await.is_err() {
        return TerminalOutcome::NoAnswer;
    }
    let mut lines = LineReader::default();
    for attempt in 1..=MAX_ATTEMPTS {
        let Some(answer) = lines.next_line(tty).await else {
            return TerminalOutcome::NoAnswer;
        };
        let answer = answer.trim().to_ascii_lowercase();
        let reply = match answer.as_str() {
            "a" | "approve" if !too_large => {
                let _ = say(tty, "   approved at the terminal\n").await;
                return TerminalOutcome::Approved;
            }
            "d" | "deny" => {
                let _ = say(tty, "   denied at the terminal\n").await;
                return TerminalOutcome::Denied;
            }
            "a" | "approve" => {
                "   arguments too large to show cannot be approved here: deny, or decide through the webhook\n"
            }
            _ => "   please answer a or d\n",
        };
        if attempt == MAX_ATTEMPTS {
            let _ = say(
                tty,
                "   no decision at the terminal: the gate waits for the webhook or the timeout\n",
            )
            .await;
            break;
        }
        if say(tty, &format!("{reply}{question}")).await.is_err() {
            return TerminalOutcome::NoAnswer;
        }
    }
    TerminalOutcome::NoAnswer
}

async fn say<T>(tty: &mut T, text: &str) -> std::io::Result<()>
where
    T: AsyncWrite + Unpin + ?Sized,
{
    tty.write_all(text.as_bytes()).await?;
    tty.flush().await
}

/// Splits input into lines; an over-long line comes back empty (and so is
/// re-asked) without being buffered.
#[derive(Default)]
struct LineReader {
    buf: Vec<u8>,
    overflow: bool,
    eof: bool,
}

impl LineReader {
    /// The next line, without its newline; `None` at end of input or on an
    /// error. Bytes that are not UTF-8 make an unrecognised line.
    async fn next_line<T>(&mut self, tty: &mut T) -> Option<String>
    where
        T: AsyncRead + Unpin + ?Sized,
    {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).take(end).collect();
                let overflow = std::mem::take(&mut self.overflow);
                return Some(match overflow {
                    true => String::new(),
                    false => String::from_utf8(line).unwrap_or_default(),
                });
            }
            if self.eof {
                return None;
            }
            if self.buf.len() > MAX_ANSWER_BYTES {
                self.buf.clear();
                self.overflow = true;
            }
            let mut chunk = [0u8; 256];
            match tty.read(&mut chunk).await {
                Ok(0) | Err(_) => {
                    // A last line without a newline is not an answer: the
                    // person may not have finished typing it.
                    self.eof = true;
                    return None;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

#[cfg(unix)]
pub use host::{HostTty, open_host_tty};

#[cfg(unix)]
mod host {
    use std::fs::{File, OpenOptions};
    use std::io::{self, Read as _, Write as _};
    use std::os::fd::{AsFd as _, OwnedFd};
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::pin::Pin;
    use std::task::{Context, Poll, ready};

    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use nix::sys::termios::{FlushArg, tcflush};
    use tokio::io::unix::AsyncFd;
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    /// The host's terminal, for [`super::ask_terminal`]: non-blocking, so a
    /// prompt abandoned at the deadline leaves no read behind that would
    /// swallow the person's next line.
    #[derive(Debug)]
    pub struct HostTty(AsyncFd<File>);

    /// Opens the controlling terminal of `constle run` (`/dev/tty`), never
    /// the agent's standard input.
    ///
    /// `None` when there is no controlling terminal (CI, a service), when
    /// this process is not in the terminal's foreground process group (a
    /// background job, which reading would stop), or outside a Tokio runtime
    /// with I/O enabled. The caller then prints [`super::NO_TERMINAL_MESSAGE`]
    /// once.
    pub fn open_host_tty() -> Option<HostTty> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags((OFlag::O_NOCTTY | OFlag::O_NONBLOCK).bits())
            .open("/dev/tty")
            .ok()?;
        let foreground = nix::unistd::tcgetpgrp(file.as_fd()).ok()?;
        if foreground != nix::unistd::getpgrp() {
            return None;
        }
        HostTty::from_fd(file.into()).ok()
    }

    impl HostTty {
        /// Wraps an open terminal, such as the slave side of a
        /// pseudo-terminal in tests, making it non-blocking.
        ///
        /// # Errors
        ///
        /// If `fd` cannot be made non-blocking or registered with the Tokio
        /// runtime (there is none, or it has I/O disabled).
        pub fn from_fd(fd: OwnedFd) -> io::Result<HostTty> {
            let flags = fcntl(fd.as_fd(), FcntlArg::F_GETFL)?;
            let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
            fcntl(fd.as_fd(), FcntlArg::F_SETFL(flags))?;
            // `AsyncFd::new` is deprecated because an arbitrary `AsRawFd`
            // may close or swap its descriptor while registered; a `File`
            // owns its descriptor and never changes it, so this use is sound,
            // and the replacement (`AsyncFd::register`) is `unsafe`, which
            // the workspace forbids.
            #[allow(deprecated)]
            let registered = AsyncFd::new(File::from(fd))?;
            Ok(HostTty(registered))
        }

        /// Discards anything typed before the prompt appears, so a key
        /// pressed earlier cannot answer a question not yet asked.
        pub fn discard_typeahead(&self) {
            let _ = tcflush(self.0.get_ref().as_fd(), FlushArg::TCIFLUSH);
        }
    }

    impl AsyncRead for HostTty {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            loop {
                let mut guard = ready!(this.0.poll_read_ready(cx))?;
                let unfilled = buf.initialize_unfilled();
                match guard.try_io(|inner| inner.get_ref().read(unfilled)) {
                    Ok(Ok(n)) => {
                        buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    Ok(Err(err)) => return Poll::Ready(Err(err)),
                    Err(_would_block) => continue,
                }
            }
        }
    }

    impl AsyncWrite for HostTty {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            loop {
                let mut guard = ready!(this.0.poll_write_ready(cx))?;
                match guard.try_io(|inner| inner.get_ref().write(buf)) {
                    Ok(result) => return Poll::Ready(result),
                    Err(_would_block) => continue,
                }
            }
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }
}
