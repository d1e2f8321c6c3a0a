//! The validator's state ([`V`]) and the rules its sections share about
//! environment names and directories; each section's checks are methods of
//! [`V`] in `validate.rs` and its other submodules.

use std::path::{Path, PathBuf};

use crate::de::Located;
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
    /// `sandbox.home` once checked, when declared, which no stdio server's
    /// work directory may overlap either.
    pub agent_home: Option<PathBuf>,
}

/// A directory another must stay apart from: what messages call it, where
/// it is, and what to write instead of an overlap.
pub(super) struct Apart<'d> {
    pub what: &'static str,
    pub dir: &'d Path,
    pub help: &'static str,
}

impl V<'_, '_> {
    /// Whether `dir`, written at `value` for `field`, neither holds nor lies
    /// inside any of `others`; each overlap is an error `code` saying
    /// `consequence`.
    pub(super) fn apart(
        &mut self,
        value: &Located<String>,
        (field, dir): (&str, &Path),
        others: &[Apart<'_>],
        code: &'static str,
        consequence: &str,
    ) -> bool {
        let mut ok = true;
        for other in others {
            if holds(dir, other.dir) || holds(other.dir, dir) {
                self.sink.error(
                    code,
                    value.pos,
                    format!(
                        "{field} {} overlaps {} {}: {consequence}",
                        dir.display(),
                        other.what,
                        other.dir.display()
                    ),
                    Some(other.help.to_string()),
                );
                ok = false;
            }
        }
        ok
    }
}

/// Whether directory `dir` holds `file`: on real paths where both exist,
/// else on the paths as written.
pub(super) fn holds(dir: &Path, file: &Path) -> bool {
    match (dir.canonicalize(), file.canonicalize()) {
        (Ok(dir), Ok(file)) => file.starts_with(dir),
        _ => file.starts_with(dir),
    }
}
