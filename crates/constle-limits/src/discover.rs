//! Where this process's cgroups are.
//!
//! Read from two texts, so that tests can describe any machine:
//! `/proc/self/mountinfo` says where each hierarchy is mounted (a `cgroup2`
//! mount, and `cgroup` mounts whose options name their v1 controllers), and
//! `/proc/self/cgroup` says which cgroup of each hierarchy this process is
//! in (`0::/path` for v2, `4:memory:/path` for v1).

use std::path::{Path, PathBuf};

use crate::{Controller, LimitsError, cgfs};

/// The cgroups this process can reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Host {
    /// This process's id: run cgroups are named after it.
    pub pid: u32,
    /// The directory of this process's cgroup v2 group, when a v2
    /// hierarchy is mounted and that group is visible in it. Runs are made
    /// under it. When constle has moved itself into its own leaf there
    /// ([`self_leaf`]), this is the leaf's parent.
    pub v2: Option<PathBuf>,
    /// Each mounted v1 hierarchy that has controllers, with the directory of
    /// this process's cgroup in it.
    pub v1: Vec<V1Hierarchy>,
}

/// A mounted cgroup v1 hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct V1Hierarchy {
    /// Its controllers, as `/proc/self/cgroup` names them (`cpu`, `cpuacct`).
    pub controllers: Vec<String>,
    /// The directory of this process's cgroup in it.
    pub dir: PathBuf,
}

/// The v2 leaf constle moves itself into when its own cgroup must hand
/// controllers down ("no internal processes"): `constle-<pid>-self`.
pub(crate) fn self_leaf(pid: u32) -> String {
    format!("constle-{pid}-self")
}

/// One line of `/proc/self/mountinfo` that mounts a cgroup hierarchy.
struct Mount {
    /// The hierarchy's path that is mounted (`/` unless a namespace or a
    /// bind mount shows only part of it).
    root: String,
    point: PathBuf,
    v2: bool,
    /// The super options: for v1, the controllers (`rw,cpu,cpuacct`).
    options: String,
}

impl Host {
    /// This process's cgroups, from `/proc/self`.
    pub fn current() -> Result<Host, LimitsError> {
        let mountinfo = cgfs::read(Path::new("/proc/self/mountinfo"))?;
        let cgroup = cgfs::read(Path::new("/proc/self/cgroup"))?;
        Ok(Host::parse(&mountinfo, &cgroup, std::process::id()))
    }

    /// The cgroups described by a `mountinfo` and a `cgroup` text, for the
    /// process `pid`.
    pub fn parse(mountinfo: &str, cgroup: &str, pid: u32) -> Host {
        let mounts: Vec<Mount> = mountinfo.lines().filter_map(mount).collect();
        let mut host = Host {
            pid,
            v2: None,
            v1: Vec::new(),
        };
        for line in cgroup.lines() {
            let mut fields = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                host.v2 = locate(&mounts, true, |_| true, path).map(|dir| strip_leaf(dir, pid));
            } else if let Some(first) = controllers.split(',').next().filter(|c| is_v1(c)) {
                let has = |m: &Mount| m.options.split(',').any(|o| o == first);
                if let Some(dir) = locate(&mounts, false, has, path) {
                    let controllers = controllers.split(',').map(str::to_owned).collect();
                    host.v1.push(V1Hierarchy { controllers, dir });
                }
            }
        }
        host
    }

    /// The v1 hierarchy that holds `controller`.
    pub fn v1_for(&self, controller: Controller) -> Option<&V1Hierarchy> {
        self.v1
            .iter()
            .find(|h| h.controllers.iter().any(|c| c == controller.name()))
    }
}

/// A v1 controller, as opposed to a named hierarchy (`name=systemd`).
fn is_v1(controller: &str) -> bool {
    !controller.is_empty() && !controller.starts_with("name=")
}

/// Parses a mountinfo line: `id parent maj:min root point options
/// [optional…] - fstype source super-options`.
fn mount(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let mut before = before.split(' ');
    let root = unescape(before.nth(3)?);
    let point = PathBuf::from(unescape(before.next()?));
    let mut after = after.split(' ');
    let v2 = match after.next()? {
        "cgroup2" => true,
        "cgroup" => false,
        _ => return None,
    };
    let options = after.nth(1).unwrap_or_default().to_owned();
    Some(Mount {
        root,
        point,
        v2,
        options,
    })
}

