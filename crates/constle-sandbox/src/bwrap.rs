//! The `bwrap` invocation.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::layout::{
    DEFAULT_PATH, ETC_PATHS, EXE_INSIDE, HOSTNAME, INIT_SUBCOMMAND, ROOTFS_SKIPPED, SYSTEM_DIRS,
};
use crate::spec::CheckedSpec;
use crate::{SandboxError, SandboxSpec, wire};

/// The `bwrap` command that runs `spec`:
/// `bwrap <args> -- /run/constle/constle sandbox-init <relays> -- <command…>`.
///
/// The spec is checked first (see [`SandboxError`]): the work directory
/// exists and is a directory that may be made writable, the rootfs (if any)
/// is a directory, every relay socket exists and is a socket, the constle
/// executable is a file outside the work directory.
///
/// The command's environment is cleared (`bwrap` needs none) and its stdin
/// is `/dev/null`; stdout and stderr are inherited, which the caller may
/// change. The agent's stdin is `/dev/null` whatever the caller does.
///
/// # Spawning: `--die-with-parent` is per thread
///
/// `bwrap --die-with-parent` uses `PR_SET_PDEATHSIG`, which fires when the
/// *thread* that spawned `bwrap` exits, not when its process does. Spawn the
/// command from a thread that lives as long as the run: the main thread, or a
/// tokio runtime worker (`tokio::process::Command::from(cmd).spawn()` in an
/// async task). Never from `spawn_blocking` or another short-lived thread:
/// tokio retires idle blocking threads after ten seconds, and the sandbox
/// would be killed with it. When the spawning process dies (even by
/// `SIGKILL`), the sandbox and every process in it are killed. Killing the
/// `bwrap` process does the same.
pub fn bwrap_command(spec: &SandboxSpec) -> Result<Command, SandboxError> {
    let checked = spec.check()?;
    let mut cmd = Command::new(find_bwrap()?);
    cmd.args(bwrap_args(&checked))
        .env_clear()
        .stdin(Stdio::null());
    Ok(cmd)
}

/// The `bwrap` on `PATH`, else `/usr/bin/bwrap`.
fn find_bwrap() -> Result<PathBuf, SandboxError> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join("bwrap"))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| Some(PathBuf::from("/usr/bin/bwrap")).filter(|p| p.is_file()))
        .ok_or(SandboxError::BwrapNotFound)
}

struct Args(Vec<OsString>);

impl Args {
    fn push(&mut self, parts: &[&OsStr]) {
        self.0.extend(parts.iter().map(|p| p.to_os_string()));
    }
    fn flag(&mut self, flag: &str) {
        self.0.push(flag.into());
    }
    fn ro_bind(&mut self, src: &Path, dest: &Path) {
        self.push(&["--ro-bind".as_ref(), src.as_os_str(), dest.as_os_str()]);
    }
    fn symlink(&mut self, target: &Path, at: &Path) {
        self.push(&["--symlink".as_ref(), target.as_os_str(), at.as_os_str()]);
    }
}

