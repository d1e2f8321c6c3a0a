//! All output goes through here: colour decisions, escaping of bytes that
//! did not come from us, and a quiet exit when stdout is a closed pipe.

use std::io::{self, IsTerminal as _, Write as _};
use std::sync::OnceLock;

use crate::cli::ColorChoice;

static COLOR_STDOUT: OnceLock<bool> = OnceLock::new();
static COLOR_STDERR: OnceLock<bool> = OnceLock::new();

/// Decides once whether stdout and stderr get colour.
pub fn init(choice: ColorChoice) {
    let wanted = |is_terminal: bool| match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            is_terminal
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var("TERM").map_or(true, |t| t != "dumb")
        }
    };
    let _ = COLOR_STDOUT.set(wanted(io::stdout().is_terminal()));
    let _ = COLOR_STDERR.set(wanted(io::stderr().is_terminal()));
}

/// ANSI colours used in output.
#[derive(Clone, Copy)]
pub enum Paint {
    Green,
    Red,
    Yellow,
    Cyan,
    Dim,
    Bold,
}

impl Paint {
    fn code(self) -> &'static str {
        match self {
            Paint::Green => "32",
            Paint::Red => "31",
            Paint::Yellow => "33",
            Paint::Cyan => "36",
            Paint::Dim => "2",
            Paint::Bold => "1",
        }
    }
}

/// `text` in `paint` if stdout is coloured. `text` must already be safe.
pub fn paint(paint: Paint, text: &str) -> String {
    Stream::Out.paint(paint, text)
}

/// Standard output or standard error, each with its own colour decision.
#[derive(Clone, Copy)]
pub enum Stream {
    Out,
    Err,
}

impl Stream {
    /// `text` in `paint` if this stream is coloured. `text` must already be safe.
    pub fn paint(self, paint: Paint, text: &str) -> String {
        let colored = match self {
            Stream::Out => COLOR_STDOUT.get(),
            Stream::Err => COLOR_STDERR.get(),
        };
        paint_if(*colored.unwrap_or(&false), paint, text)
    }

    /// Prints one line on this stream.
    pub fn line(self, line: &str) {
        match self {
            Stream::Out => out(line),
            Stream::Err => err_line(line),
        }
    }
}

fn paint_if(colored: bool, paint: Paint, text: &str) -> String {
    match colored {
        true => format!("\x1b[{}m{text}\x1b[0m", paint.code()),
        false => text.to_owned(),
    }
}

// Makes text that came from a file or an agent safe to print on one line:
// `constle-escape` holds the one definition of what may reach a terminal,
// which the human-gate prompt uses too.
pub use constle_escape::escape;

/// Prints a line on stdout. A closed pipe (`constle … | head`) ends the
/// program quietly with success, as other Unix tools do.
pub fn out(line: &str) {
    let mut stdout = io::stdout().lock();
    if let Err(err) = writeln!(stdout, "{line}")
        && err.kind() == io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// Prints a line on stderr.
pub fn err_line(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Prints `error: MESSAGE` on stderr.
pub fn error(message: &str) {
    err_line(&format!(
        "{} {message}",
        Stream::Err.paint(Paint::Red, "error:")
    ));
}