/// A field of `/proc/<pid>/mountinfo` as it is: mountinfo writes space,
/// tab, newline and backslash as `\ooo`, which this undoes.
pub fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The directory of cgroup `path` under the first matching mount that shows
/// it; `None` when no mount does (the cgroup lies outside what is mounted).
fn locate(
    mounts: &[Mount],
    v2: bool,
    matches: impl Fn(&Mount) -> bool,
    path: &str,
) -> Option<PathBuf> {
    mounts
        .iter()
        .filter(|m| m.v2 == v2 && matches(m))
        .find_map(|m| {
            let relative = Path::new(path).strip_prefix(&m.root).ok()?;
            // Joining an empty path would add a trailing `/`.
            Some(if relative.as_os_str().is_empty() {
                m.point.clone()
            } else {
                m.point.join(relative)
            })
        })
}

/// The parent of constle's own leaf, when `dir` is that leaf.
fn strip_leaf(dir: PathBuf, pid: u32) -> PathBuf {
    match (dir.file_name(), dir.parent()) {
        (Some(name), Some(parent)) if name == self_leaf(pid).as_str() => parent.to_path_buf(),
        _ => dir,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's kind: v2 mounted at `unified` with no controllers of
    /// ours, memory, pids and cpu (and cpuacct alone) in v1.
    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str = "\
9:name=systemd:/
8:pids:/
4:memory:/process_api/2ea3
2:cpuacct:/
1:cpu:/
0::/
";

    #[test]
    fn hybrid() {
        let host = Host::parse(HYBRID_MOUNTS, HYBRID_CGROUP, 7);
        assert_eq!(
            host.v2.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        let dir = |c| host.v1_for(c).map(|h| h.dir.clone());
        assert_eq!(
            dir(Controller::Memory),
            Some("/sys/fs/cgroup/memory/process_api/2ea3".into())
        );
        assert_eq!(dir(Controller::Pids), Some("/sys/fs/cgroup/pids".into()));
        assert_eq!(dir(Controller::Cpu), Some("/sys/fs/cgroup/cpu".into()));
        // The named systemd hierarchy has no controller to offer.
        assert_eq!(host.v1.len(), 4);
    }

    #[test]
    fn pure_v2_in_a_user_scope() {
        let mounts =
            "26 1 0:23 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        let scope = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-u5.scope";
        let host = Host::parse(mounts, &format!("0::{scope}\n"), 7);
        assert_eq!(
            host.v2,
            Some(PathBuf::from(format!("/sys/fs/cgroup{scope}")))
        );
        assert!(host.v1.is_empty());
        assert_eq!(host.v1_for(Controller::Memory), None);

        // Once constle has moved into its own leaf, runs still go beside it.
        let leaf = format!("0::{scope}/constle-7-self\n");
        assert_eq!(
            Host::parse(mounts, &leaf, 7).v2,
            Some(PathBuf::from(format!("/sys/fs/cgroup{scope}")))
        );
        // Another process's leaf is just a cgroup.
        let other = format!("0::{scope}/constle-8-self\n");
        assert!(
            Host::parse(mounts, &other, 7)
                .v2
                .unwrap()
                .ends_with("constle-8-self")
        );
    }

    #[test]
    fn co_mounted_v1_and_a_container_root() {
        // A container sees its own part of each hierarchy as `/`, mounted
        // from the host's path: the mount's root is that path.
        let mounts = "\
40 30 0:40 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct
41 30 0:41 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
";
        let cgroup = "5:cpu,cpuacct:/docker/abc/run\n4:memory:/elsewhere\n";
        let host = Host::parse(mounts, cgroup, 7);
        assert_eq!(host.v1.len(), 1);
        let cpu = host.v1_for(Controller::Cpu).unwrap();
        assert_eq!(cpu.dir, Path::new("/sys/fs/cgroup/cpu,cpuacct/run"));
        assert_eq!(cpu.controllers, ["cpu", "cpuacct"]);
        // The memory cgroup lies outside what is mounted: unreachable.
        assert_eq!(host.v1_for(Controller::Memory), None);
        assert_eq!(host.v2, None);
    }

    #[test]
    fn escaped_mount_points() {
        let mounts = "41 31 0:38 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n";
        let host = Host::parse(mounts, "0::/a\n", 1);
        assert_eq!(host.v2.as_deref(), Some(Path::new("/mnt/my cgroups/a")));
        assert_eq!(unescape("a\\134b\\"), "a\\b\\");
    }

    #[test]
    fn nothing_mounted() {
        let host = Host::parse("", "0::/\n4:memory:/\n", 1);
        assert_eq!(host.v2, None);
        assert!(host.v1.is_empty());
    }
}
