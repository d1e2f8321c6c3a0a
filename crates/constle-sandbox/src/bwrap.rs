//! The `bwrap` invocation: [`sandbox_command`], which the caller spawns, and
//! the arguments the launcher gives `bwrap` once it holds every descriptor.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::descriptors::{Descriptors, RootfsEntry};
use crate::init::STDIO_FLAG;
use crate::layout::{
    AGENT_HOME, AGENT_ID, DEFAULT_PATH, ETC_PATHS, EXE_INSIDE, HOSTNAME, INIT_SUBCOMMAND,
    LAUNCH_SUBCOMMAND, PROC_MASKED, PROC_READ_ONLY, STDIO_INSIDE, SYSTEM_DIRS,
};
use crate::plan::{PLAN_ENV, Plan};
use crate::spec::CheckedSpec;
use crate::{SandboxError, SandboxSpec};

/// The command that runs `spec`'s sandbox: the constle executable as
/// `constle sandbox-exec` (the launcher), which checks the spec again,
/// opens what the sandbox mounts, drops root if it has it, and replaces
/// itself with `bwrap <args> -- /run/constle/constle sandbox-init
/// [--stdio /run/constle/stdio] -- <command…>`.
///
/// The spec is checked here first (see [`SandboxError`]), so a spec that
/// cannot run is refused before anything starts: the work directory exists,
/// is a directory that may be made writable and shows nothing private, the
/// rootfs (if any) likewise, every host socket exists and is a socket, the
/// constle executable is a file outside the work directory. The launcher
/// repeats every check on the objects it then mounts, so a path swapped in
/// between gains nothing; if its check fails it prints why and exits with
/// [`EXIT_SANDBOX_FAILED`](crate::EXIT_SANDBOX_FAILED).
///
/// The command's environment holds only the launcher's plan, and its stdin
/// is `/dev/null`; stdout and stderr are inherited, which the caller may
/// change (`constle run` reads them through pipes). The agent's stdin is
/// `/dev/null` whatever the caller does.
///
/// # A lifeline
///
/// Give the command's stdin the read end of a pipe whose write end the
/// caller keeps and never writes to: when that end closes (the caller
/// dropped it, or died however it died), the sandbox ends. It closes the
/// gap the parent-death signal below leaves while bwrap starts.
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
/// launched process (which becomes `bwrap`) does the same.
pub fn sandbox_command(spec: &SandboxSpec) -> Result<Command, SandboxError> {
    drop(spec.check()?);
    let plan = Plan {
        spec: spec.clone(),
        bwrap: find_bwrap()?,
    };
    let plan = plan.to_json().map_err(|e| SandboxError::Plan {
        reason: e.to_string(),
    })?;
    let mut cmd = Command::new(&spec.constle_exe);
    cmd.arg(LAUNCH_SUBCOMMAND)
        .env_clear()
        .env(PLAN_ENV, plan)
        .stdin(Stdio::null());
    Ok(cmd)
}

/// Where bubblewrap is looked for, in order. Never `PATH`: a directory on
/// it can be one an agent could write (a work directory's `bin`, say), and
/// whatever is found here runs on the host, outside any sandbox.
const BWRAP_PATHS: &[&str] = &["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"];

/// The bubblewrap a sandbox runs: the first of `/usr/bin/bwrap`,
/// `/usr/local/bin/bwrap` and `/bin/bwrap` that exists (never one found on
/// `PATH`), provided no one but root (or the user constle runs as) could
/// have replaced it.
///
/// # Errors
///
/// [`SandboxError::BwrapNotFound`] or [`SandboxError::BwrapUntrusted`].
pub fn find_bwrap() -> Result<PathBuf, SandboxError> {
    let found = BWRAP_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or(SandboxError::BwrapNotFound)?;
    match only_root_or_me(&found) && found.parent().is_some_and(only_root_or_me) {
        true => Ok(found),
        false => Err(SandboxError::BwrapUntrusted { path: found }),
    }
}

/// Whether only root or this user could replace `path`: theirs, and not
/// writable by its group or others.
fn only_root_or_me(path: &Path) -> bool {
    let me = nix::unistd::geteuid().as_raw();
    std::fs::metadata(path).is_ok_and(|m| (m.uid() == 0 || m.uid() == me) && m.mode() & 0o022 == 0)
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
    /// `--bind-fd` or `--ro-bind-fd`: bwrap mounts what the descriptor is,
    /// then checks that the mount is that same object.
    fn bind_fd(&mut self, flag: &str, fd: &OwnedFd, dest: &Path) {
        let fd = fd.as_raw_fd().to_string();
        self.push(&[flag.as_ref(), fd.as_ref(), dest.as_os_str()]);
    }
    /// A fresh tmpfs at `at` of mode `perms`, holding at most `bytes`.
    fn tmpfs(&mut self, perms: &str, bytes: u64, at: &Path) {
        let bytes = bytes.to_string();
        self.push(&[
            "--perms".as_ref(),
            perms.as_ref(),
            "--size".as_ref(),
            bytes.as_ref(),
        ]);
        self.push(&["--tmpfs".as_ref(), at.as_os_str()]);
    }
    fn symlink(&mut self, target: &Path, at: &Path) {
        self.push(&["--symlink".as_ref(), target.as_os_str(), at.as_os_str()]);
    }
}

