//! [`check_config`]: a configuration through the real `squid -k parse`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::squid::{CHILD_PATH, squid_program};

/// What `squid -k parse` said about a configuration beyond its start-up
/// chatter: every ERROR, WARNING, FATAL and unlabelled complaint, one line
/// each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseComplaints {
    /// The configuration checked.
    pub config: PathBuf,
    /// Squid's lines (and a line for a non-zero exit or a failure to run it).
    pub complaints: Vec<String>,
}

impl fmt::Display for ParseComplaints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "squid -k parse complained about {} ({} line(s)):",
            self.config.display(),
            self.complaints.len()
        )?;
        for line in &self.complaints {
            write!(f, "\n  {line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ParseComplaints {}

/// Runs `squid -k parse -f squid_conf_path` and returns every line of its
/// output that is not start-up chatter.
///
/// Squid exits 0 after ERROR and WARNING lines, and some complaints carry
/// neither word (`Warning: empty ACL`, `unrecognized:`, `ACL not found`,
/// `SECURITY NOTICE`); an invalid regex is skipped with an ERROR and exit 0,
/// silently weakening its ACL. So the check is by exclusion: the only
/// lines accepted are the known chatter (`Startup: …`, `Processing
/// Configuration File: …`, `Processing: <the config line>`, `Initializing
/// https:// proxy context`). Anything else, and a non-zero exit, is a
/// complaint.
///
/// Blocking; about 25 ms. Files the configuration names (the allowlist, the
/// hosts file) must exist, as Squid reads them while parsing.
pub fn check_config(squid_conf_path: &Path) -> Result<(), ParseComplaints> {
    let config = squid_conf_path.to_path_buf();
    let program = squid_program();
    let out = match Command::new(&program)
        .args(["-k", "parse", "-f"])
        .arg(squid_conf_path)
        .env_clear()
        .env("PATH", CHILD_PATH)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            return Err(ParseComplaints {
                config,
                complaints: vec![format!(
                    "cannot run {}: {e} (is the Debian package `squid` installed?)",
                    program.display()
                )],
            });
        }
    };
    let mut complaints: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .chain(String::from_utf8_lossy(&out.stdout).lines())
        .filter(|line| !line.trim().is_empty() && !is_chatter(line))
        .map(str::to_owned)
        .collect();
    if !out.status.success() {
        complaints.push(format!("squid -k parse exited with {}", out.status));
    }
    if complaints.is_empty() {
        Ok(())
    } else {
        Err(ParseComplaints { config, complaints })
    }
}

/// Whether `line` is one of the lines a clean `squid -k parse` prints.
fn is_chatter(line: &str) -> bool {
    let Some(message) = strip_timestamp(line) else {
        return false;
    };
    message.starts_with("Startup: ")
        || message.starts_with("Processing Configuration File: ")
        || message.starts_with("Processing: ")
        || message == "Initializing https:// proxy context"
}

/// `2026/11/29 21:05:41| message` → `message`.
fn strip_timestamp(line: &str) -> Option<&str> {
    let (stamp, message) = line.split_once("| ")?;
    let shape = stamp.len() == 19
        && stamp.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'/',
            10 => b == b' ',
            13 | 16 => b == b':',
            _ => b.is_ascii_digit(),
        });
    shape.then_some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatter_and_complaints() {
        for line in [
            "2026/11/29 21:05:41| Startup: Initialized Authentication.",
            "2026/11/29 21:05:41| Processing Configuration File: squid.conf (depth 0)",
            "2026/11/29 21:05:41| Processing: http_port 127.0.0.1:39128",
            "2026/11/29 21:05:41| Initializing https:// proxy context",
        ] {
            assert!(is_chatter(line), "{line}");
        }
        for line in [
            "2026/11/29 21:05:41| ERROR: Obsolete directive: dns_v4_first",
            "2026/11/29 21:05:41| WARNING: (B) '::/0' is a subnetwork of (A) '::/0'",
            "2026/11/29 21:05:41| Warning: empty ACL: acl x dstdomain -n \"/x\"",
            "2026/11/29 21:05:41| aclParseAclLine: ACL not found: y",
            "2026/11/29 21:05:41| SECURITY NOTICE: auto-converting deprecated",
            "Processing: http_port 127.0.0.1:39128",
            "2026/11/29 21:05| Processing: x",
            "FATAL: Bungled squid.conf line 3",
        ] {
            assert!(!is_chatter(line), "{line}");
        }
    }
}
