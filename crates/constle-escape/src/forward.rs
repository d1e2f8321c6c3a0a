//! Copying the agent's output to the operator's terminal, escaped.

use std::io::{self, Read, Write};

use crate::StreamEscaper;

/// How much [`forward`] reads at a time. With the escaped form of one read
/// (at most about six times as large), the most it ever holds.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// What [`forward`] did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ForwardReport {
    /// Bytes read from the source, including any discarded after a write
    /// failed.
    pub bytes_read: u64,
    /// Escaped bytes the writer accepted. If it buffers, a failed flush may
    /// have lost some of them.
    pub bytes_written: u64,
    /// The first write or flush error; nothing was written after it.
    pub write_error: Option<io::Error>,
    /// The read error that ended forwarding before end of file.
    pub read_error: Option<io::Error>,
}

/// Copies `from` to `to` until end of file, escaped as [`StreamEscaper`]
/// does, and says what happened. Blocking: run it on a thread of its own,
/// one per stream.
///
/// ```no_run
/// # let pipe = std::io::empty();
/// let report = constle_escape::forward(pipe, std::io::stdout());
/// ```
///
/// Each read of up to [`CHUNK_BYTES`] is written and flushed before the
/// next, so output appears as the agent writes it and a slow terminal slows
/// the agent through its pipe rather than filling memory here. When the
/// writer fails (`constle run … | head -1` closes the pipe), forwarding
/// stops writing but reads on to end of file, discarding, so the agent is
/// never blocked on a pipe nobody empties. Reads and writes interrupted by a
/// signal are retried; any other read error ends forwarding.
pub fn forward(mut from: impl Read, mut to: impl Write) -> ForwardReport {
    let mut report = ForwardReport::default();
    let mut escaper = StreamEscaper::new();
    let mut chunk = vec![0; CHUNK_BYTES];
    let mut escaped = String::new();
    loop {
        let read = match retry(|| from.read(&mut chunk)) {
            Ok(0) => break,
            Ok(read) => read,
            Err(err) => {
                report.read_error = Some(err);
                break;
            }
        };
        report.bytes_read += read as u64;
        if report.write_error.is_none() {
            escaped.clear();
            escaper.push(&chunk[..read], &mut escaped);
            report.write(&mut to, &escaped);
        }
    }
    if report.write_error.is_none() {
        escaped.clear();
        escaper.finish(&mut escaped);
        report.write(&mut to, &escaped);
    }
    report
}

impl ForwardReport {
    /// Writes all of `text` and flushes, keeping the error if that fails.
    fn write(&mut self, to: &mut impl Write, text: &str) {
        let written = self.write_all(to, text.as_bytes());
        if let Err(err) = written.and_then(|()| retry(|| to.flush())) {
            self.write_error = Some(err);
        }
    }

    /// `Write::write_all`, counting what the writer accepts.
    fn write_all(&mut self, to: &mut impl Write, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let written = retry(|| to.write(bytes))?;
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            self.bytes_written += written as u64;
            bytes = &bytes[written..];
        }
        Ok(())
    }
}

/// Runs `op` again for as long as a signal interrupts it.
fn retry<T>(mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match op() {
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            result => return result,
        }
    }
}