/// `bwrap`'s arguments, for descriptors `fds` the launcher opened.
pub(crate) struct BwrapArgs {
    /// Everything before `--`: what bwrap reads from `--args FD`, so that
    /// the environment given to the agent is not on a command line.
    pub options: Vec<OsString>,
    /// From `--` on: `/run/constle/constle sandbox-init [--stdio SOCKET] -- <command…>`
    /// (bwrap takes the command only from its real arguments).
    pub command: Vec<OsString>,
}

/// `bwrap`'s arguments, for descriptors `fds` the launcher opened.
pub(crate) fn bwrap_args(spec: &CheckedSpec<'_>, fds: &Descriptors) -> BwrapArgs {
    let mut a = Args(Vec::with_capacity(128));
    let id = AGENT_ID.to_string();

    // Namespaces: network (loopback only), pid, ipc, uts, cgroup, mount and
    // user; no nested user namespaces (so no way to regain capabilities).
    // The agent is an unprivileged uid in its namespace, which maps to the
    // launcher's own unprivileged uid on the host; constle's init is pid 1.
    a.flag("--unshare-all");
    // With a way out, the namespace the launcher made and set up.
    if spec.network.is_some() {
        a.flag("--share-net");
    }
    a.flag("--unshare-user");
    a.push(&["--uid".as_ref(), id.as_ref(), "--gid".as_ref(), id.as_ref()]);
    a.flag("--disable-userns");
    a.flag("--die-with-parent");
    a.flag("--as-pid-1");
    // Whether the sandbox was ever set up: see `setup`.
    let status = fds.status.as_raw_fd().to_string();
    a.push(&["--json-status-fd".as_ref(), status.as_ref()]);
    // A new session: no controlling terminal, so no TIOCSTI into the host's.
    a.flag("--new-session");
    a.push(&["--cap-drop".as_ref(), "ALL".as_ref()]);
    a.push(&["--hostname".as_ref(), HOSTNAME.as_ref()]);

    a.flag("--clearenv");
    for (name, value) in &spec.env {
        a.push(&["--setenv".as_ref(), name.as_ref(), value.as_ref()]);
    }
    for (name, default) in [("PATH", DEFAULT_PATH), ("HOME", AGENT_HOME)] {
        if !spec.env.contains_key(name) {
            a.push(&["--setenv".as_ref(), name.as_ref(), default.as_ref()]);
        }
    }

    match &spec.rootfs {
        Some(_) => mount_rootfs(&mut a, &fds.rootfs),
        None => mount_system(&mut a, fds),
    }
    mount_proc(&mut a);
    mount_dev(&mut a, spec.tmpfs.shm);
    // A private /tmp, and the agent's home, empty at each start (bwrap
    // makes each as the sandbox's uid, so the home is the agent's alone)
    // unless the spec keeps it in a host directory. Both before the work
    // directory, which may lie in /tmp (never in a kept home: checked).
    a.tmpfs("1777", spec.tmpfs.tmp, Path::new("/tmp"));
    match &fds.home {
        Some(home) => a.bind_fd("--bind-fd", home, Path::new(AGENT_HOME)),
        None => a.tmpfs("0700", spec.tmpfs.home, Path::new(AGENT_HOME)),
    }

    a.bind_fd("--ro-bind-fd", &fds.exe, Path::new(EXE_INSIDE));
    for ((.., inside), fd) in spec.sockets().zip(&fds.sockets) {
        a.bind_fd("--ro-bind-fd", fd, inside);
    }

    let workdir = spec.workdir.path.as_path();
    a.bind_fd("--bind-fd", &fds.workdir, workdir);
    // The root itself (a tmpfs holding the mount points) becomes read-only
    // last, once every mount point exists.
    a.push(&["--remount-ro".as_ref(), "/".as_ref()]);
    a.push(&["--chdir".as_ref(), workdir.as_os_str()]);
    for filter in &fds.seccomp {
        let fd = filter.as_raw_fd().to_string();
        a.push(&["--add-seccomp-fd".as_ref(), fd.as_ref()]);
    }

    let mut c = Args(Vec::with_capacity(spec.command.len() + 8));
    c.flag("--");
    c.flag(EXE_INSIDE);
    c.flag(INIT_SUBCOMMAND);
    if spec.stdio.is_some() {
        c.flag(STDIO_FLAG);
        c.flag(STDIO_INSIDE);
    }
    c.flag("--");
    c.0.extend(spec.command.iter().map(OsString::from));
    BwrapArgs {
        options: a.0,
        command: c.0,
    }
}

