//! The validator's state ([`V`]) and the rules its sections share about
//! environment names and directories; each section's checks are methods of
//! [`V`] in `validate.rs` and its other submodules.

use std::path::{Path, PathBuf};

use crate::diagnostic::Sink;

/// The proxy variables, refused in `sandbox.env` in any case; so is every
/// name starting `CONSTLE_`. Constle points `HTTPS_PROXY` and `HTTP_PROXY`
/// (both cases) at its egress proxy, the agent's only way out, and
/// `NO_PROXY` (both cases) at loopback, where the MCP gates are. It leaves
/// `ALL_PROXY` unset: the proxy tunnels HTTPS only, which `HTTPS_PROXY`
/// already sends to it, and any other proxy is out of the agent's reach.
pub const RESERVED_ENV: [&str; 4] = ["HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY"];

/// Whether `sandbox.env` refuses `name` (a proxy variable, `CONSTLE_*`).
pub(super) fn is_reserved(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    RESERVED_ENV.contains(&upper.as_str()) || upper.starts_with("CONSTLE_")
}

pub(super) struct V<'a, 's> {
    pub sink: &'s mut Sink,
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub base_dir: PathBuf,
    pub agentfile: PathBuf,
    /// `sandbox.workdir` once checked, which no stdio server's may overlap.
    pub agent_workdir: Option<PathBuf>,
}

/// Whether directory `dir` holds `file`: on real paths where both exist,
/// else on the paths as written.
pub(super) fn holds(dir: &Path, file: &Path) -> bool {
    match (dir.canonicalize(), file.canonicalize()) {
        (Ok(dir), Ok(file)) => file.starts_with(dir),
        _ => file.starts_with(dir),
    }
}
