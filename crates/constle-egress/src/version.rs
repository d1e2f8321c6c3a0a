//! [`squid_version`]: which Squid a run would start, and its version, for
//! a preflight (`constle doctor`).

use std::io;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::squid::{CHILD_PATH, squid_program};

/// The Squid a run starts (found as the run finds it) and the first line of
/// its `squid -v` (`Squid Cache: Version 5.7`), run as the proxy is run:
/// with a cleared environment but for `PATH`.
///
/// # Errors
///
/// When Squid cannot be started, or `squid -v` fails or prints nothing.
pub fn squid_version() -> io::Result<(PathBuf, String)> {
    let program = squid_program();
    let out = Command::new(&program)
        .arg("-v")
        .env_clear()
        .env("PATH", CHILD_PATH)
        .stdin(Stdio::null())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().next().map(str::trim) {
        Some(first) if out.status.success() && !first.is_empty() => Ok((program, first.to_owned())),
        _ => Err(io::Error::other(format!(
            "`{} -v` {} and printed no version",
            program.display(),
            out.status
        ))),
    }
}
