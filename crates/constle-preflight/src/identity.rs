//! Who runs constle: the user, whether root, whether `CAP_SYS_ADMIN` is in
//! the effective set, and so which path the sandbox takes.

use constle_hostids::Starter;
use nix::unistd::{User, geteuid};

use crate::report::{Check, CheckId, Fixes, Status};

/// This process's `/proc/self/status`, or nothing when it cannot be read.
pub(crate) fn status() -> String {
    std::fs::read_to_string("/proc/self/status").unwrap_or_default()
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
        finding: finding(uid.as_raw(), &name, constle_hostids::starter()),
        fixes: Fixes::NONE,
    }
}

/// The `user` finding for uid `uid` named `name`.
pub(crate) fn finding(uid: u32, name: &str, starter: Starter) -> String {
    match starter {
        Starter::PrivilegedRoot => format!(
            "user: uid 0 ({name}) with CAP_SYS_ADMIN: the root path (the agent gets a host id of \
             the run's own; its work directory is idmapped)"
        ),
        Starter::RootWithoutSysAdmin => format!(
            "user: uid 0 ({name}) without CAP_SYS_ADMIN (a default container): the unprivileged \
             path applies"
        ),
        _ => format!("user: uid {uid} ({name}), not root: the unprivileged path"),
    }
}
