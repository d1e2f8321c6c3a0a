//! [`RedisServer`]: a real, private `redis-server` for the spend ledger's
//! tests and benchmarks.

use std::io::{self, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::child::dying_with_test;
use crate::find_tool;

/// How long a fresh server may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` (Debian's package) run as a child process on a Unix
/// socket in its own temporary directory: no TCP port, no persistence
/// (`--save '' --appendonly no`), so tests never meet each other or an
/// installed server. Killed on drop.
///
/// Started under `setpriv --pdeathsig KILL` when `setpriv` is installed, so
/// it dies with the test even on `kill -9`. That signal follows the
/// *thread* that started it: keep the server on the thread that made it (a
/// test's own thread, a benchmark's main thread).
pub struct RedisServer {
    child: Child,
    socket: PathBuf,
    dir: TempDir,
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`.
    pub fn start() -> io::Result<RedisServer> {
        let server = find_tool("redis-server").ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "redis-server is not installed")
        })?;
        let dir = tempfile::Builder::new()
            .prefix("constle-redis-")
            .tempdir()?;
        let socket = dir.path().join("redis.sock");
        let mut command = dying_with_test(&server);
        command
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--daemonize", "no", "--dir"])
            .arg(dir.path())
            .arg("--logfile")
            .arg(dir.path().join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command.spawn()?;
        let mut server = RedisServer { child, socket, dir };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "redis-server exited ({status}) before answering: {}",
                    self.log()
                )));
            }
            if ping(&self.socket).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "redis-server did not answer within {START_TIMEOUT:?}: {}",
                        self.log()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// The URL the `redis` crate connects with: `redis+unix:///…/redis.sock`.
    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    /// From now on, clients must give `password` (`CONFIG SET
    /// requirepass`): for tests of URLs that carry one. `password` is sent
    /// as one bulk string, so it may hold any bytes but CR and LF.
    pub fn require_password(&self, password: &str) -> io::Result<()> {
        self.config_set("requirepass", password)
    }

    /// `CONFIG SET parameter value`, e.g. `appendonly yes` for a server
    /// that keeps its data as a deployed one does. Both are sent as bulk
    /// strings, so they may hold any bytes but CR and LF.
    pub fn config_set(&self, parameter: &str, value: &str) -> io::Result<()> {
        let mut stream = UnixStream::connect(&self.socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        let command = format!(
            "*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n${}\r\n{parameter}\r\n${}\r\n{value}\r\n",
            parameter.len(),
            value.len()
        );
        stream.write_all(command.as_bytes())?;
        let mut reply = [0_u8; 5];
        stream.read_exact(&mut reply)?;
        match &reply {
            b"+OK\r\n" => Ok(()),
            _ => Err(io::Error::other(format!(
                "unexpected reply to CONFIG SET {parameter}"
            ))),
        }
    }

    /// The server's Unix socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Freezes the server (`SIGSTOP`): connections still open (the kernel
    /// queues them) but nothing answers, as with a hung or unreachable
    /// server. [`resume`](RedisServer::resume) undoes it.
    pub fn stop(&self) -> io::Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// Lets a [`stop`](RedisServer::stop)ped server run again.
    pub fn resume(&self) -> io::Result<()> {
        self.signal(Signal::SIGCONT)
    }

    /// Kills the server (`SIGKILL`) and reaps it: every connection is reset
    /// and new ones are refused.
    pub fn kill(&mut self) -> io::Result<()> {
        if self.child.try_wait()?.is_none() {
            self.child.kill()?;
        }
        self.child.wait().map(drop)
    }

    fn signal(&self, signal: Signal) -> io::Result<()> {
        let pid = i32::try_from(self.child.id()).map_err(io::Error::other)?;
        kill(Pid::from_raw(pid), signal).map_err(io::Error::from)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A stopped process still dies of SIGKILL.
        let _ = self.kill();
    }
}

/// One `PING` over the socket, in the protocol's inline form.
fn ping(socket: &Path) -> io::Result<()> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.write_all(b"PING\r\n")?;
    let mut reply = [0_u8; 7];
    stream.read_exact(&mut reply)?;
    match &reply {
        b"+PONG\r\n" => Ok(()),
        _ => Err(io::Error::other("unexpected reply to PING")),
    }
}
