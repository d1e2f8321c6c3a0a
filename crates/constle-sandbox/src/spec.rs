//! [`SandboxSpec`] and its [`Network`], and the checks that run before any
//! `bwrap` argument is written.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::net::{IpAddr, SocketAddrV4};
use std::os::unix::fs::{FileTypeExt, MetadataExt as _};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::SandboxError;
use crate::layout::{self, AGENT_HOME, RUN_DIR};
use crate::private::{Private, check_private, check_single_link};
use crate::resolve::{OpenDir, check_no_link, open_dir};

/// One door out of the sandbox: a TCP listener the launcher binds in the
/// sandbox's network namespace and hands to the host, which serves it. The
/// agent reaches it as a peer; nothing inside holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Door {
    /// What the door is for (`"proxy"`, `"mcp-accounting"`): 1 to 32 of
    /// `a-z`, `0-9`, `-`, starting with a letter or digit. It appears in
    /// error messages.
    pub name: String,
    /// Where the door listens inside the sandbox: a loopback address
    /// (normally `127.0.0.1`) and a port of at least 1024, which keeps it
    /// clear of the name service's ports. The sandbox has its own network
    /// namespace, so the port never clashes with the host's.
    pub listen: SocketAddrV4,
}

/// Where the sandboxed command's standard input and output go.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandIo {
    /// Standard input `/dev/null`; standard output and error those of the
    /// sandbox command, which the caller chooses. What an agent gets.
    #[default]
    Inherit,
    /// Standard input and output are both one connection to this Unix
    /// socket, which the caller listens on and accepts once: the protocol
    /// channel of a stdio MCP server. Standard error stays the sandbox
    /// command's. Only this socket file is mounted into the sandbox, at
    /// [`STDIO_INSIDE`](crate::STDIO_INSIDE), read-only.
    Socket(#[serde(with = "crate::plan::path")] PathBuf),
}

/// Everything that decides what the agent's process sees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// The agent's argv. `command[0]` is looked up in the sandbox's `PATH`
    /// when it has no `/`.
    pub command: Vec<String>,
    /// The work directory: absolute, existing, the only writable host path
    /// and the agent's current directory. Its path may not cross a symbolic
    /// link (`..` is taken literally, so it may not follow one either).
    #[serde(with = "crate::plan::path")]
    pub workdir: PathBuf,
    /// Exactly the agent's environment (the caller adds `HTTPS_PROXY` and
    /// friends). Nothing from the host is inherited. Two additions: without
    /// a `PATH` here, the agent gets [`DEFAULT_PATH`](crate::DEFAULT_PATH),
    /// and without a `HOME`, [`AGENT_HOME`](crate::AGENT_HOME).
    pub env: BTreeMap<String, String>,
    /// A directory to use as the sandbox's `/` instead of the host's system
    /// directories; like the work directory, reached through no link.
    #[serde(with = "crate::plan::opt_path")]
    pub rootfs: Option<PathBuf>,
    /// Where the command's standard input and output go.
    pub stdio: CommandIo,
    /// The `constle` executable: it launches the sandbox
    /// (`constle sandbox-exec`, on the host) and is mounted read-only at
    /// `/run/constle/constle` as the sandbox's first process
    /// (`constle sandbox-init`), which runs the agent.
    #[serde(with = "crate::plan::path")]
    pub constle_exe: PathBuf,
    /// Host paths the sandbox must never see. The work directory and the
    /// rootfs may neither contain one of them nor lie inside one, judged on
    /// real paths (links followed, `..` resolved); a private file with
    /// other hard links is refused, since one of them could be anywhere.
    pub private: Vec<Private>,
    /// A directory of the caller's for the launcher: existing, empty, the
    /// caller's own and writable by no one else, in a
    /// directory anyone may search (such as `/tmp`), removed by the caller
    /// after the run. Run as root, the launcher mounts a tmpfs over it in a
    /// mount namespace of its own, to put what the sandbox mounts where the
    /// agent's unprivileged uid can reach it; the host never sees anything
    /// in it.
    #[serde(with = "crate::plan::path")]
    pub stage: PathBuf,
    /// The `cgroup.procs` files of the run's cgroups (`constle_limits`),
    /// which the launcher enters just before it becomes bwrap, so that
    /// everything in the sandbox is inside them; empty for no limits. If
    /// entering fails, nothing starts.
    #[serde(with = "crate::plan::paths")]
    pub cgroup_procs: Vec<PathBuf>,
    /// When constle runs as root: the host uid and gid the sandbox runs as,
    /// one of `constle_hostids::RUN_IDS`, which the caller holds
    /// (`constle_hostids::HostId`) for as long as the sandbox lives. The
    /// launcher refuses to start as root without one, and ignores it
    /// otherwise (an unprivileged caller's sandbox runs as the caller).
    pub host_id: Option<u32>,
    /// The sizes of the sandbox's file systems in memory.
    pub tmpfs: TmpfsSizes,
    /// The device and inode the work directory must be: the caller holds
    /// that directory (to check it after the run), and the sandbox mounts
    /// no other, whatever the path names by the time it starts.
    pub workdir_inode: Option<(u64, u64)>,
    /// Files written into the sandbox's `/etc` (read-only there), by path:
    /// only those in [`WRITABLE_ETC_FILES`](crate::WRITABLE_ETC_FILES), and
    /// only without a `rootfs` (whose `/etc` is its own).
    #[serde(default)]
    pub etc_files: BTreeMap<String, String>,
    /// A host directory mounted writable at [`AGENT_HOME`] instead of the
    /// tmpfs there, so that what the agent keeps in its home lasts from run
    /// to run: a second work directory, checked by the same rules
    /// (absolute, existing, reached through no link, no system directory,
    /// showing nothing private), apart from the work directory and the
    /// rootfs (neither holding nor lying inside either), and holding
    /// neither the work directory's place in the sandbox nor the constle
    /// executable.
    #[serde(with = "crate::plan::opt_path")]
    pub home: Option<PathBuf>,
    /// The device and inode [`SandboxSpec::home`] must be, as
    /// [`SandboxSpec::workdir_inode`] for the work directory.
    pub home_inode: Option<(u64, u64)>,
    /// The ways out: a network namespace the launcher makes and sets up,
    /// whose sockets the host serves; `None`: bwrap's own, holding nothing
    /// but loopback, and no way out at all.
    #[serde(default)]
    pub network: Option<Network>,
}

