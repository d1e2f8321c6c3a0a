//! Host paths no sandbox may see (`$CONSTLE_HOME`, the Agentfile, a hosts
//! file), and the checks that keep them out of what a sandbox mounts.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::SandboxError;
use crate::resolve::real_path;

/// A host path the sandbox must never see: `$CONSTLE_HOME`, the Agentfile,
/// a hosts file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Private {
    /// What it is, for error messages: `"CONSTLE_HOME (keys and logs)"`.
    pub what: String,
    /// Where it is; it need not exist yet.
    #[serde(with = "crate::plan::path")]
    pub path: PathBuf,
}

/// Refuses a directory the sandbox would mount (`dir`, called `role`) that
/// contains or lies inside one of the private paths.
pub(crate) fn check_private(
    role: &'static str,
    dir: &Path,
    private: &[Private],
) -> Result<(), SandboxError> {
    for p in private {
        let real = real_path(&p.path).map_err(|e| SandboxError::Private {
            what: p.what.clone(),
            path: p.path.clone(),
            reason: e.to_string(),
        })?;
        let relation = if real == dir {
            "is"
        } else if real.starts_with(dir) {
            "contains"
        } else if dir.starts_with(&real) {
            "lies inside"
        } else {
            continue;
        };
        return Err(SandboxError::Exposes {
            role,
            dir: dir.to_path_buf(),
            relation,
            what: p.what.clone(),
            private: real,
        });
    }
    Ok(())
}

/// Refuses a private file with more than one name: one of the others may
/// lie where the agent can write (an earlier run could have linked it into
/// its work directory), and no check of this name would see it.
pub(crate) fn check_single_link(private: &[Private]) -> Result<(), SandboxError> {
    for p in private {
        let Ok(meta) = std::fs::metadata(&p.path) else {
            continue;
        };
        if meta.is_file() && meta.nlink() > 1 {
            return Err(SandboxError::HardLinked {
                what: p.what.clone(),
                path: p.path.clone(),
                links: meta.nlink(),
            });
        }
    }
    Ok(())
}
