//! [`SandboxSpec`] and [`Relay`], and the checks that run before any `bwrap`
//! argument is written.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::net::SocketAddrV4;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};

use crate::SandboxError;
use crate::layout::{self, RUN_DIR};

/// One door out of the sandbox: a TCP listener inside, forwarding every
/// connection to a Unix socket on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relay {
    /// What the relay is for (`"proxy"`, `"mcp-accounting"`): 1 to 32 of
    /// `a-z`, `0-9`, `-`, starting with a letter or digit. It names the
    /// socket inside the sandbox (`/run/constle/<name>.sock`) and appears in
    /// error messages.
    pub name: String,
    /// Where the relay listens inside the sandbox: a loopback address
    /// (normally `127.0.0.1`) and a port of at least 1024 (nothing in the
    /// sandbox holds `CAP_NET_BIND_SERVICE`). The sandbox has its own network
    /// namespace, so the port never clashes with the host's.
    pub listen: SocketAddrV4,
    /// The Unix socket the caller has bound on the host. Only this socket
    /// file is mounted into the sandbox (read-only, which still allows
    /// `connect()`), not the directory holding it.
    pub host_socket: PathBuf,
}

/// Everything that decides what the agent's process sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxSpec {
    /// The agent's argv. `command[0]` is looked up in the sandbox's `PATH`
    /// when it has no `/`.
    pub command: Vec<String>,
    /// The work directory: absolute, existing, the only writable host path
    /// and the agent's current directory. Symbolic links are resolved; the
    /// agent sees the resolved path.
    pub workdir: PathBuf,
    /// Exactly the agent's environment (the caller adds `HTTPS_PROXY` and
    /// friends). Nothing from the host is inherited. One addition: without a
    /// `PATH` here, the agent gets [`DEFAULT_PATH`](crate::DEFAULT_PATH).
    pub env: BTreeMap<String, String>,
    /// A directory to use as the sandbox's `/` instead of the host's system
    /// directories.
    pub rootfs: Option<PathBuf>,
    /// The ways out.
    pub relays: Vec<Relay>,
    /// The `constle` executable, mounted read-only at
    /// `/run/constle/constle` and started as the sandbox's first process
    /// (`constle sandbox-init`), which runs the relays and the agent.
    pub constle_exe: PathBuf,
}

/// A spec whose every part was checked; paths are resolved.
#[derive(Debug)]
pub(crate) struct CheckedSpec<'a> {
    pub command: &'a [String],
    pub workdir: PathBuf,
    pub env: BTreeMap<&'a str, &'a str>,
    pub rootfs: Option<PathBuf>,
    pub relays: Vec<CheckedRelay<'a>>,
    pub constle_exe: &'a Path,
}

#[derive(Debug)]
pub(crate) struct CheckedRelay<'a> {
    pub name: &'a str,
    pub listen: SocketAddrV4,
    pub host_socket: &'a Path,
    /// Where the socket appears inside the sandbox.
    pub inside: PathBuf,
}

/// Top-level host directories that may not be the work directory: binding
/// one of them writable would expose or shadow far more than a project.
const FORBIDDEN_WORKDIRS: &[&str] = &[
    "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys",
    "tmp", "usr", "var",
];

/// Where the work directory may not lie at all: the sandbox mounts its own
/// `/proc`, `/dev` and `/run/constle`, and has no `/sys`.
const FORBIDDEN_WORKDIR_PREFIXES: &[&str] = &["/proc", "/dev", "/sys", RUN_DIR];

impl SandboxSpec {
    pub(crate) fn check(&self) -> Result<CheckedSpec<'_>, SandboxError> {
        if self.command.is_empty() {
            return Err(SandboxError::EmptyCommand);
        }
        for (i, arg) in self.command.iter().enumerate() {
            if arg.contains('\0') {
                return Err(SandboxError::NulByte {
                    what: format!("command argument {i}"),
                });
            }
        }
        if self.command[0].is_empty() {
            return Err(SandboxError::EmptyCommand);
        }

