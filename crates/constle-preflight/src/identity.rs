//! Who runs constle: the user, whether root, whether `CAP_SYS_ADMIN` is in
//! the effective set, and so which path the sandbox takes.

use nix::unistd::{User, geteuid};

use crate::report::{Check, CheckId, Fixes, Status};

/// `CAP_SYS_ADMIN`'s bit in the capability sets of `/proc/self/status`.
const CAP_SYS_ADMIN: u32 = 21;

/// Whether a run by this process takes the root path (a host id of the
/// run's own, the work directory idmapped): root with `CAP_SYS_ADMIN` in
/// its effective set. Root without it (every default container) cannot
/// make the mounts that path needs, so the unprivileged path applies.
pub fn root_path() -> bool {
    geteuid().is_root() && sys_admin(&status())
}

/// This process's `/proc/self/status`, or nothing when it cannot be read.
pub(crate) fn status() -> String {
    std::fs::read_to_string("/proc/self/status").unwrap_or_default()
}

/// Whether the `CapEff:` line of a `/proc/<pid>/status` text holds
/// `CAP_SYS_ADMIN`.
pub(crate) fn sys_admin(status: &str) -> bool {
    status_field(status, "CapEff")
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// The value of field `name` in a `/proc/<pid>/status` text.
pub(crate) fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// The `user` check: always there; says which path a run takes.
pub(crate) fn check() -> Check {
    let uid = geteuid();
    let name = User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| "no name".to_owned(), |u| u.name);
    Check {
        id: CheckId::User,
        required: false,
        status: Status::Ok,
        finding: finding(uid.as_raw(), &name, sys_admin(&status())),
        fixes: Fixes::NONE,
    }
}

/// The `user` finding for uid `uid` named `name`.
pub(crate) fn finding(uid: u32, name: &str, sys_admin: bool) -> String {
    match (uid, sys_admin) {
        (0, true) => format!(
            "user: uid 0 ({name}) with CAP_SYS_ADMIN: the root path (the agent gets a host id of \
             the run's own; its work directory is idmapped)"
        ),
        (0, false) => format!(
            "user: uid 0 ({name}) without CAP_SYS_ADMIN (a default container): the unprivileged \
             path applies"
        ),
        (uid, _) => format!("user: uid {uid} ({name}), not root: the unprivileged path"),
    }
}
