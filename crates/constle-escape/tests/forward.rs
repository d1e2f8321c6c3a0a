//! `forward`: escaped output flushed read by read, and a source drained to
//! its end whatever happens to the terminal.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Duration;

use constle_escape::{CHUNK_BYTES, ForwardReport, StreamEscaper, forward};

/// One thing the agent's side of the pipe does when read.
enum Step {
    Data(Vec<u8>),
    Interrupted,
    Fail,
}

/// A source that plays its steps, then reports end of file.
#[derive(Default)]
struct Agent {
    steps: VecDeque<Step>,
    /// Whether a read returned end of file.
    eof: bool,
    /// The largest buffer a read was given.
    largest_read: usize,
    /// What the terminal had been flushed when each read began.
    flushed: Arc<Mutex<Vec<u8>>>,
    seen: Vec<Vec<u8>>,
}

impl Agent {
    fn new(steps: impl IntoIterator<Item = Step>) -> Agent {
        Agent {
            steps: steps.into_iter().collect(),
            ..Agent::default()
        }
    }

    /// The agent writing `pieces`, one per read.
    fn writing<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Agent {
        Agent::new(pieces.into_iter().map(|p| Step::Data(p.to_vec())))
    }
}

impl Read for Agent {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.largest_read = self.largest_read.max(buf.len());
        self.seen.push(
            self.flushed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        );
        match self.steps.pop_front() {
            None => {
                self.eof = true;
                Ok(0)
            }
            Some(Step::Data(mut data)) => {
                let rest = data.split_off(data.len().min(buf.len()));
                buf[..data.len()].copy_from_slice(&data);
                if !rest.is_empty() {
                    self.steps.push_front(Step::Data(rest));
                }
                Ok(data.len())
            }
            Some(Step::Interrupted) => Err(ErrorKind::Interrupted.into()),
            Some(Step::Fail) => Err(io::Error::other("the pipe broke")),
        }
    }
}

/// A terminal that accepts up to `limit` bytes, `per_write` at a time,
/// and then fails with a broken pipe.
struct Terminal {
    accepted: Vec<u8>,
    limit: usize,
    per_write: usize,
    /// Whether every other write is interrupted, starting with the first.
    interrupts: bool,
    interrupt_next: bool,
    flush_fails: bool,
    /// What had been accepted at the last flush.
    flushed: Arc<Mutex<Vec<u8>>>,
    /// Calls after one failed.
    calls_after_failure: usize,
    failed: bool,
}

impl Terminal {
    fn new() -> Terminal {
        Terminal {
            accepted: Vec::new(),
            limit: usize::MAX,
            per_write: usize::MAX,
            interrupts: false,
            interrupt_next: true,
            flush_fails: false,
            flushed: Arc::default(),
            calls_after_failure: 0,
            failed: false,
        }
    }

    fn fail(&mut self, kind: ErrorKind) -> io::Result<()> {
        self.failed = true;
        Err(kind.into())
    }
}

impl Write for Terminal {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.calls_after_failure += usize::from(self.failed);
        if self.interrupts {
            self.interrupt_next = !self.interrupt_next;
            if !self.interrupt_next {
                return Err(ErrorKind::Interrupted.into());
            }
        }
        if self.accepted.len() == self.limit {
            self.fail(ErrorKind::BrokenPipe)?;
        }
        let n = buf
            .len()
            .min(self.per_write)
            .min(self.limit - self.accepted.len());
        self.accepted.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.calls_after_failure += usize::from(self.failed);
        if self.flush_fails {
            self.fail(ErrorKind::StorageFull)?;
        }
        *self.flushed.lock().unwrap_or_else(PoisonError::into_inner) = self.accepted.clone();
        Ok(())
    }
}

fn escaped(bytes: &[u8]) -> Vec<u8> {
    let (mut escaper, mut out) = (StreamEscaper::new(), String::new());
    escaper.push(bytes, &mut out);
    escaper.finish(&mut out);
    out.into_bytes()
}

/// Output with something to escape in every line, over many chunks.
fn long_output() -> Vec<u8> {
    let line = "\x1b[32mok\x1b[0m ✓ step done\r\n".as_bytes();
    line.repeat(4 * CHUNK_BYTES / line.len())
}

#[test]
fn forwards_escaped_whatever_the_reads() {
    let long = long_output();
    let cases: [&[&[u8]]; 4] = [
        &[],
        &[b"a\x1b[2J", b"\xe2", b"\x9c", b"\x93\n\xff\xe2"],
        &[&long[..]],
        &[&long[..CHUNK_BYTES + 1], &long[CHUNK_BYTES + 1..]],
    ];
    for pieces in cases {
        let (mut agent, mut terminal) = (Agent::writing(pieces.iter().copied()), Terminal::new());
        let report = forward(&mut agent, &mut terminal);
        let expected = escaped(&pieces.concat());
        assert_eq!(terminal.accepted, expected);
        assert!(report.write_error.is_none() && report.read_error.is_none());
        assert_eq!(report.bytes_read, pieces.concat().len() as u64);
        assert_eq!(report.bytes_written, expected.len() as u64);
        assert!(agent.eof && agent.largest_read <= CHUNK_BYTES);
    }
}