/// The host's system directories, the chosen parts of `/etc` (read-only),
/// the sandbox's own `passwd` and `group`, and the files written for it.
fn mount_system(a: &mut Args, fds: &Descriptors) {
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
    for (fd, dest) in [(&fds.passwd, "/etc/passwd"), (&fds.group, "/etc/group")] {
        if let Some(fd) = fd {
            let fd = fd.as_raw_fd().to_string();
            a.push(&["--ro-bind-data".as_ref(), fd.as_ref(), dest.as_ref()]);
        }
    }
    for (fd, dest) in &fds.etc {
        let fd = fd.as_raw_fd().to_string();
        a.push(&["--ro-bind-data".as_ref(), fd.as_ref(), dest.as_os_str()]);
    }
}

/// A fresh `/proc` of the sandbox's own PID namespace, with the kernel's
/// settings read-only and a few files no agent needs covered.
fn mount_proc(a: &mut Args) {
    a.push(&["--proc".as_ref(), "/proc".as_ref()]);
    for path in PROC_READ_ONLY.iter().map(Path::new).filter(|p| p.exists()) {
        a.ro_bind(path, path);
    }
    for path in PROC_MASKED.iter().map(Path::new).filter(|p| p.exists()) {
        a.ro_bind(Path::new("/dev/null"), path);
    }
}

/// A minimal `/dev`, bwrap's: a tmpfs holding the harmless devices, a
/// private `pts` and `shm`. That tmpfs belongs to the sandbox's uid and has
/// no bound, so `/dev/shm` gets a bounded tmpfs of its own and the rest is
/// made read-only: nothing the agent writes under `/dev` is unbounded.
fn mount_dev(a: &mut Args, shm_bytes: u64) {
    a.push(&["--dev".as_ref(), "/dev".as_ref()]);
    a.tmpfs("1777", shm_bytes, Path::new("/dev/shm"));
    a.push(&["--remount-ro".as_ref(), "/dev".as_ref()]);
}

