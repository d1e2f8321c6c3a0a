//! The caller's side of [`CommandIo::Socket`](crate::CommandIo::Socket): the
//! two connections `sandbox-init` makes to the socket, the first saying
//! whether the command started, the second the command's stdin and stdout.

use std::io;

use tokio::io::AsyncReadExt as _;
use tokio::net::{UnixListener, UnixStream};

/// The most a start report holds.
const MAX_REPORT: u64 = 1024;

/// Accepts a `--stdio` sandbox's two connections on `listener` and reads
/// whether its command started: the command's channel when it did, an
/// error saying why when it did not (`failed: No such file or directory`)
/// or when the sandbox ended without saying.
pub async fn accept_stdio(listener: &UnixListener) -> io::Result<UnixStream> {
    let (report, _) = listener.accept().await?;
    let (channel, _) = listener.accept().await?;
    let mut said = String::new();
    report.take(MAX_REPORT).read_to_string(&mut said).await?;
    match said.trim_end() {
        "started" => Ok(channel),
        "" => Err(io::Error::other(
            "its sandbox ended before its command started",
        )),
        other => {
            let why = other.strip_prefix("failed: ").unwrap_or(other);
            Err(io::Error::other(format!(
                "its command could not be started: {}",
                constle_escape::escape(why)
            )))
        }
    }
}
