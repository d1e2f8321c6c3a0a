//! `constle sandbox-exec`: the launcher. A fresh, single-threaded process on
//! the host that turns the plan [`sandbox_command`](crate::sandbox_command)
//! gave it into a running `bwrap`, by becoming it.
//!
//! In order:
//! 1. checks the spec again ([`SandboxSpec::check`](crate::SandboxSpec)),
//!    holding the work directory and rootfs open: from here on the sandbox
//!    mounts these objects, whatever their paths come to name;
//! 2. as root with `CAP_SYS_ADMIN` only ([`constle_hostids::privileged`];
//!    root without it takes an unprivileged user's path, as in a default
//!    container): enters a mount namespace of its own, shows the work
//!    directory (and the home, when the spec keeps one) to the agent's uid
//!    through an idmapped mount (so files the
//!    agent writes belong on disk to the directory's owner, and the agent
//!    is nobody the host knows), and gives the agent's uid the stdio socket;
//! 3. opens everything else bwrap mounts (this executable, the stdio
//!    socket, the rootfs's entries) and writes the sandbox's own
//!    `passwd`, `group`, seccomp filters ([`seccomp_programs`]) and
//!    bwrap's arguments into memory files;
//! 4. enters the run's cgroups (`sandbox.limits`); with a
//!    [`Network`](crate::Network), makes the sandbox's network namespace
//!    and sends its sockets to the host (see `netns`); then, on that root
//!    path, switches to the run's host id (`SandboxSpec::host_id`) for good
//!    (no supplementary groups, no way back);
//! 5. replaces itself with `bwrap --args FD`, which inherits exactly those
//!    descriptors. bwrap mounts each by descriptor and checks the mount is
//!    the same object.
//!
//! Arguments travel in a memory file rather than on the command line, which
//! every user of the host can read.

use std::convert::Infallible;
use std::ffi::{CStr, OsString};
use std::fs::File;
use std::io::{self, Seek as _, Write as _};
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileTypeExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::fcntl::{AtFlags, FcntlArg, FdFlag, OFlag, fcntl, open, openat, readlinkat};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::stat::{Mode, SFlag, fstat};
use nix::unistd::{Gid, Uid, fchownat, setgroups, setresgid, setresuid};
use rustix::mount::{MoveMountFlags, move_mount};

use crate::descriptors::{Descriptors, RootfsEntry};
use crate::layout::{LAUNCH_SUBCOMMAND, ROOTFS_SKIPPED, group, hosts, passwd, resolv_conf};
use crate::netns::{self, NetnsFailed};
use crate::plan::Plan;
use crate::resolve::OpenDir;
use crate::spec::CheckedSpec;
use crate::{EXIT_SANDBOX_FAILED, SandboxError, bwrap, seccomp_programs};

#[derive(Debug, thiserror::Error)]
enum LaunchError {
    #[error("{0}\n(this subcommand launches the sandbox on the host; `constle run` starts it)")]
    Usage(String),
    #[error(transparent)]
    Check(#[from] SandboxError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "as root, the agent runs as a uid of its own and sees its {role} {path:?} \
         through an idmapped mount, which failed ({source}); the file system may not support \
         idmapped mounts: run constle as an unprivileged user"
    )]
    Idmap {
        role: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "as root, the agent runs as a uid of its own and sees its {role} {path:?} \
         through an idmapped mount, which its file system does not support ({source}; \
         overlayfs, a container's own file system, does not on most kernels; ext4, xfs, btrfs \
         and tmpfs since Linux 6.3 do): put the {role} on one that does (in a container, a \
         volume), or run constle as an unprivileged user, whose sandbox needs no idmapped mount"
    )]
    IdmapUnsupported {
        role: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "as root, the agent runs as a uid of its own and sees its {role} {path:?} \
         through an idmapped mount, which is not permitted here ({source}): it takes \
         CAP_SYS_ADMIN in the user namespace that mounted the file system, which root in a \
         container with a user namespace of its own (podman --userns, rootless podman, \
         Kubernetes hostUsers: false) does not have; run constle there as an unprivileged \
         user, whose sandbox needs no idmapped mount"
    )]
    IdmapNotPermitted {
        role: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "as root, the sandbox needs a host id of its own from {first}–{last} (`constle run` \
         gives one); the plan has {given:?}",
        first = constle_hostids::RUN_IDS.start(),
        last = constle_hostids::RUN_IDS.end()
    )]
    HostId { given: Option<u32> },
}

