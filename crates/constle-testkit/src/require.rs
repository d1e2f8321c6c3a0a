//! Whether an end-to-end test can run here.

use std::path::PathBuf;

/// The variable that turns skips into failures: `CONSTLE_E2E=require`.
pub const E2E_ENV: &str = "CONSTLE_E2E";

/// Directories searched for system tools besides `PATH` (a root shell's
/// `PATH` does not always hold the `sbin` ones).
const EXTRA_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// Whether this test may use root, network namespaces, `ip`, Squid and
/// `setpriv`: the egress end-to-end tests' needs. See [`require_root`].
pub fn require_e2e(test: &str) -> bool {
    require_root(test, &["ip", "squid", "setpriv"])
}

/// Whether this test may use root (network namespaces, veth pairs) and
/// `tools`. See [`require_tools`] for what happens when it may not.
pub fn require_root(test: &str, tools: &[&str]) -> bool {
    require(test, true, tools)
}

/// Whether `tools` are installed (found on `PATH` or in the system
/// directories).
///
/// When something is missing: with `CONSTLE_E2E=require` this panics (CI
/// must not count a skip as a pass); otherwise it prints
/// `skipped: <test>: <what is missing>` to stderr and returns false, and the
/// test should return at once.
pub fn require_tools(test: &str, tools: &[&str]) -> bool {
    require(test, false, tools)
}

fn require(test: &str, root: bool, tools: &[&str]) -> bool {
    let mut missing = Vec::new();
    if root && !nix::unistd::geteuid().is_root() {
        missing.push("root (network namespaces and veth pairs)".to_owned());
    }
    for tool in tools {
        if find_tool(tool).is_none() {
            missing.push(format!("`{tool}`"));
        }
    }
    require_nothing_missing(test, &missing)
}

/// Whether `test` can run, given what it found `missing` (phrases such as
/// "Node 22.21 or newer", for needs [`require_tools`] cannot check by a
/// tool's name): true when nothing is; otherwise the same as
/// [`require_tools`], a panic with `CONSTLE_E2E=require` and a printed skip
/// without.
#[allow(clippy::print_stderr)]
pub fn require_nothing_missing(test: &str, missing: &[String]) -> bool {
    if missing.is_empty() {
        return true;
    }
    let reason = format!("{test}: needs {}", missing.join(", "));
    if std::env::var(E2E_ENV).is_ok_and(|v| v == "require") {
        panic!("{E2E_ENV}=require, but this test cannot run here: {reason}");
    }
    eprintln!("skipped: {reason}");
    false
}

/// Where an executable called `name` is: `PATH`, then the usual system
/// directories.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}
