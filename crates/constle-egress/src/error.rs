//! Errors of this crate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Why the proxy could not be configured or started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EgressError {
    /// Squid must listen on loopback only.
    #[error("the proxy must listen on loopback, not {0}")]
    NotLoopback(SocketAddr),
    /// A path that would be misread inside `squid.conf`.
    #[error("cannot use {} in squid.conf: {why}", path.display())]
    UnsafePath {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The run directory is missing, not a directory, or not private.
    #[error("run directory {}: {why}", path.display())]
    RunDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Running as root, Squid runs as `proxy`, which must be able to reach
    /// the run directory.
    #[error(
        "user `{user}` cannot enter {}, a parent of the run directory; put the run directory under a directory it can search (such as /tmp)",
        path.display()
    )]
    NotSearchable {
        /// The directory the user cannot search.
        path: PathBuf,
        /// The user Squid runs as.
        user: String,
    },
    /// Running as root, Squid is started as this user, which must exist.
    #[error(
        "no user `{0}` on this machine; Squid runs as it when Constle runs as root (install the Debian package `squid`, which creates it)"
    )]
    NoSquidUser(String),
    /// A file operation failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done (`write`, `create`, …).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's answer.
        #[source]
        source: std::io::Error,
    },
    /// A program could not be started.
    #[error("cannot run {}: {source} (is the Debian package `{package}` installed?)", program.display())]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The package that provides it.
        package: &'static str,
        /// The system's answer.
        #[source]
        source: std::io::Error,
    },
    /// Squid exited before it accepted connections.
    #[error("Squid exited during start-up ({status}); its log {} says: {detail}", cache_log.display())]
    Exited {
        /// How it exited.
        status: ExitStatus,
        /// Its log.
        cache_log: PathBuf,
        /// The log's error lines, or its last lines.
        detail: String,
    },
    /// Squid did not accept connections in time.
    #[error("Squid did not accept connections on {addr} within {waited:?}; see {}", cache_log.display())]
    NotReady {
        /// Where it should have listened.
        addr: SocketAddr,
        /// How long start waited.
        waited: Duration,
        /// Its log.
        cache_log: PathBuf,
    },
    /// Every port tried was taken before Squid could bind it.
    #[error("Squid found its port busy {attempts} times in a row; see {}", cache_log.display())]
    PortsBusy {
        /// How many ports were tried.
        attempts: u32,
        /// Its log.
        cache_log: PathBuf,
    },
}

impl EgressError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EgressError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