/// Every top-level entry of the rootfs the launcher opened, read-only
/// (links recreated). Mounting entries one by one rather than the rootfs at
/// `/` means the rootfs need not hold the sandbox's mount points
/// (`/run/constle`, `/tmp`, the work directory's parents).
fn mount_rootfs(a: &mut Args, entries: &[RootfsEntry]) {
    for entry in entries {
        match entry {
            RootfsEntry::Mount { fd, inside, .. } => a.bind_fd("--ro-bind-fd", fd, inside),
            RootfsEntry::Link { target, inside } => a.symlink(target, inside),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fs::File;

    use super::*;
    use crate::{CommandIo, TmpfsSizes};

    fn fd() -> OwnedFd {
        File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn a_bwrap_others_could_replace_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bwrap");
        std::fs::write(&file, "").unwrap();
        for (mode, trusted) in [(0o755, true), (0o775, false), (0o757, false), (0o700, true)] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(only_root_or_me(&file), trusted, "{mode:o}");
        }
        assert!(!only_root_or_me(&dir.path().join("missing")));
        assert!(only_root_or_me(Path::new("/usr/bin")));
    }

    #[test]
    fn argument_order() {
        let work = tempfile::tempdir().unwrap();
        let stage = tempfile::tempdir().unwrap();
        let spec = SandboxSpec {
            command: vec!["python3".into(), "-c".into(), "print(1)".into()],
            workdir: work.path().to_path_buf(),
            env: BTreeMap::from([("HOME".into(), "/nonexistent".into())]),
            rootfs: None,
            stdio: CommandIo::Inherit,
            constle_exe: "/usr/bin/true".into(),
            private: vec![],
            stage: stage.path().to_path_buf(),
            cgroup_procs: vec![],
            host_id: None,
            tmpfs: TmpfsSizes::DEFAULT,
            workdir_inode: None,
            etc_files: BTreeMap::new(),
            home: None,
            home_inode: None,
            network: None,
        };
        let checked = spec.check().unwrap();
        let fds = Descriptors {
            workdir: fd(),
            home: None,
            exe: fd(),
            sockets: vec![],
            rootfs: vec![],
            passwd: Some(fd()),
            group: Some(fd()),
            etc: vec![],
            seccomp: vec![fd(), fd()],
            status: fd(),
        };
        let BwrapArgs { options, command } = bwrap_args(&checked, &fds);
        let args: Vec<String> = options
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let pos = |s: &str| args.iter().position(|a| a == s).unwrap();
        // the default PATH is added, the host's is not; the spec's HOME
        // is kept, and the agent's home still mounted
        assert_eq!(args[pos("PATH") + 1], DEFAULT_PATH);
        assert_eq!(args.iter().filter(|a| *a == "HOME").count(), 1);
        assert_eq!(args[pos("HOME") + 1], "/nonexistent");
        // every file system in memory bounded, each by its own size
        let tmpfs = |at: &str| {
            let i = args.iter().position(|a| a == at).unwrap();
            assert_eq!(args[i - 1], "--tmpfs", "{at}");
            (args[i - 4].clone(), args[i - 2].clone())
        };
        assert_eq!(tmpfs(AGENT_HOME), ("0700".into(), (1u64 << 30).to_string()));
        assert_eq!(tmpfs("/tmp"), ("1777".into(), (1u64 << 30).to_string()));
        assert_eq!(
            tmpfs("/dev/shm"),
            ("1777".into(), (64u64 << 20).to_string())
        );
        assert_eq!(args.iter().filter(|a| *a == "--tmpfs").count(), 3);
        // /dev read-only once /dev/shm is mounted in it
        let remount = |at: &str| {
            let found = args
                .windows(2)
                .position(|w| w[0] == "--remount-ro" && w[1] == at);
            found.unwrap()
        };
        assert!(pos("/dev/shm") < remount("/dev"));
        // /tmp and the home before the workdir (which may lie in either),
        // the root read-only last, the seccomp filters after every mount
        assert!(pos("/tmp") < pos("--bind-fd"));
        assert!(pos(AGENT_HOME) < pos("--bind-fd"));
        assert!(pos("--bind-fd") < remount("/"));
        assert!(remount("/") < pos("--add-seccomp-fd"));
        assert_eq!(args.iter().filter(|a| *a == "--add-seccomp-fd").count(), 2);
        // the agent's own passwd and group, none of the host's
        assert_eq!(args.iter().filter(|a| *a == "--ro-bind-data").count(), 2);
        assert!(
            !args
                .iter()
                .any(|a| a == "/etc/shadow" || a == "/etc/sudoers")
        );
        assert_eq!(args[pos("--uid") + 1], AGENT_ID.to_string());
        assert_eq!(args[pos("--gid") + 1], AGENT_ID.to_string());
        for flag in [
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--as-pid-1",
            "--new-session",
            "--clearenv",
            "--json-status-fd",
        ] {
            pos(flag);
        }
        assert!(!args.iter().any(|a| a == "--share-net" || a == "--"));
        // no home kept: nothing bound at the home
        assert!(
            !args
                .windows(3)
                .any(|w| w[0] == "--bind-fd" && w[2] == AGENT_HOME)
        );
        let command: Vec<String> = command
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(&command[..3], ["--", EXE_INSIDE, INIT_SUBCOMMAND]);
        assert_eq!(
            &command[command.len() - 4..],
            ["--", "python3", "-c", "print(1)"]
        );
    }

    #[test]
    fn a_kept_home_is_bound_instead_of_the_tmpfs() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["work", "home"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let spec = SandboxSpec {
            command: vec!["true".into()],
            workdir: dir.path().join("work"),
            env: BTreeMap::new(),
            rootfs: None,
            stdio: CommandIo::Inherit,
            constle_exe: "/usr/bin/true".into(),
            private: vec![],
            stage: dir.path().to_path_buf(),
            cgroup_procs: vec![],
            host_id: None,
            tmpfs: TmpfsSizes::DEFAULT,
            workdir_inode: None,
            home: Some(dir.path().join("home")),
            home_inode: None,
            network: None,
            etc_files: BTreeMap::new(),
        };
        let checked = spec.check().unwrap();
        let fds = Descriptors {
            workdir: fd(),
            home: Some(fd()),
            exe: fd(),
            sockets: vec![],
            rootfs: vec![],
            passwd: None,
            group: None,
            etc: vec![],
            seccomp: vec![],
            status: fd(),
        };
        let args: Vec<String> = bwrap_args(&checked, &fds)
            .options
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let bound: Vec<&str> = args
            .windows(3)
            .filter(|w| w[0] == "--bind-fd")
            .map(|w| w[2].as_str())
            .collect();
        let work = checked.workdir.path.to_str().unwrap();
        assert_eq!(bound, [AGENT_HOME, work]);
        assert_eq!(args.iter().filter(|a| *a == "--tmpfs").count(), 2);
        assert_eq!(
            args[args.iter().position(|a| a == "HOME").unwrap() + 1],
            AGENT_HOME
        );
        assert_eq!(fds.all().count(), 4);
    }
}