impl From<NetnsFailed> for LaunchError {
    fn from(failed: NetnsFailed) -> LaunchError {
        LaunchError::Io {
            what: failed.what,
            source: failed.source,
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> LaunchError {
    let what = what.into();
    move |source| LaunchError::Io { what, source }
}

fn nix_err(what: impl Into<String>) -> impl FnOnce(nix::Error) -> LaunchError {
    let what = what.into();
    move |errno| LaunchError::Io {
        what,
        source: errno.into(),
    }
}

/// Runs `constle sandbox-exec ARGS`; `args` are the arguments after the
/// subcommand. Returns only on failure, with the exit status for the
/// binary (the launcher otherwise becomes `bwrap`).
pub fn launch_main(args: Vec<OsString>) -> i32 {
    let result = match args.as_slice() {
        [] => launch(),
        _ => Err(LaunchError::Usage(format!("unexpected arguments {args:?}"))),
    };
    match result {
        Ok(never) => match never {},
        Err(err) => {
            let _ = writeln!(io::stderr().lock(), "constle {LAUNCH_SUBCOMMAND}: {err}");
            EXIT_SANDBOX_FAILED
        }
    }
}

fn launch() -> Result<Infallible, LaunchError> {
    let plan = Plan::from_env().map_err(LaunchError::Usage)?;
    let as_root = match (constle_hostids::privileged(), plan.spec.host_id) {
        (false, _) => None,
        (true, Some(id)) if constle_hostids::RUN_IDS.contains(&id) => Some(id),
        (true, given) => return Err(LaunchError::HostId { given }),
    };
    if as_root.is_some() {
        // First: a descriptor opened before it names a mount of the host's
        // namespace, which nothing here may mount over or copy.
        private_mount_namespace()?;
    }
    let checked = plan.spec.check()?;
    let mut fds = open_mounts(&checked, &plan.spec.stage)?;
    if let Some(id) = as_root {
        confine_as_root(&checked, id, &plan.spec.stage, &mut fds)?;
    }
    let args = bwrap::bwrap_args(&checked, &fds);
    let options = memfd(c"bwrap-args", &nul_separated(&args.options))?;
    for fd in fds.all().chain([&options]) {
        inheritable(fd)?;
    }
    // Last before bwrap, and still with the rights to: from here on,
    // everything the sandbox runs is inside the run's cgroups.
    constle_limits::enter(&plan.spec.cgroup_procs)
        .map_err(|e| LaunchError::Usage(format!("cannot enter the run's cgroups: {e}")))?;
    if let Some(network) = &plan.spec.network {
        netns::enter(as_root.is_some(), network)?;
    }
    if let Some(id) = as_root {
        become_agent(id)?;
    }
    let err = Command::new(&plan.bwrap)
        .arg("--args")
        .arg(options.as_raw_fd().to_string())
        .args(&args.command)
        .env_clear()
        .exec();
    Err(LaunchError::Io {
        what: format!("cannot run {}", plan.bwrap.display()),
        source: err,
    })
}

/// Everything bwrap mounts, opened as the objects the check judged, and
/// the file in `stage` bwrap writes its status to.
fn open_mounts(checked: &CheckedSpec<'_>, stage: &Path) -> Result<Descriptors, LaunchError> {
    let (passwd, group) = match checked.rootfs {
        Some(_) => (None, None),
        None => (
            Some(memfd(c"passwd", passwd().as_bytes())?),
            Some(memfd(c"group", group().as_bytes())?),
        ),
    };
    Ok(Descriptors {
        workdir: dup(&checked.workdir.fd)?,
        home: checked
            .home
            .as_ref()
            .map(|home| dup(&home.fd))
            .transpose()?,
        exe: open_exe()?,
        sockets: open_sockets(checked)?,
        rootfs: match &checked.rootfs {
            Some(dir) => open_rootfs(dir)?,
            None => Vec::new(),
        },
        passwd,
        group,
        etc: etc_files(checked)?,
        seccomp: seccomp_programs()?
            .iter()
            .map(|program| memfd(c"seccomp", program))
            .collect::<Result<_, _>>()?,
        status: crate::setup::create_status(stage)
            .map_err(io_err("cannot make the sandbox's status file"))?,
    })
}

/// The files written into the sandbox's `/etc`: the caller's, and with a
/// name service (and no rootfs, whose `/etc` is its own) the resolver's
/// configuration and `localhost`.
fn etc_files(checked: &CheckedSpec<'_>) -> Result<Vec<(OwnedFd, PathBuf)>, LaunchError> {
    let resolver = match (checked.name_service(), &checked.rootfs) {
        (true, None) => vec![("/etc/resolv.conf", resolv_conf()), ("/etc/hosts", hosts())],
        _ => Vec::new(),
    };
    checked
        .etc_files
        .iter()
        .map(|(path, content)| (path.as_str(), content.as_str()))
        .chain(
            resolver
                .iter()
                .map(|(path, content)| (*path, content.as_str())),
        )
        .map(|(path, content)| Ok((memfd(c"etc", content.as_bytes())?, PathBuf::from(path))))
        .collect()
}

/// A mount namespace of the launcher's own, so that nothing it mounts is
/// seen by the host; it ends with the sandbox.
fn private_mount_namespace() -> Result<(), LaunchError> {
    unshare(CloneFlags::CLONE_NEWNS).map_err(nix_err("cannot make a mount namespace"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(nix_err("cannot make the mount namespace private"))
}

/// As root, in the launcher's own mount namespace: the work directory
/// shown to the agent's uid, the stdio socket handed to that uid, and
/// every descriptor bwrap mounts moved under the stage directory.
///
/// The staging is for bwrap, which will run as the agent's uid: it
/// resolves each descriptor's path again, and may not be able to reach
/// the original (the constle executable or the work directory under
/// `/root`, the stdio socket in a directory only root may enter). The
/// stage holds a copy of each mount on a tmpfs of this namespace alone,
/// where the agent's uid can reach it.
fn confine_as_root(
    checked: &CheckedSpec<'_>,
    id: u32,
    stage: &Path,
    fds: &mut Descriptors,
) -> Result<(), LaunchError> {
    let workdir = idmapped(&checked.workdir, "work directory", id)?;
    let home = match (&checked.home, &fds.home) {
        (Some(dir), Some(fd)) => Some((idmapped(dir, "home", id)?, fd)),
        _ => None,
    };
    for ((name, ..), fd) in checked.sockets().zip(&fds.sockets) {
        fchownat(
            fd,
            "",
            Some(Uid::from_raw(id)),
            Some(Gid::from_raw(id)),
            AtFlags::AT_EMPTY_PATH,
        )
        .map_err(nix_err(format!("cannot hand socket {name} to the agent")))?;
    }
    let stage = Stage::mount(stage)?;
    fds.workdir = stage.attach(&workdir, &fds.workdir, "workdir")?;
    let staged = home
        .map(|(tree, original)| stage.attach(&tree, original, "home"))
        .transpose()?;
    if staged.is_some() {
        fds.home = staged;
    }
    fds.exe = stage.bind(&fds.exe, "constle", Kind::File)?;
    for ((name, ..), fd) in checked.sockets().zip(fds.sockets.iter_mut()) {
        *fd = stage.bind(fd, &format!("socket-{name}"), Kind::File)?;
    }
    for (i, entry) in fds.rootfs.iter_mut().enumerate() {
        if let RootfsEntry::Mount { fd, dir, .. } = entry {
            let kind = if *dir { Kind::Dir } else { Kind::File };
            *fd = stage.bind(fd, &format!("rootfs-{i}"), kind)?;
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Kind {
    Dir,
    File,
}

/// A tmpfs over the caller's stage directory, in this mount namespace only.
struct Stage(PathBuf);

impl Stage {
    fn mount(dir: &Path) -> Result<Stage, LaunchError> {
        mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("mode=0755"),
        )
        .map_err(nix_err(format!(
            "cannot mount the stage on {}",
            dir.display()
        )))?;
        Ok(Stage(dir.to_path_buf()))
    }

    fn mount_point(&self, name: &str, kind: Kind) -> Result<PathBuf, LaunchError> {
        let at = self.0.join(name);
        let made = match kind {
            Kind::Dir => std::fs::create_dir(&at),
            Kind::File => File::create_new(&at).map(drop),
        };
        made.map_err(io_err(format!("cannot make {}", at.display())))?;
        Ok(at)
    }

    /// Binds what `fd` is at `name`, and opens it there.
    fn bind(&self, fd: &OwnedFd, name: &str, kind: Kind) -> Result<OwnedFd, LaunchError> {
        let at = self.mount_point(name, kind)?;
        let source = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        mount(
            Some(&source),
            &at,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(nix_err(format!("cannot stage {name}")))?;
        reopen_same(fd, &at)
    }

    /// Attaches the detached mount `tree` (a copy of `original`) at `name`,
    /// and opens it there.
    fn attach(
        &self,
        tree: &OwnedFd,
        original: &OwnedFd,
        name: &str,
    ) -> Result<OwnedFd, LaunchError> {
        let at = self.mount_point(name, Kind::Dir)?;
        move_mount(
            tree.as_fd(),
            "",
            rustix::fs::CWD,
            &at,
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )
        .map_err(|e| io_err(format!("cannot stage {name}"))(e.into()))?;
        reopen_same(original, &at)
    }
}

/// `at`, opened, provided it is the same object as `fd`.
fn reopen_same(fd: &OwnedFd, at: &Path) -> Result<OwnedFd, LaunchError> {
    let what = format!("cannot open the staged {}", at.display());
    let reopened = open(
        at,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(nix_err(&what))?;
    let (a, b) = (
        fstat(fd).map_err(nix_err(&what))?,
        fstat(&reopened).map_err(nix_err(&what))?,
    );
    match (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) {
        true => Ok(reopened),
        false => Err(LaunchError::Io {
            what,
            source: io::Error::other("it is not what was checked"),
        }),
    }
}

/// A writable directory (the work directory, the home) as the agent's uid
/// `id` sees it: an idmapped, detached copy of its mount.
fn idmapped(workdir: &OpenDir, role: &'static str, id: u32) -> Result<OwnedFd, LaunchError> {
    let path = || workdir.path.clone();
    // The owner's ids are the namespace's inside ids, the agent's outside.
    let userns = constle_idmap::user_namespace(
        &format!("{} {id} 1\n", workdir.uid),
        &format!("{} {id} 1\n", workdir.gid),
    )
    .map_err(|source| LaunchError::Idmap {
        role,
        path: path(),
        source,
    })?;
    constle_idmap::idmapped_clone(workdir.fd.as_fd(), userns.as_fd())
        .map_err(|source| idmap_failed(role, path(), source))
}

/// Why the idmapped copy of a mount failed, told by the kernel's error:
/// `EINVAL` when the file system does not support idmapped mounts, `EPERM`
/// when this process may not idmap it.
fn idmap_failed(role: &'static str, path: PathBuf, source: io::Error) -> LaunchError {
    match source.raw_os_error() {
        Some(libc::EINVAL) => LaunchError::IdmapUnsupported { role, path, source },
        Some(libc::EPERM) => LaunchError::IdmapNotPermitted { role, path, source },
        _ => LaunchError::Idmap { role, path, source },
    }
}

/// Switches to the agent's host uid and gid for good: the real, effective
/// and saved ids all change, and supplementary groups are dropped.
fn become_agent(id: u32) -> Result<(), LaunchError> {
    let uid = Uid::from_raw(id);
    let gid = Gid::from_raw(id);
    let what = format!("cannot switch to uid {id}");
    setgroups(&[]).map_err(nix_err(&what))?;
    setresgid(gid, gid, gid).map_err(nix_err(&what))?;
    setresuid(uid, uid, uid).map_err(nix_err(&what))?;
    if nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
        return Err(LaunchError::Io {
            what,
            source: io::Error::other("root could be regained"),
        });
    }
    Ok(())
}

/// Each top-level entry of the rootfs, opened from the rootfs's own
/// descriptor without following links, except those the sandbox brings
/// itself. Other kinds of entries (sockets, devices) are left out.
fn open_rootfs(rootfs: &OpenDir) -> Result<Vec<RootfsEntry>, LaunchError> {
    let listing = PathBuf::from(format!("/proc/self/fd/{}", rootfs.fd.as_raw_fd()));
    let what = || format!("cannot read the rootfs {}", rootfs.path.display());
    let mut names: Vec<OsString> = std::fs::read_dir(&listing)
        .map_err(io_err(what()))?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<io::Result<_>>()
        .map_err(io_err(what()))?;
    names.retain(|n| !ROOTFS_SKIPPED.iter().any(|s| n.as_bytes() == s.as_bytes()));
    names.sort();
    let mut entries = Vec::with_capacity(names.len());
    for name in names {
        let inside = Path::new("/").join(&name);
        let fd = openat(
            &rootfs.fd,
            name.as_os_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(nix_err(what()))?;
        let kind =
            SFlag::from_bits_truncate(fstat(&fd).map_err(nix_err(what()))?.st_mode) & SFlag::S_IFMT;
        if kind == SFlag::S_IFLNK {
            let target = readlinkat(&rootfs.fd, name.as_os_str()).map_err(nix_err(what()))?;
            entries.push(RootfsEntry::Link {
                target: target.into(),
                inside,
            });
        } else if kind == SFlag::S_IFDIR || kind == SFlag::S_IFREG {
            let dir = kind == SFlag::S_IFDIR;
            entries.push(RootfsEntry::Mount { fd, inside, dir });
        }
    }
    Ok(entries)
}

fn open_sockets(checked: &CheckedSpec<'_>) -> Result<Vec<OwnedFd>, LaunchError> {
    checked
        .sockets()
        .map(|(name, host_socket, _)| {
            let what = format!("socket {name}");
            let fd = open_path(host_socket, &what)?;
            let meta = File::from(fd.try_clone().map_err(io_err(&what))?)
                .metadata()
                .map_err(io_err(&what))?;
            match meta.file_type().is_socket() {
                true => Ok(fd),
                false => Err(LaunchError::Io {
                    what,
                    source: io::Error::other(format!(
                        "{} is no longer a Unix socket",
                        host_socket.display()
                    )),
                }),
            }
        })
        .collect()
}

/// This executable, opened by its path in this mount namespace (the
/// kernel's own `/proc/self/exe` names a mount of the one it was started
/// in, which cannot be copied from here), provided that path is still it.
fn open_exe() -> Result<OwnedFd, LaunchError> {
    let what = "the constle executable";
    let running = open_path(Path::new("/proc/self/exe"), what)?;
    let path = crate::resolve::fd_path(&running).map_err(io_err(what))?;
    let fd = open_path(&path, what)?;
    reopen_same(&running, &path).map(|_| fd)
}

fn open_path(path: &Path, what: &str) -> Result<OwnedFd, LaunchError> {
    open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(nix_err(format!("cannot open {what} ({})", path.display())))
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd, LaunchError> {
    fd.try_clone()
        .map_err(io_err("cannot duplicate a descriptor"))
}

/// A memory file holding `bytes`, read from its start.
fn memfd(name: &CStr, bytes: &[u8]) -> Result<OwnedFd, LaunchError> {
    let what = || format!("cannot write the sandbox's {}", name.to_string_lossy());
    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC).map_err(nix_err(what()))?;
    let mut file = File::from(fd);
    file.write_all(bytes)
        .and_then(|()| file.rewind())
        .map_err(io_err(what()))?;
    Ok(file.into())
}

/// Lets `exec` pass `fd` on.
fn inheritable(fd: &OwnedFd) -> Result<(), LaunchError> {
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))
        .map(drop)
        .map_err(nix_err("cannot pass a descriptor to bwrap"))
}

/// `bwrap --args` reads arguments separated by NUL bytes.
fn nul_separated(args: &[OsString]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(args.iter().map(|a| a.len() + 1).sum());
    for arg in args {
        bytes.extend_from_slice(arg.as_bytes());
        bytes.push(0);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idmap_failure_says_which_it_is() {
        let said = |errno| {
            idmap_failed(
                "work directory",
                "/w".into(),
                io::Error::from_raw_os_error(errno),
            )
            .to_string()
        };
        let unsupported = said(libc::EINVAL);
        assert!(unsupported.contains("does not support"), "{unsupported}");
        assert!(unsupported.contains("volume"), "{unsupported}");
        assert!(!unsupported.contains("not permitted"), "{unsupported}");
        let refused = said(libc::EPERM);
        assert!(refused.contains("not permitted here"), "{refused}");
        assert!(refused.contains("user namespace"), "{refused}");
        assert!(!refused.contains("does not support"), "{refused}");
        // Anything else keeps the message it had.
        let other = said(libc::ENOSYS);
        assert!(other.contains("may not support"), "{other}");
    }
}
