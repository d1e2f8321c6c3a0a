//! [`ProbeError`]: why the probe process told nothing, which makes the
//! checks it serves unknown rather than missing.

use std::process::ExitStatus;

/// Why the probe process (`constle preflight-probe`) told nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    /// It could not be started.
    #[error("cannot start the probe process {exe}: {source}")]
    Spawn {
        exe: String,
        #[source]
        source: std::io::Error,
    },
    /// It failed before it tried anything.
    #[error("the probe process failed ({status}): {stderr}")]
    Failed { status: ExitStatus, stderr: String },
}
