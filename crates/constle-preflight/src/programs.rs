//! The `bwrap` and `squid` checks: each found exactly where a run looks
//! for it (`constle_sandbox::find_bwrap`, `constle_egress::squid_version`),
//! and its version.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::classify;
use crate::report::{Check, CheckId};

/// The oldest bubblewrap that takes the sandbox's arguments.
const MIN_BWRAP: (u32, u32) = (0, 8);

/// The `bwrap` check: always required.
pub(crate) fn bwrap() -> Check {
    let found = constle_sandbox::find_bwrap()
        .map_err(|e| e.to_string())
        .and_then(|path| Ok((version(&path)?, path)));
    let found = match &found {
        Ok((version, path)) => Ok((path.as_path(), version.as_str())),
        Err(err) => Err(err.clone()),
    };
    classify::program("bwrap", "bubblewrap", found, Some(MIN_BWRAP)).check(CheckId::Bwrap, true)
}

/// The first line of `bwrap --version`.
fn version(bwrap: &Path) -> Result<String, String> {
    let out = Command::new(bwrap)
        .arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned())
}

/// The `squid` check: required when the run starts the egress proxy.
pub(crate) fn squid(required: bool) -> Check {
    let found = constle_egress::squid_version();
    let found = match &found {
        Ok((path, version)) => Ok((path.as_path(), version.as_str())),
        Err(err) => Err(format!("cannot run it: {err}")),
    };
    classify::program("squid", "squid", found, None).check(CheckId::Squid, required)
}