        let mut env = BTreeMap::new();
        for (name, value) in &self.env {
            if name.is_empty() || name.contains('=') {
                return Err(SandboxError::InvalidEnvName { name: name.clone() });
            }
            if name.contains('\0') {
                return Err(SandboxError::NulByte {
                    what: format!("environment variable name {name:?}"),
                });
            }
            if value.contains('\0') {
                return Err(SandboxError::NulByte {
                    what: format!("value of {name}"),
                });
            }
            env.insert(name.as_str(), value.as_str());
        }

        let rootfs = match &self.rootfs {
            None => None,
            Some(path) => Some(check_rootfs(path)?),
        };
        let workdir = check_workdir(&self.workdir, rootfs.as_deref())?;
        let relays = check_relays(&self.relays)?;
        check_exe(&self.constle_exe, &workdir)?;

        Ok(CheckedSpec {
            command: &self.command,
            workdir,
            env,
            rootfs,
            relays,
            constle_exe: &self.constle_exe,
        })
    }

    /// Whether the host path `path` would be visible inside the sandbox
    /// built from this spec: under the work directory, under the rootfs, or
    /// under one of the system paths mounted read-only.
    ///
    /// Use it to make sure secrets stay out, for instance that
    /// `$CONSTLE_HOME` is not inside the work directory. Paths that cannot
    /// be resolved are judged as written.
    pub fn exposes(&self, path: &Path) -> bool {
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let under = |root: &Path| {
            let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
            path.starts_with(root)
        };
        if under(&self.workdir) || under(&self.constle_exe) {
            return true;
        }
        if self.relays.iter().any(|r| under(&r.host_socket)) {
            return true;
        }
        match &self.rootfs {
            Some(rootfs) => under(rootfs),
            None => layout::SYSTEM_DIRS
                .iter()
                .chain(layout::ETC_PATHS)
                .any(|p| under(Path::new(p))),
        }
    }
}

fn check_rootfs(path: &Path) -> Result<PathBuf, SandboxError> {
    let err = |reason: String| SandboxError::Rootfs {
        path: path.to_path_buf(),
        reason,
    };
    if !path.is_absolute() {
        return Err(err("it is not an absolute path".into()));
    }
    let resolved = path
        .canonicalize()
        .map_err(|e| err(format!("{e}; create it first")))?;
    if !resolved.is_dir() {
        return Err(err("it is not a directory".into()));
    }
    if resolved == Path::new("/") {
        return Err(err(
            "it is the host's own root; leave rootfs out to use the host's system directories"
                .into(),
        ));
    }
    Ok(resolved)
}

fn check_workdir(path: &Path, rootfs: Option<&Path>) -> Result<PathBuf, SandboxError> {
    if !path.is_absolute() {
        return Err(SandboxError::WorkdirNotAbsolute {
            path: path.to_path_buf(),
        });
    }
    let resolved = path
        .canonicalize()
        .map_err(|source| SandboxError::Workdir {
            path: path.to_path_buf(),
            source,
        })?;
    if !resolved.is_dir() {
        return Err(SandboxError::WorkdirNotDir { path: resolved });
    }
    let forbidden = |reason| SandboxError::WorkdirForbidden {
        path: resolved.clone(),
        reason,
    };
    let normals: Vec<&OsStr> = resolved
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let Some(top) = normals.first() else {
        return Err(forbidden("it is the host's root directory"));
    };
    if normals.len() == 1 && FORBIDDEN_WORKDIRS.iter().any(|f| OsStr::new(f) == *top) {
        return Err(forbidden(
            "it is a system directory; use a project directory instead",
        ));
    }
    if FORBIDDEN_WORKDIR_PREFIXES
        .iter()
        .any(|p| resolved.starts_with(p))
    {
        return Err(forbidden("the sandbox mounts its own file systems there"));
    }
    if let Some(rootfs) = rootfs {
        if rootfs.starts_with(&resolved) {
            return Err(forbidden("it contains the rootfs"));
        }
        // The top-level entries of the rootfs are mounted read-only, so a
        // mount point below one of them must already exist in the rootfs.
        let top_in_rootfs = rootfs.join(top);
        if !layout::ROOTFS_SKIPPED.iter().any(|s| OsStr::new(s) == *top)
            && std::fs::symlink_metadata(&top_in_rootfs).is_ok()
        {
            let relative: PathBuf = normals.iter().collect();
            let inside = rootfs.join(relative);
            if !inside.is_dir() {
                return Err(SandboxError::WorkdirMissingInRootfs {
                    path: resolved.clone(),
                    top: Path::new("/").join(top),
                    missing: inside,
                });
            }
        }
    }
    Ok(resolved)
}