/// The arguments after `bwrap`.
pub(crate) fn bwrap_args(spec: &CheckedSpec<'_>) -> Vec<OsString> {
    let mut a = Args(Vec::with_capacity(96));

    // Namespaces: network (loopback only), pid, ipc, uts, cgroup, mount and
    // user; no nested user namespaces (so no way to regain capabilities).
    a.flag("--unshare-all");
    a.flag("--unshare-user");
    a.flag("--disable-userns");
    a.flag("--die-with-parent");
    // A new session: no controlling terminal, so no TIOCSTI into the host's.
    a.flag("--new-session");
    a.push(&["--cap-drop".as_ref(), "ALL".as_ref()]);
    a.push(&["--hostname".as_ref(), HOSTNAME.as_ref()]);

    a.flag("--clearenv");
    for (name, value) in &spec.env {
        a.push(&["--setenv".as_ref(), name.as_ref(), value.as_ref()]);
    }
    if !spec.env.contains_key("PATH") {
        a.push(&["--setenv".as_ref(), "PATH".as_ref(), DEFAULT_PATH.as_ref()]);
    }

    match &spec.rootfs {
        Some(rootfs) => mount_rootfs(&mut a, rootfs),
        None => mount_system(&mut a),
    }
    a.push(&["--proc".as_ref(), "/proc".as_ref()]);
    a.push(&["--dev".as_ref(), "/dev".as_ref()]);
    a.push(&["--tmpfs".as_ref(), "/tmp".as_ref()]);

    a.ro_bind(spec.constle_exe, Path::new(EXE_INSIDE));
    for relay in &spec.relays {
        a.ro_bind(relay.host_socket, &relay.inside);
    }

    let workdir = spec.workdir.as_os_str();
    a.push(&["--bind".as_ref(), workdir, workdir]);
    // The root itself (a tmpfs holding the mount points) becomes read-only
    // last, once every mount point exists.
    a.push(&["--remount-ro".as_ref(), "/".as_ref()]);
    a.push(&["--chdir".as_ref(), workdir]);

    a.flag("--");
    a.flag(EXE_INSIDE);
    a.flag(INIT_SUBCOMMAND);
    for relay in &spec.relays {
        a.flag(wire::RELAY_FLAG);
        a.0.push(wire::encode_relay(relay.name, relay.listen, &relay.inside));
    }
    a.flag("--");
    a.0.extend(spec.command.iter().map(OsString::from));
    a.0
}

/// The host's system directories and the chosen parts of `/etc`, read-only.
fn mount_system(a: &mut Args) {
    for dir in SYSTEM_DIRS {
        let path = Path::new(dir);
        let Ok(meta) = path.symlink_metadata() else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(target) = path.read_link() {
                a.symlink(&target, path);
            }
        } else if meta.is_dir() {
            a.ro_bind(path, path);
        }
    }
    for etc in ETC_PATHS {
        let path = Path::new(etc);
        if path.exists() {
            a.ro_bind(path, path);
        }
    }
}