/// What the launcher sets up in the sandbox's network namespace for the
/// host to serve (see [`receive_sockets`](crate::receive_sockets)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Network {
    /// A Unix socket the caller listens on: the launcher connects once and
    /// sends the namespace's sockets, before bwrap starts. The caller
    /// checks the peer is the process it started.
    #[serde(with = "crate::plan::path")]
    pub channel: PathBuf,
    /// The listeners the host serves, in the order they travel.
    pub doors: Vec<Door>,
    /// A resolver and captured connections, served from the host.
    pub name_service: Option<NameService>,
}

/// A name service in the sandbox's network namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameService {
    /// Address ranges routed to the namespace's loopback (the placeholder
    /// pools), as address and prefix length: a connection to any address
    /// in them reaches the namespace's own listeners.
    pub local_routes: Vec<(IpAddr, u8)>,
}

/// The most each of the sandbox's file systems in memory may hold, in
/// bytes. What is written there is memory no process owns, so without a
/// bound an agent could take the host's memory through them, and the
/// kernel's OOM killer would pick other processes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TmpfsSizes {
    /// `/tmp`.
    pub tmp: u64,
    /// The agent's home, [`AGENT_HOME`](crate::AGENT_HOME).
    pub home: u64,
    /// `/dev/shm`, POSIX shared memory.
    pub shm: u64,
}

impl TmpfsSizes {
    /// What a sandbox gets unless told otherwise: 1 GiB each for `/tmp` and
    /// the home, where package managers, compilers and browsers keep caches
    /// and scratch files (data an agent works on belongs in its work
    /// directory, on disk), and 64 MiB for `/dev/shm`, Docker's default,
    /// enough for POSIX shared memory between processes (Chromium wants
    /// more: give it `--disable-dev-shm-usage`, or a larger `shm`).
    pub const DEFAULT: TmpfsSizes = TmpfsSizes {
        tmp: 1 << 30,
        home: 1 << 30,
        shm: 64 << 20,
    };
}

impl Default for TmpfsSizes {
    fn default() -> Self {
        TmpfsSizes::DEFAULT
    }
}

/// A spec whose every part was checked. The work directory, the home and
/// the rootfs are held open: they are what gets mounted.
#[derive(Debug)]
pub(crate) struct CheckedSpec<'a> {
    pub command: &'a [String],
    pub workdir: OpenDir,
    pub env: BTreeMap<&'a str, &'a str>,
    pub rootfs: Option<OpenDir>,
    /// The host directory mounted as the agent's home.
    pub home: Option<OpenDir>,
    /// The socket of [`CommandIo::Socket`].
    pub stdio: Option<&'a Path>,
    pub tmpfs: TmpfsSizes,
    pub etc_files: &'a BTreeMap<String, String>,
    /// The network namespace the launcher sets up ([`SandboxSpec::network`]).
    pub network: Option<&'a Network>,
}