#[test]
fn each_read_is_on_the_terminal_before_the_next() {
    let pieces: [&[u8]; 3] = [b"one\n", b"\x1b[2Jtwo \xe2\x9c", b"\x93 three"];
    let mut terminal = Terminal::new();
    let mut agent = Agent::writing(pieces);
    agent.flushed = terminal.flushed.clone();
    forward(&mut agent, &mut terminal);
    let seen: Vec<String> = agent
        .seen
        .iter()
        .map(|s| String::from_utf8_lossy(s).into())
        .collect();
    assert_eq!(
        seen,
        [
            "",
            "one\n",
            "one\n\\u{1b}[2Jtwo ",
            "one\n\\u{1b}[2Jtwo ✓ three"
        ]
    );
}

#[test]
fn a_failed_terminal_stops_writes_but_the_agent_is_read_to_the_end() {
    let output = long_output();
    let shown = escaped(&output);
    let first_chunk_shown = {
        let (mut escaper, mut out) = (StreamEscaper::new(), String::new());
        escaper.push(&output[..CHUNK_BYTES], &mut out);
        out.len()
    };
    let broken_after = |limit| Terminal {
        limit,
        ..Terminal::new()
    };
    let cases = [
        (broken_after(0), ErrorKind::BrokenPipe, 0),
        (broken_after(7), ErrorKind::BrokenPipe, 7),
        (
            broken_after(CHUNK_BYTES),
            ErrorKind::BrokenPipe,
            CHUNK_BYTES,
        ),
        (
            broken_after(CHUNK_BYTES + 1),
            ErrorKind::BrokenPipe,
            CHUNK_BYTES + 1,
        ),
        (
            Terminal {
                per_write: 0,
                ..Terminal::new()
            },
            ErrorKind::WriteZero,
            0,
        ),
        (
            Terminal {
                flush_fails: true,
                ..Terminal::new()
            },
            ErrorKind::StorageFull,
            first_chunk_shown,
        ),
    ];
    for (mut terminal, kind, written) in cases {
        let mut agent = Agent::writing([&output[..]]);
        let report = forward(&mut agent, &mut terminal);
        assert_eq!(report.write_error.as_ref().map(io::Error::kind), Some(kind));
        assert_eq!(report.bytes_written, written as u64, "{kind:?}");
        assert_eq!(terminal.accepted, shown[..written], "{kind:?}");
        assert_eq!(terminal.calls_after_failure, 0, "{kind:?}");
        assert!(agent.eof, "{kind:?}: the agent was not read to the end");
        assert_eq!(report.bytes_read, output.len() as u64);
    }
}

/// As with `constle run … | head -1`: the agent writes far more than a pipe
/// holds into a real pipe, and must finish although the terminal is gone.
#[test]
fn an_agent_writing_into_a_real_pipe_finishes_after_the_terminal_fails() {
    let (reader, mut writer) = io::pipe().unwrap();
    let agent = std::thread::spawn(move || {
        let output = long_output();
        (0..8).try_for_each(|_| writer.write_all(&output))
    });
    let (done, report) = mpsc::channel();
    std::thread::spawn(move || {
        let terminal = Terminal {
            limit: 100,
            ..Terminal::new()
        };
        let _ = done.send(forward(reader, terminal));
    });
    let report: ForwardReport = report.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(agent.join().unwrap().is_ok());
    assert_eq!(report.bytes_read, 8 * long_output().len() as u64);
    assert_eq!(report.bytes_written, 100);
}

#[test]
fn interrupted_reads_and_writes_are_retried() {
    let steps = [
        Step::Interrupted,
        Step::Data(b"a\x1b".to_vec()),
        Step::Interrupted,
        Step::Data("b ✓".as_bytes().to_vec()),
    ];
    let mut agent = Agent::new(steps);
    let mut terminal = Terminal {
        per_write: 3,
        interrupts: true,
        ..Terminal::new()
    };
    let report = forward(&mut agent, &mut terminal);
    assert!(report.read_error.is_none() && report.write_error.is_none());
    assert_eq!(terminal.accepted, "a\\u{1b}b ✓".as_bytes());
}

#[test]
fn a_read_error_ends_forwarding_and_what_was_cut_off_is_shown() {
    let steps = [
        Step::Data(b"ok \xe2\x9c".to_vec()),
        Step::Fail,
        Step::Data(b"never read".to_vec()),
    ];
    let mut agent = Agent::new(steps);
    let mut terminal = Terminal::new();
    let report = forward(&mut agent, &mut terminal);
    assert_eq!(report.read_error.map(|e| e.kind()), Some(ErrorKind::Other));
    assert_eq!(report.bytes_read, 5);
    assert_eq!(terminal.accepted, b"ok \\x{e2}\\x{9c}");
    assert_eq!(agent.steps.len(), 1);
}
