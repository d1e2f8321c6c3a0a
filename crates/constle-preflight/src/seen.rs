//! What the machine shows without probing: the sysctls that gate user
//! namespaces, whether a seccomp filter or an AppArmor profile confines
//! this process, what is mounted over `/proc`, and which file system holds
//! a path. Reading is here; the texts are parsed by pure functions.

use std::path::Path;

use constle_limits::unescape_mountinfo as unescape;

/// `user.max_user_namespaces`.
const MAX_USER_NAMESPACES: &str = "/proc/sys/user/max_user_namespaces";
/// `kernel.unprivileged_userns_clone` (Debian's and Ubuntu's kernels).
const UNPRIVILEGED_USERNS_CLONE: &str = "/proc/sys/kernel/unprivileged_userns_clone";
/// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10 and later).
const APPARMOR_RESTRICT: &str = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns";

/// What the machine shows; each sysctl `None` where this kernel has none
/// (or it cannot be read).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub max_user_namespaces: Option<u64>,
    pub unprivileged_userns_clone: Option<u64>,
    pub apparmor_restrict: Option<u64>,
    /// Whether a seccomp filter is on this process (`Seccomp: 2`), and so
    /// on the probe process it starts.
    pub seccomp_filter: bool,
    /// The AppArmor profile confining this process, unless unconfined.
    pub apparmor_profile: Option<String>,
    /// Mount points below `/proc` (what a container masks `/proc` with).
    pub proc_overmounts: Vec<String>,
    /// This process's effective capabilities (`CapEff`, in hex), which the
    /// probe's outcome depends on too; `None` where they cannot be read.
    pub effective_caps: Option<String>,
}

impl Seen {
    /// What this machine shows to this process.
    pub(crate) fn read() -> Seen {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let status = crate::identity::status();
        let field = |name| crate::identity::status_field(&status, name);
        Seen {
            max_user_namespaces: sysctl(MAX_USER_NAMESPACES),
            unprivileged_userns_clone: sysctl(UNPRIVILEGED_USERNS_CLONE),
            apparmor_restrict: sysctl(APPARMOR_RESTRICT),
            seccomp_filter: field("Seccomp") == Some("2"),
            apparmor_profile: std::fs::read_to_string("/proc/self/attr/current")
                .ok()
                .and_then(|label| apparmor_profile(&label)),
            proc_overmounts: proc_overmounts(&mountinfo),
            effective_caps: field("CapEff").map(str::to_owned),
        }
    }

    /// Whether anything shown could refuse the sandbox's namespaces: a
    /// seccomp filter or AppArmor profile on this process, a sysctl that
    /// limits user namespaces, or mounts over `/proc`. With none of them
    /// (a host), the kernel allows what bwrap does.
    pub(crate) fn could_refuse_namespaces(&self) -> bool {
        self.seccomp_filter
            || self.apparmor_profile.is_some()
            || !self.proc_overmounts.is_empty()
            || self.max_user_namespaces == Some(0)
            || self.unprivileged_userns_clone == Some(0)
            || self.apparmor_restrict.is_some_and(|v| v != 0)
    }

    /// The user-namespace sysctls this kernel has, as `name=value`.
    pub(crate) fn userns_sysctls(&self) -> Vec<String> {
        [
            (
                "kernel.unprivileged_userns_clone",
                self.unprivileged_userns_clone,
            ),
            ("user.max_user_namespaces", self.max_user_namespaces),
            (
                "kernel.apparmor_restrict_unprivileged_userns",
                self.apparmor_restrict,
            ),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some(format!("{name}={}", value?)))
        .collect()
    }
}

fn sysctl(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The profile in an AppArmor label (`docker-default (enforce)`), unless it
/// is `unconfined`.
pub(crate) fn apparmor_profile(label: &str) -> Option<String> {
    let profile = label.trim_end_matches(['\0', '\n']).trim();
    match profile {
        "" | "unconfined" => None,
        profile => Some(profile.to_owned()),
    }
}

/// The mount points strictly below `/proc` in a `mountinfo` text.
pub(crate) fn proc_overmounts(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with("/proc/"))
        .map(unescape)
        .collect()
}

/// The file system type of the mount holding `path` (a real path), from a
/// `mountinfo` text: the last mount whose point is `path` or an ancestor.
pub(crate) fn fs_type(mountinfo: &str, path: &Path) -> Option<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let point = unescape(line.split(' ').nth(4)?);
            let (_, after) = line.split_once(" - ")?;
            let fstype = after.split(' ').next()?;
            path.starts_with(&point).then(|| (point, fstype.to_owned()))
        })
        .max_by_key(|(point, _)| point.len())
        .map(|(_, fstype)| fstype)
}

/// The file system type of the mount holding `path`, on this machine.
pub(crate) fn fs_type_here(path: &Path) -> Option<String> {
    fs_type(&std::fs::read_to_string("/proc/self/mountinfo").ok()?, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw,nosuid - proc proc rw
24 23 0:5 /null /proc/kcore ro - devtmpfs udev rw
25 23 0:21 /sys /proc/sys ro - proc proc rw
26 22 0:30 / /srv/my\\040work rw - xfs /dev/sdb rw
27 22 0:31 / /srv rw - tmpfs tmpfs rw
";

    #[test]
    fn overmounts_below_proc_only() {
        assert_eq!(proc_overmounts(MOUNTINFO), ["/proc/kcore", "/proc/sys"]);
    }

    #[test]
    fn the_deepest_mount_holds_a_path() {
        let at = |p: &str| fs_type(MOUNTINFO, Path::new(p));
        assert_eq!(at("/srv/my work/agent").as_deref(), Some("xfs"));
        assert_eq!(at("/srv/other").as_deref(), Some("tmpfs"));
        assert_eq!(at("/srv/my").as_deref(), Some("tmpfs"));
        assert_eq!(at("/home/me").as_deref(), Some("ext4"));
    }

    #[test]
    fn apparmor_labels() {
        assert_eq!(apparmor_profile("unconfined\n"), None);
        assert_eq!(
            apparmor_profile("docker-default (enforce)\n").as_deref(),
            Some("docker-default (enforce)")
        );
    }

    #[test]
    fn sysctls_listed_when_present() {
        let seen = Seen {
            max_user_namespaces: Some(63_000),
            ..Seen::default()
        };
        assert_eq!(seen.userns_sysctls(), ["user.max_user_namespaces=63000"]);
    }
}