impl CheckedSpec<'_> {
    /// Every host socket the sandbox mounts: its name (for messages), host
    /// path and path inside.
    pub fn sockets(&self) -> impl Iterator<Item = (&str, &Path, &Path)> {
        self.stdio
            .map(|host| ("stdio", host, Path::new(layout::STDIO_INSIDE)))
            .into_iter()
    }

    /// Whether the sandbox gets a name service.
    pub fn name_service(&self) -> bool {
        self.network.is_some_and(|n| n.name_service.is_some())
    }
}

/// Top-level host directories that may not be the work directory: binding
/// one of them writable would expose or shadow far more than a project.
const FORBIDDEN_WORKDIRS: &[&str] = &[
    "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "proc", "root", "run",
    "sbin", "sys", "tmp", "usr", "var",
];

/// Where the work directory may not lie at all: the sandbox mounts its own
/// `/proc`, `/dev` and `/run/constle`, and has no `/sys`.
const FORBIDDEN_WORKDIR_PREFIXES: &[&str] = &["/proc", "/dev", "/sys", RUN_DIR];

impl SandboxSpec {
    /// The checks of what the sandbox would mount and show (work directory,
    /// rootfs, private paths, the constle executable, the stage), without
    /// the sockets, which the caller may not have bound yet: a caller runs
    /// this before it starts anything else.
    pub fn check_dirs(&self) -> Result<(), SandboxError> {
        self.check_paths().map(drop)
    }