/// Every top-level entry of the rootfs, read-only (links recreated), except
/// the ones the sandbox brings itself. Mounting entries one by one rather
/// than the rootfs at `/` means the rootfs need not hold the sandbox's mount
/// points (`/run/constle`, `/tmp`, the work directory's parents).
fn mount_rootfs(a: &mut Args, rootfs: &Path) {
    let mut entries: Vec<_> = match std::fs::read_dir(rootfs) {
        Ok(dir) => dir.filter_map(Result::ok).collect(),
        Err(_) => Vec::new(),
    };
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if ROOTFS_SKIPPED.iter().any(|s| OsStr::new(s) == name) {
            continue;
        }
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        let inside = Path::new("/").join(&name);
        if file_type.is_symlink() {
            if let Ok(target) = entry.path().read_link() {
                a.symlink(&target, &inside);
            }
        } else if file_type.is_dir() || file_type.is_file() {
            a.ro_bind(&entry.path(), &inside);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::Relay;

    #[test]
    fn refuses_bad_specs() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("exe");
        std::fs::write(&exe, b"").unwrap();
        let work = tempfile::tempdir().unwrap();
        let base = SandboxSpec {
            command: vec!["true".into()],
            workdir: work.path().to_path_buf(),
            env: BTreeMap::new(),
            rootfs: None,
            relays: vec![],
            constle_exe: exe.clone(),
        };
        base.check().unwrap();

        let refuse = |f: &dyn Fn(&mut SandboxSpec)| {
            let mut s = base.clone();
            f(&mut s);
            s.check().unwrap_err()
        };
        assert!(matches!(
            refuse(&|s| s.command.clear()),
            SandboxError::EmptyCommand
        ));
        assert!(matches!(
            refuse(&|s| s.command = vec!["a\0b".into()]),
            SandboxError::NulByte { .. }
        ));
        assert!(matches!(
            refuse(&|s| {
                s.env.insert("A=B".into(), "x".into());
            }),
            SandboxError::InvalidEnvName { .. }
        ));
        assert!(matches!(
            refuse(&|s| s.workdir = "relative".into()),
            SandboxError::WorkdirNotAbsolute { .. }
        ));
        assert!(matches!(
            refuse(&|s| s.workdir = work.path().join("missing")),
            SandboxError::Workdir { .. }
        ));
        assert!(matches!(
            refuse(&|s| s.workdir = exe.clone()),
            SandboxError::WorkdirNotDir { .. }
        ));
        for dir in ["/", "/usr", "/etc", "/tmp", "/proc/self", "/dev"] {
            assert!(
                matches!(
                    refuse(&|s| s.workdir = dir.into()),
                    SandboxError::WorkdirForbidden { .. }
                ),
                "{dir}"
            );
        }
        assert!(matches!(
            refuse(&|s| s.rootfs = Some(exe.clone())),
            SandboxError::Rootfs { .. }
        ));
        assert!(matches!(
            refuse(&|s| s.rootfs = Some("/".into())),
            SandboxError::Rootfs { .. }
        ));
        assert!(matches!(
            refuse(&|s| s.constle_exe = dir.path().join("missing")),
            SandboxError::ConstleExe { .. }
        ));
        let in_work = work.path().join("constle");
        std::fs::write(&in_work, b"").unwrap();
        assert!(matches!(
            refuse(&|s| s.constle_exe = in_work.clone()),
            SandboxError::ConstleExe { .. }
        ));

        let sock_path = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
        let relay = |name: &str, listen: &str, path: &Path| Relay {
            name: name.into(),
            listen: listen.parse().unwrap(),
            host_socket: path.to_path_buf(),
        };
        let mut ok = base.clone();
        ok.relays = vec![
            relay("proxy", "127.0.0.1:3128", &sock_path),
            relay("mcp-a", "127.0.0.1:3129", &sock_path),
        ];
        ok.check().unwrap();
        let with = |relays: Vec<Relay>| {
            let mut s = base.clone();
            s.relays = relays;
            s.check().unwrap_err()
        };
        assert!(matches!(
            with(vec![relay("Proxy", "127.0.0.1:3128", &sock_path)]),
            SandboxError::InvalidRelayName { .. }
        ));
        assert!(matches!(
            with(vec![
                relay("a", "127.0.0.1:3128", &sock_path),
                relay("a", "127.0.0.1:3129", &sock_path)
            ]),
            SandboxError::DuplicateRelay { what: "name", .. }
        ));
        assert!(matches!(
            with(vec![
                relay("a", "127.0.0.1:3128", &sock_path),
                relay("b", "127.0.0.1:3128", &sock_path)
            ]),
            SandboxError::DuplicateRelay {
                what: "listen address",
                ..
            }
        ));
        assert!(matches!(
            with(vec![relay("a", "10.0.0.1:3128", &sock_path)]),
            SandboxError::InvalidRelayAddress { .. }
        ));
        assert!(matches!(
            with(vec![relay("a", "127.0.0.1:80", &sock_path)]),
            SandboxError::InvalidRelayAddress { .. }
        ));
        assert!(matches!(
            with(vec![relay("a", "127.0.0.1:3128", &exe)]),
            SandboxError::HostSocket { .. }
        ));
        assert!(matches!(
            with(vec![relay("a", "127.0.0.1:3128", &dir.path().join("none"))]),
            SandboxError::HostSocket { .. }
        ));
    }

    #[test]
    fn rootfs_needs_workdir_mount_point() {
        let rootfs = tempfile::tempdir().unwrap();
        // Outside /tmp (which a rootfs never provides), so the workdir's
        // top-level directory is one the rootfs could hold. The build
        // itself may live under /tmp (a CI clone), hence the fallback.
        let exe = std::env::current_exe().unwrap();
        let outside_tmp = [exe.parent().unwrap(), Path::new("/var/tmp")]
            .into_iter()
            .find(|dir| dir.canonicalize().is_ok_and(|d| !d.starts_with("/tmp")))
            .expect("a writable directory outside /tmp");
        let host = tempfile::tempdir_in(outside_tmp).unwrap();
        let exe = host.path().join("exe");
        std::fs::write(&exe, b"").unwrap();
        let work = host.path().join("work");
        std::fs::create_dir(&work).unwrap();
        // The workdir's top-level directory exists in the rootfs but the
        // workdir itself does not.
        let resolved = work.canonicalize().unwrap();
        let top = resolved.components().nth(1).unwrap().as_os_str().to_owned();
        let mut spec = SandboxSpec {
            command: vec!["true".into()],
            workdir: work.clone(),
            env: BTreeMap::new(),
            rootfs: Some(rootfs.path().to_path_buf()),
            relays: vec![],
            constle_exe: exe,
        };
        assert_ne!(top, "tmp");
        // Not in the rootfs at all: the sandbox creates the mount point.
        spec.check().unwrap();
        std::fs::create_dir(rootfs.path().join(&top)).unwrap();
        assert!(matches!(
            spec.check().unwrap_err(),
            SandboxError::WorkdirMissingInRootfs { .. }
        ));
        let rel = resolved.strip_prefix("/").unwrap();
        std::fs::create_dir_all(rootfs.path().join(rel)).unwrap();
        spec.check().unwrap();
        spec.rootfs = Some(rootfs.path().join("missing"));
        assert!(matches!(
            spec.check().unwrap_err(),
            SandboxError::Rootfs { .. }
        ));
    }

    #[test]
    fn exposes() {
        let host = tempfile::tempdir().unwrap();
        let work = host.path().join("work");
        let home = host.path().join("home");
        std::fs::create_dir(&work).unwrap();
        std::fs::create_dir(&home).unwrap();
        let spec = SandboxSpec {
            command: vec!["true".into()],
            workdir: work.clone(),
            env: BTreeMap::new(),
            rootfs: None,
            relays: vec![],
            constle_exe: "/usr/bin/true".into(),
        };
        assert!(spec.exposes(&work.join("x")));
        assert!(spec.exposes(Path::new("/usr/lib")));
        assert!(spec.exposes(Path::new("/etc/passwd")));
        assert!(!spec.exposes(Path::new("/etc/shadow")));
        assert!(!spec.exposes(Path::new("/etc/ssl/private")));
        assert!(!spec.exposes(&home.join("keys")));
        assert!(!spec.exposes(Path::new("/root")));
    }

    #[test]
    fn argument_order() {
        let work = tempfile::tempdir().unwrap();
        let spec = SandboxSpec {
            command: vec!["python3".into(), "-c".into(), "print(1)".into()],
            workdir: work.path().to_path_buf(),
            env: BTreeMap::from([("HOME".into(), "/nonexistent".into())]),
            rootfs: None,
            relays: vec![],
            constle_exe: "/usr/bin/true".into(),
        };
        let args: Vec<String> = bwrap_args(&spec.check().unwrap())
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let pos = |s: &str| args.iter().position(|a| a == s).unwrap();
        // the default PATH is added, the host's is not
        let path_at = args.iter().position(|a| a == "PATH").unwrap();
        assert_eq!(args[path_at + 1], DEFAULT_PATH);
        // /tmp before the workdir (which may lie in it), the root read-only last
        assert!(pos("--tmpfs") < pos("--bind"));
        assert!(pos("--bind") < pos("--remount-ro"));
        let sep = pos("--");
        assert_eq!(&args[sep + 1..sep + 3], [EXE_INSIDE, INIT_SUBCOMMAND]);
        assert_eq!(&args[args.len() - 4..], ["--", "python3", "-c", "print(1)"]);
        for flag in [
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
        ] {
            assert!(pos(flag) < sep, "{flag}");
        }
        assert!(!args.iter().any(|a| a == "--share-net"));
        assert!(!args.iter().any(|a| a.starts_with("/etc/shadow")));
    }
}