/// Relay names: 1 to 32 of `a-z`, `0-9`, `-`, starting with a letter or
/// digit. They become file names inside the sandbox.
pub(crate) fn valid_relay_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
}

fn check_relays(relays: &[Relay]) -> Result<Vec<CheckedRelay<'_>>, SandboxError> {
    let mut names = BTreeSet::new();
    let mut addrs = BTreeSet::new();
    let mut checked = Vec::with_capacity(relays.len());
    for relay in relays {
        if !valid_relay_name(&relay.name) {
            return Err(SandboxError::InvalidRelayName {
                name: relay.name.clone(),
            });
        }
        if !names.insert(relay.name.as_str()) {
            return Err(SandboxError::DuplicateRelay {
                what: "name",
                value: relay.name.clone(),
            });
        }
        let bad_addr = |reason| SandboxError::InvalidRelayAddress {
            name: relay.name.clone(),
            listen: relay.listen,
            reason,
        };
        if !relay.listen.ip().is_loopback() {
            return Err(bad_addr("the sandbox has only loopback: use 127.0.0.1"));
        }
        if relay.listen.port() < 1024 {
            return Err(bad_addr(
                "nothing in the sandbox may bind a port below 1024: use 1024 or above",
            ));
        }
        if !addrs.insert(relay.listen) {
            return Err(SandboxError::DuplicateRelay {
                what: "listen address",
                value: relay.listen.to_string(),
            });
        }
        let bad_socket = |reason: String| SandboxError::HostSocket {
            name: relay.name.clone(),
            path: relay.host_socket.clone(),
            reason,
        };
        if !relay.host_socket.is_absolute() {
            return Err(bad_socket("it is not an absolute path".into()));
        }
        let meta = std::fs::metadata(&relay.host_socket).map_err(|e| bad_socket(e.to_string()))?;
        if !meta.file_type().is_socket() {
            return Err(bad_socket("it is not a Unix socket".into()));
        }
        checked.push(CheckedRelay {
            name: &relay.name,
            listen: relay.listen,
            host_socket: &relay.host_socket,
            inside: layout::relay_socket_inside(&relay.name),
        });
    }
    Ok(checked)
}

fn check_exe(path: &Path, workdir: &Path) -> Result<(), SandboxError> {
    let err = |reason: String| SandboxError::ConstleExe {
        path: path.to_path_buf(),
        reason,
    };
    if !path.is_absolute() {
        return Err(err("it is not an absolute path".into()));
    }
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if !meta.is_file() {
        return Err(err("it is not a regular file".into()));
    }
    // The host runs this file too: the agent must not be able to change it.
    if path.canonicalize().is_ok_and(|p| p.starts_with(workdir)) {
        return Err(err(
            "it lies inside the workdir, where the agent could change it".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_names() {
        for ok in ["proxy", "mcp-accounting", "a", "0x", &"a".repeat(32)] {
            assert!(valid_relay_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "A",
            "a b",
            "a/b",
            "..",
            "a.sock",
            "é",
            &"a".repeat(33),
        ] {
            assert!(!valid_relay_name(bad), "{bad}");
        }
    }
}