    /// Every check, made before anything starts. The directories are opened
    /// here and judged by what the descriptors name.
    pub(crate) fn check(&self) -> Result<CheckedSpec<'_>, SandboxError> {
        check_command(&self.command)?;
        let env = check_env(&self.env)?;
        let Dirs {
            workdir,
            rootfs,
            home,
        } = self.check_paths()?;
        if let Some(network) = &self.network {
            check_doors(&network.doors)?;
            check_host_socket("network", &network.channel)?;
        }
        let stdio = match &self.stdio {
            CommandIo::Inherit => None,
            CommandIo::Socket(path) => {
                check_host_socket("stdio", path)?;
                Some(path.as_path())
            }
        };
        Ok(CheckedSpec {
            command: &self.command,
            workdir,
            env,
            rootfs,
            home,
            stdio,
            tmpfs: check_tmpfs(self.tmpfs)?,
            etc_files: check_etc_files(&self.etc_files, self.rootfs.is_some())?,
            network: self.network.as_ref(),
        })
    }

    fn check_paths(&self) -> Result<Dirs, SandboxError> {
        check_single_link(&self.private)?;
        let rootfs = match &self.rootfs {
            None => None,
            Some(path) => Some(check_rootfs(path, &self.private)?),
        };
        let workdir = check_workdir(&self.workdir, rootfs.as_ref(), &self.private)?;
        check_held("workdir", &workdir, self.workdir_inode)?;
        let home = match &self.home {
            None => None,
            Some(path) => Some(check_home(path, &workdir, rootfs.as_ref(), &self.private)?),
        };
        if let Some(home) = &home {
            check_held("home", home, self.home_inode)?;
        }
        let writable = [Some(&workdir), home.as_ref()];
        for (role, dir) in ["workdir", "home"].into_iter().zip(writable) {
            if let Some(dir) = dir {
                check_exe(&self.constle_exe, role, &dir.path)?;
            }
        }
        check_stage(&self.stage)?;
        let dirs = Dirs {
            workdir,
            rootfs,
            home,
        };
        self.check_run_files(&dirs)?;
        Ok(dirs)
    }

    /// The run's own files on the host (the stage, the network's channel,
    /// the stdio socket: each in a directory beside the run's other
    /// private ones) may not lie inside a directory the sandbox shows,
    /// where the agent could reach them. They do when `TMPDIR` is inside
    /// the work directory, say.
    fn check_run_files(&self, dirs: &Dirs) -> Result<(), SandboxError> {
        let stdio = match &self.stdio {
            CommandIo::Socket(path) => Some(("stdio socket", path)),
            CommandIo::Inherit => None,
        };
        let channel = self
            .network
            .as_ref()
            .map(|n| ("network channel", &n.channel));
        let files = [Some(("stage", &self.stage)), channel, stdio];
        let shown = [
            ("work directory", Some(&dirs.workdir)),
            ("home", dirs.home.as_ref()),
            ("rootfs", dirs.rootfs.as_ref()),
        ];
        for (what, path) in files.into_iter().flatten() {
            for (role, dir) in shown {
                if dir.is_some_and(|dir| lies_inside(path, &dir.path)) {
                    return Err(SandboxError::RunFileShown {
                        what,
                        path: path.clone(),
                        role,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The directories a spec mounts, checked and held open.
struct Dirs {
    workdir: OpenDir,
    rootfs: Option<OpenDir>,
    home: Option<OpenDir>,
}

/// Refuses a writable directory (`role`) that is not the one the caller
/// holds, when it holds one.
fn check_held(
    role: &'static str,
    dir: &OpenDir,
    held: Option<(u64, u64)>,
) -> Result<(), SandboxError> {
    match held.is_some_and(|inode| inode != dir.inode) {
        true => Err(SandboxError::WorkdirReplaced {
            role,
            path: dir.path.clone(),
        }),
        false => Ok(()),
    }
}

/// Only files constle may write, and none over a rootfs's own `/etc`.
fn check_etc_files(
    files: &BTreeMap<String, String>,
    rootfs: bool,
) -> Result<&BTreeMap<String, String>, SandboxError> {
    for path in files.keys() {
        let why = if !layout::WRITABLE_ETC_FILES.contains(&path.as_str()) {
            "it is not one of the files constle writes there"
        } else if rootfs {
            "the rootfs brings its own /etc"
        } else {
            continue;
        };
        return Err(SandboxError::EtcFile {
            path: path.clone(),
            why,
        });
    }
    Ok(files)
}

/// Every size at least [`MIN_TMPFS_BYTES`].
fn check_tmpfs(sizes: TmpfsSizes) -> Result<TmpfsSizes, SandboxError> {
    for (mount, bytes) in [
        ("/tmp", sizes.tmp),
        (layout::AGENT_HOME, sizes.home),
        ("/dev/shm", sizes.shm),
    ] {
        if bytes < MIN_TMPFS_BYTES {
            return Err(SandboxError::TmpfsTooSmall { mount, bytes });
        }
    }
    Ok(sizes)
}

/// The smallest size of a file system in memory: one MiB.
pub const MIN_TMPFS_BYTES: u64 = 1 << 20;

fn check_command(command: &[String]) -> Result<(), SandboxError> {
    if command.first().is_none_or(String::is_empty) {
        return Err(SandboxError::EmptyCommand);
    }
    match command.iter().position(|arg| arg.contains('\0')) {
        Some(i) => Err(SandboxError::NulByte {
            what: format!("command argument {i}"),
        }),
        None => Ok(()),
    }
}

fn check_env(env: &BTreeMap<String, String>) -> Result<BTreeMap<&str, &str>, SandboxError> {
    let mut checked = BTreeMap::new();
    for (name, value) in env {
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
        checked.insert(name.as_str(), value.as_str());
    }
    Ok(checked)
}

fn check_rootfs(path: &Path, private: &[Private]) -> Result<OpenDir, SandboxError> {
    let err = |reason: String| SandboxError::Rootfs {
        path: path.to_path_buf(),
        reason,
    };
    if !path.is_absolute() {
        return Err(err("it is not an absolute path".into()));
    }
    let rootfs =
        open_dir(path).map_err(|e| err(format!("{e}; it must be an existing directory")))?;
    if rootfs.path == Path::new("/") {
        return Err(err(
            "it is the host's own root; leave rootfs out to use the host's system directories"
                .into(),
        ));
    }
    check_private("rootfs", &rootfs.path, private)?;
    check_no_link("rootfs", path, &rootfs)?;
    Ok(rootfs)
}

fn check_workdir(
    path: &Path,
    rootfs: Option<&OpenDir>,
    private: &[Private],
) -> Result<OpenDir, SandboxError> {
    let workdir = check_writable("workdir", path, private)?;
    if let Some(rootfs) = rootfs {
        check_against_rootfs(&workdir.path, &rootfs.path)?;
    }
    Ok(workdir)
}

/// The agent's home: a writable directory like the work directory, apart
/// from it and from the rootfs. It is mounted at [`AGENT_HOME`], so the
/// work directory may not lie there either: its mount point would be made
/// in the home, on the host.
fn check_home(
    path: &Path,
    workdir: &OpenDir,
    rootfs: Option<&OpenDir>,
    private: &[Private],
) -> Result<OpenDir, SandboxError> {
    let home = check_writable("home", path, private)?;
    let others = [
        Some(("the workdir", &workdir.path)),
        rootfs.map(|r| ("the rootfs", &r.path)),
    ];
    for (what, other) in others.into_iter().flatten() {
        if let Some(relation) = overlap(&home.path, other) {
            return Err(SandboxError::HomeOverlaps {
                home: home.path.clone(),
                relation,
                what,
                other: other.clone(),
            });
        }
    }
    if workdir.path.starts_with(AGENT_HOME) {
        return Err(SandboxError::HomeOverlaps {
            home: home.path.clone(),
            relation: "would hold",
            what: "the workdir, which lies under the home's place in the sandbox,",
            other: workdir.path.clone(),
        });
    }
    Ok(home)
}

/// How `dir` stands to `other`: `"is"`, `"holds"`, `"lies inside"`, or
/// `None` when they are apart.
fn overlap(dir: &Path, other: &Path) -> Option<&'static str> {
    if dir == other {
        Some("is")
    } else if other.starts_with(dir) {
        Some("holds")
    } else if dir.starts_with(other) {
        Some("lies inside")
    } else {
        None
    }
}

/// A directory the sandbox mounts writable (`role`: `"workdir"` or
/// `"home"`): absolute, an existing directory, no system directory and
/// nowhere the sandbox mounts its own file systems, showing nothing
/// private, reached through no link.
fn check_writable(
    role: &'static str,
    path: &Path,
    private: &[Private],
) -> Result<OpenDir, SandboxError> {
    if !path.is_absolute() {
        return Err(SandboxError::WorkdirNotAbsolute {
            role,
            path: path.to_path_buf(),
        });
    }
    let dir = open_dir(path).map_err(|source| match source.raw_os_error() {
        Some(code) if code == nix::errno::Errno::ENOTDIR as i32 => SandboxError::WorkdirNotDir {
            role,
            path: path.to_path_buf(),
        },
        _ => SandboxError::Workdir {
            role,
            path: path.to_path_buf(),
            source,
        },
    })?;
    let resolved = &dir.path;
    let forbidden = |reason| SandboxError::WorkdirForbidden {
        role,
        path: resolved.clone(),
        reason,
    };
    let mut normals = resolved.components().filter_map(|c| match c {
        Component::Normal(name) => Some(name),
        _ => None,
    });
    let Some(top) = normals.next() else {
        return Err(forbidden("it is the host's root directory"));
    };
    if normals.next().is_none() && FORBIDDEN_WORKDIRS.iter().any(|f| OsStr::new(f) == top) {
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
    check_private(role, resolved, private)?;
    check_no_link(role, path, &dir)?;
    Ok(dir)
}

/// The rootfs and the work directory may not hold one another: a workdir
/// holding the rootfs would let the agent rewrite its own system files for
/// the next run, and the other way round the workdir would be shadowed.
fn check_against_rootfs(workdir: &Path, rootfs: &Path) -> Result<(), SandboxError> {
    let forbidden = |reason| SandboxError::WorkdirForbidden {
        role: "workdir",
        path: workdir.to_path_buf(),
        reason,
    };
    if rootfs.starts_with(workdir) {
        return Err(forbidden("it contains the rootfs"));
    }
    if workdir.starts_with(rootfs) {
        return Err(forbidden("it lies inside the rootfs"));
    }
    let normals: Vec<&OsStr> = workdir
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    // The top-level entries of the rootfs are mounted read-only, so a
    // mount point below one of them must already exist in the rootfs.
    let Some(top) = normals.first().copied() else {
        return Ok(());
    };
    let top_in_rootfs = rootfs.join(top);
    if !layout::ROOTFS_SKIPPED.iter().any(|s| OsStr::new(s) == top)
        && std::fs::symlink_metadata(&top_in_rootfs).is_ok()
    {
        let relative: PathBuf = normals.iter().collect();
        let inside = rootfs.join(relative);
        if !inside.is_dir() {
            return Err(SandboxError::WorkdirMissingInRootfs {
                path: workdir.to_path_buf(),
                top: Path::new("/").join(top),
                missing: inside,
            });
        }
    }
    Ok(())
}

/// The most doors a sandbox has: with the name service's, all travel in
/// one message.
pub const MAX_DOORS: usize = layout::MAX_SOCKETS - layout::NAME_SOCKETS;

/// Door names: 1 to 32 of `a-z`, `0-9`, `-`, starting with a letter or
/// digit.
fn valid_door_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
}

fn check_doors(doors: &[Door]) -> Result<(), SandboxError> {
    if doors.len() > MAX_DOORS {
        return Err(SandboxError::TooManyDoors {
            count: doors.len(),
            max: MAX_DOORS,
        });
    }
    let mut names = BTreeSet::new();
    let mut addrs = BTreeSet::new();
    for door in doors {
        if !valid_door_name(&door.name) {
            return Err(SandboxError::InvalidDoorName {
                name: door.name.clone(),
            });
        }
        if !names.insert(door.name.as_str()) {
            return Err(SandboxError::DuplicateDoor {
                what: "name",
                value: door.name.clone(),
            });
        }
        let bad_addr = |reason| SandboxError::InvalidDoorAddress {
            name: door.name.clone(),
            listen: door.listen,
            reason,
        };
        if !door.listen.ip().is_loopback() {
            return Err(bad_addr("the sandbox has only loopback: use 127.0.0.1"));
        }
        if door.listen.port() < 1024 {
            return Err(bad_addr(
                "ports below 1024 are the name service's: use 1024 or above",
            ));
        }
        if !addrs.insert(door.listen) {
            return Err(SandboxError::DuplicateDoor {
                what: "listen address",
                value: door.listen.to_string(),
            });
        }
    }
    Ok(())
}

/// A Unix socket the caller bound on the host: the network's channel, or
/// the stdio socket.
fn check_host_socket(name: &str, path: &Path) -> Result<(), SandboxError> {
    let bad_socket = |reason: String| SandboxError::HostSocket {
        name: name.to_owned(),
        path: path.to_path_buf(),
        reason,
    };
    if !path.is_absolute() {
        return Err(bad_socket("it is not an absolute path".into()));
    }
    let meta = std::fs::metadata(path).map_err(|e| bad_socket(e.to_string()))?;
    if !meta.file_type().is_socket() {
        return Err(bad_socket("it is not a Unix socket".into()));
    }
    Ok(())
}

fn check_stage(path: &Path) -> Result<(), SandboxError> {
    let err = |reason: &str| SandboxError::Stage {
        path: path.to_path_buf(),
        reason: reason.into(),
    };
    let meta = std::fs::symlink_metadata(path).map_err(|e| err(&e.to_string()))?;
    if !meta.is_dir() {
        return Err(err("it is not a directory"));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(err(
            "it must be this user's own, and writable by no one else",
        ));
    }
    for parent in path.ancestors().skip(1) {
        let searchable = std::fs::metadata(parent).is_ok_and(|m| m.mode() & 0o001 != 0);
        if !searchable {
            return Err(err(&format!(
                "{} is closed to other users, so the agent could not reach what is staged there; \
                 use a directory under /tmp (set TMPDIR)",
                parent.display()
            )));
        }
    }
    Ok(())
}

/// Whether `path`, its links followed, lies inside `dir` (a real path).
fn lies_inside(path: &Path, dir: &Path) -> bool {
    path.canonicalize().is_ok_and(|real| real.starts_with(dir))
}

/// The constle executable: a file outside `dir`, the agent's writable
/// `role` directory.
fn check_exe(path: &Path, role: &str, dir: &Path) -> Result<(), SandboxError> {
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
    if lies_inside(path, dir) {
        return Err(err(format!(
            "it lies inside the {role}, where the agent could change it"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn door_names() {
        for ok in ["proxy", "mcp-accounting", "a", "0x", &"a".repeat(32)] {
            assert!(valid_door_name(ok), "{ok}");
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
            assert!(!valid_door_name(bad), "{bad}");
        }
    }
}

#[cfg(test)]
mod check_tests {
    use std::collections::BTreeMap;

    use super::*;

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
            stdio: CommandIo::Inherit,
            constle_exe: exe.clone(),
            private: vec![],
            stage: dir.path().to_path_buf(),
            cgroup_procs: vec![],
            host_id: None,
            tmpfs: TmpfsSizes::DEFAULT,
            workdir_inode: None,
            etc_files: BTreeMap::new(),
            home: None,
            home_inode: None,
            network: None,
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
        let door = |name: &str, listen: &str| Door {
            name: name.into(),
            listen: listen.parse().unwrap(),
        };
        let network = |doors: Vec<Door>, channel: &Path| Network {
            channel: channel.to_path_buf(),
            doors,
            name_service: None,
        };
        let mut ok = base.clone();
        ok.network = Some(network(
            vec![
                door("proxy", "127.0.0.1:3128"),
                door("mcp-a", "127.0.0.1:3129"),
            ],
            &sock_path,
        ));
        ok.check().unwrap();
        let with = |doors: Vec<Door>, channel: &Path| {
            let mut s = base.clone();
            s.network = Some(network(doors, channel));
            s.check().unwrap_err()
        };
        assert!(matches!(
            with(vec![door("Proxy", "127.0.0.1:3128")], &sock_path),
            SandboxError::InvalidDoorName { .. }
        ));
        assert!(matches!(
            with(
                vec![door("a", "127.0.0.1:3128"), door("a", "127.0.0.1:3129")],
                &sock_path
            ),
            SandboxError::DuplicateDoor { what: "name", .. }
        ));
        assert!(matches!(
            with(
                vec![door("a", "127.0.0.1:3128"), door("b", "127.0.0.1:3128")],
                &sock_path
            ),
            SandboxError::DuplicateDoor {
                what: "listen address",
                ..
            }
        ));
        let many = (0..=MAX_DOORS as u16)
            .map(|i| door(&format!("d{i}"), &format!("127.0.0.1:{}", 2000 + i)))
            .collect();
        assert!(matches!(
            with(many, &sock_path),
            SandboxError::TooManyDoors { .. }
        ));
        assert!(matches!(
            with(vec![door("a", "10.0.0.1:3128")], &sock_path),
            SandboxError::InvalidDoorAddress { .. }
        ));
        assert!(matches!(
            with(vec![door("a", "127.0.0.1:53")], &sock_path),
            SandboxError::InvalidDoorAddress { .. }
        ));
        assert!(matches!(
            with(vec![], &exe),
            SandboxError::HostSocket { .. }
        ));
        // A channel the agent could reach: in the work directory.
        let inside = work.path().join("network.sock");
        let _shown = std::os::unix::net::UnixListener::bind(&inside).unwrap();
        assert!(matches!(
            with(vec![], &inside),
            SandboxError::RunFileShown {
                what: "network channel",
                role: "work directory",
                ..
            }
        ));
        assert!(matches!(
            with(vec![], &dir.path().join("none")),
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
            stdio: CommandIo::Inherit,
            constle_exe: exe,
            private: vec![],
            stage: host.path().to_path_buf(),
            cgroup_procs: vec![],
            host_id: None,
            tmpfs: TmpfsSizes::DEFAULT,
            workdir_inode: None,
            etc_files: BTreeMap::new(),
            home: None,
            home_inode: None,
            network: None,
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
    fn refuses_a_workdir_that_shows_something_private() {
        let host = tempfile::tempdir().unwrap();
        let root = host.path().canonicalize().unwrap();
        let home = root.join("home");
        let work = root.join("project/work");
        std::fs::create_dir_all(home.join("keys")).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let agentfile = root.join("project/agent.yaml");
        std::fs::write(&agentfile, "name: a\n").unwrap();
        // A link an earlier run planted in its workdir, pointing home.
        std::os::unix::fs::symlink(&home, work.join("planted")).unwrap();
        let spec = |workdir: PathBuf| SandboxSpec {
            command: vec!["true".into()],
            workdir,
            env: BTreeMap::new(),
            rootfs: None,
            stdio: CommandIo::Inherit,
            constle_exe: "/usr/bin/true".into(),
            private: vec![
                Private {
                    what: "CONSTLE_HOME".into(),
                    path: home.clone(),
                },
                Private {
                    what: "the Agentfile".into(),
                    path: agentfile.clone(),
                },
            ],
            stage: host.path().to_path_buf(),
            cgroup_procs: vec![],
            host_id: None,
            tmpfs: TmpfsSizes::DEFAULT,
            workdir_inode: None,
            etc_files: BTreeMap::new(),
            home: None,
            home_inode: None,
            network: None,
        };
        spec(work.clone()).check().unwrap();
        for (workdir, relation) in [
            (work.join("planted"), "is"),
            (work.join("planted/keys"), "lies inside"),
            (home.join("keys/../keys"), "lies inside"),
            (work.join(".."), "contains"),
            (root.clone(), "contains"),
        ] {
            match spec(workdir.clone()).check() {
                Err(SandboxError::Exposes { relation: r, .. }) => {
                    assert_eq!(r, relation, "{workdir:?}")
                }
                other => panic!("{workdir:?}: {other:?}"),
            }
        }
        // A link to any other directory is refused too: the next run would
        // write wherever an earlier one pointed it.
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, work.join("out")).unwrap();
        assert!(matches!(
            spec(work.join("out")).check(),
            Err(SandboxError::ThroughLink { .. })
        ));
        spec(work.join("sub/..")).check().unwrap_err();
        std::fs::create_dir(work.join("sub")).unwrap();
        spec(work.join("sub/..")).check().unwrap();
        let mut with_rootfs = spec(work.clone());
        with_rootfs.rootfs = Some(work.join("planted"));
        assert!(matches!(
            with_rootfs.check(),
            Err(SandboxError::Exposes { role: "rootfs", .. })
        ));
    }
}

#[cfg(test)]
mod home_tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A spec with work directory `root/work` and home `root/home`, both
    /// made.
    fn spec(root: &Path) -> SandboxSpec {
        for dir in ["work", "home"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        SandboxSpec {
            command: vec!["true".into()],
            workdir: root.join("work"),
            env: BTreeMap::new(),
            rootfs: None,
            stdio: CommandIo::Inherit,
            constle_exe: "/usr/bin/true".into(),
            private: vec![],
            stage: root.to_path_buf(),
            cgroup_procs: vec![],
            host_id: None,
            tmpfs: TmpfsSizes::DEFAULT,
            workdir_inode: None,
            home: Some(root.join("home")),
            home_inode: None,
            network: None,
            etc_files: BTreeMap::new(),
        }
    }

    fn refused(spec: &SandboxSpec) -> SandboxError {
        spec.check().unwrap_err()
    }

    #[test]
    fn a_home_is_checked_as_a_work_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ok = spec(&root);
        let checked = ok.check().unwrap();
        assert_eq!(checked.home.unwrap().path, root.join("home"));

        let with = |home: PathBuf| SandboxSpec {
            home: Some(home),
            ..ok.clone()
        };
        assert!(matches!(
            refused(&with("relative".into())),
            SandboxError::WorkdirNotAbsolute { role: "home", .. }
        ));
        assert!(matches!(
            refused(&with(root.join("missing"))),
            SandboxError::Workdir { role: "home", .. }
        ));
        std::fs::write(root.join("file"), b"").unwrap();
        assert!(matches!(
            refused(&with(root.join("file"))),
            SandboxError::WorkdirNotDir { role: "home", .. }
        ));
        for system in ["/", "/etc", "/home", "/tmp", "/proc/self", "/dev"] {
            assert!(
                matches!(
                    refused(&with(system.into())),
                    SandboxError::WorkdirForbidden { role: "home", .. }
                ),
                "{system}"
            );
        }
        // A link planted where the home is named.
        std::fs::create_dir(root.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("planted")).unwrap();
        assert!(matches!(
            refused(&with(root.join("planted"))),
            SandboxError::ThroughLink { role: "home", .. }
        ));
        let mut private = ok.clone();
        private.private = vec![Private {
            what: "CONSTLE_HOME".into(),
            path: root.join("home/.constle"),
        }];
        assert!(matches!(
            refused(&private),
            SandboxError::Exposes { role: "home", .. }
        ));
    }

    #[test]
    fn a_home_stands_apart_from_the_work_directory_and_the_rootfs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ok = spec(&root);
        std::fs::create_dir_all(root.join("work/sub")).unwrap();
        for (home, relation) in [
            (root.join("work"), "is"),
            (root.join("work/sub"), "lies inside"),
        ] {
            let s = SandboxSpec {
                home: Some(home.clone()),
                ..ok.clone()
            };
            match refused(&s) {
                SandboxError::HomeOverlaps { relation: r, .. } => assert_eq!(r, relation),
                other => panic!("{home:?}: {other:?}"),
            }
        }
        let holds = SandboxSpec {
            workdir: root.join("home/work"),
            ..ok.clone()
        };
        std::fs::create_dir_all(root.join("home/work")).unwrap();
        assert!(matches!(
            refused(&holds),
            SandboxError::HomeOverlaps {
                relation: "holds",
                ..
            }
        ));
        std::fs::create_dir_all(root.join("rootfs/usr")).unwrap();
        let in_rootfs = SandboxSpec {
            rootfs: Some(root.join("rootfs")),
            home: Some(root.join("rootfs/usr")),
            ..ok.clone()
        };
        assert!(matches!(
            refused(&in_rootfs),
            SandboxError::HomeOverlaps {
                what: "the rootfs",
                ..
            }
        ));
        let exe = root.join("home/constle");
        std::fs::write(&exe, b"").unwrap();
        let exe_inside = SandboxSpec {
            constle_exe: exe,
            ..ok.clone()
        };
        match refused(&exe_inside) {
            SandboxError::ConstleExe { reason, .. } => assert!(reason.contains("the home")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_home_replaced_after_its_check_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut s = spec(&root);
        let held = open_dir(&root.join("home")).unwrap().inode;
        s.home_inode = Some(held);
        s.check().unwrap();
        std::fs::rename(root.join("home"), root.join("old-home")).unwrap();
        std::fs::create_dir(root.join("home")).unwrap();
        assert!(matches!(
            refused(&s),
            SandboxError::WorkdirReplaced { role: "home", .. }
        ));
    }
}
