//! From what was seen and what the probes did to a status, a one-line
//! finding and the fixes: pure functions, so that each cause is tested
//! without a container (`classify/tests.rs`).

#[cfg(test)]
mod tests;

use std::path::Path;

use crate::fixes;
use crate::report::{Check, CheckId, Fixes, Status};
use crate::seen::Seen;
use crate::steps::{Outcome, Probes, Step, errno_name};

/// A check's status, finding and fixes, before it is given its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub status: Status,
    pub finding: String,
    pub fixes: Fixes,
}

impl Verdict {
    fn ok(finding: String) -> Verdict {
        Verdict {
            status: Status::Ok,
            finding,
            fixes: Fixes::NONE,
        }
    }

    fn missing(finding: String, fixes: Fixes) -> Verdict {
        Verdict {
            status: Status::Missing,
            finding,
            fixes,
        }
    }

    pub(crate) fn unknown(finding: String) -> Verdict {
        Verdict {
            status: Status::Unknown,
            finding,
            fixes: Fixes::NONE,
        }
    }

    /// The check `id`, `required` or not.
    pub(crate) fn check(self, id: CheckId, required: bool) -> Check {
        Check {
            id,
            required,
            status: self.status,
            finding: self.finding,
            fixes: self.fixes,
        }
    }
}

/// What keeps user namespaces from this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocker {
    /// Nothing: they work.
    None,
    /// A seccomp filter: the system-call check tells which calls.
    Seccomp,
    /// Something else (a sysctl, AppArmor, the kernel): the other
    /// namespace checks cannot be told while it stands.
    Other,
}

/// The `user_namespaces` check, and what blocks them.
pub(crate) fn user_namespaces(probes: &Probes, seen: &Seen) -> (Verdict, Blocker) {
    let (what, errno, after_unshare) = match (probes.get(Step::Userns), probes.get(Step::Maps)) {
        (Some(Outcome::Ok), Some(Outcome::Ok)) => {
            let finding = "user namespaces: available (unshare(CLONE_NEWUSER) and the new \
                           namespace's uid and gid maps work)";
            return (Verdict::ok(finding.to_owned()), Blocker::None);
        }
        (Some(Outcome::Errno(e)), _) => ("unshare(CLONE_NEWUSER) returned", e, false),
        (Some(Outcome::Ok), Some(Outcome::Errno(e))) => (
            "unshare(CLONE_NEWUSER) worked but writing the new namespace's uid and gid maps returned",
            e,
            true,
        ),
        _ => {
            let finding = "user namespaces: not told (the probe process did not say)";
            return (Verdict::unknown(finding.to_owned()), Blocker::Other);
        }
    };
    let what = format!("{what} {}", errno_name(errno));
    let (finding, fixes, blocker) = userns_cause(&what, errno, after_unshare, seen);
    (
        Verdict::missing(format!("user namespaces: {finding}"), fixes),
        blocker,
    )
}

/// Why user namespaces were refused: `what` failed with `errno`, after
/// `unshare` itself worked or not. The sysctls come first (they hold
/// whatever else is on), then AppArmor where the namespace was made but
/// not usable, then seccomp where `unshare` itself was refused.
fn userns_cause(
    what: &str,
    errno: i32,
    after_unshare: bool,
    seen: &Seen,
) -> (String, Fixes, Blocker) {
    let sysctls = seen.userns_sysctls().join(" and ");
    if seen.max_user_namespaces == Some(0) {
        return (
            format!("disabled by sysctl user.max_user_namespaces=0 ({what})"),
            fixes::host_sysctl("user.max_user_namespaces=15000"),
            Blocker::Other,
        );
    }
    let (finding, fixes) = if errno == libc::ENOSPC {
        let finding = format!(
            "the limit is reached ({what} while {sysctls}): constle may be inside a sandbox that \
             allows no nested user namespace"
        );
        (finding, Fixes::NONE)
    } else if errno == libc::EINVAL && !after_unshare {
        (format!("this kernel has none ({what})"), Fixes::NONE)
    } else if seen.unprivileged_userns_clone == Some(0) {
        (
            format!("disabled by sysctl kernel.unprivileged_userns_clone=0 ({what})"),
            fixes::host_sysctl("kernel.unprivileged_userns_clone=1"),
        )
    } else if seen.apparmor_restrict == Some(1) && (after_unshare || !seen.seccomp_filter) {
        (
            format!("blocked by AppArmor ({what} while {sysctls})"),
            fixes::apparmor_userns(),
        )
    } else if seen.seccomp_filter && !after_unshare {
        return (
            format!("blocked by seccomp ({what} while {sysctls})"),
            fixes::seccomp(),
            Blocker::Seccomp,
        );
    } else {
        let filter = match seen.seccomp_filter {
            true => "a seccomp filter on this process",
            false => "no seccomp filter on this process",
        };
        let finding = format!(
            "refused for a cause constle cannot tell ({what} while {sysctls}, with {filter})"
        );
        (finding, Fixes::NONE)
    };
    (finding, fixes, Blocker::Other)
}

/// The system calls bubblewrap makes, each with the probe step that tried it.
const SYSTEM_CALLS: [(&str, Step); 6] = [
    ("clone with namespace flags", Step::Clone),
    ("unshare", Step::Unshare),
    ("mount", Step::Mount),
    ("umount2", Step::Umount2),
    ("pivot_root", Step::PivotRoot),
    ("sethostname", Step::Sethostname),
];

/// The `system_calls` check.
pub(crate) fn system_calls(probes: &Probes, seen: &Seen, blocker: Blocker) -> Verdict {
    if blocker == Blocker::Other {
        return Verdict::unknown(
            "system calls bwrap needs: not told apart while user namespaces are off (see \
             user_namespaces)"
                .to_owned(),
        );
    }
    let outcome = |step: Step| match (step, probes.get(Step::Userns)) {
        // unshare(CLONE_NEWUSER) is the first unshare: refused, it says.
        (Step::Unshare, Some(refused @ Outcome::Errno(_))) => Some(refused),
        (step, _) => probes.get(step),
    };
    let mut refused = Vec::new();
    let mut untried = Vec::new();
    let mut apparmor = false;
    for (name, step) in SYSTEM_CALLS {
        match outcome(step) {
            Some(Outcome::Ok) => {}
            Some(Outcome::Errno(e)) => {
                apparmor |= e == libc::EACCES;
                refused.push(format!("{name} ({})", errno_name(e)));
            }
            Some(Outcome::Skipped) | None => untried.push(name),
        }
    }
    let mut finding = "system calls bwrap needs: ".to_owned();
    match (refused.is_empty(), untried.is_empty()) {
        (true, true) => {
            let all: Vec<&str> = SYSTEM_CALLS.iter().map(|(name, _)| *name).collect();
            finding.push_str(&format!("all allowed ({})", all.join(", ")));
            return Verdict::ok(finding);
        }
        (true, false) => {
            finding.push_str(&format!("not tried: {}", untried.join(", ")));
            return Verdict::unknown(finding);
        }
        (false, _) => {}
    }
    let (by, fixes) = match (&seen.apparmor_profile, apparmor) {
        (Some(profile), true) => (
            format!("AppArmor (profile {profile})"),
            fixes::apparmor_mount(),
        ),
        _ if seen.seccomp_filter => ("seccomp".to_owned(), fixes::seccomp()),
        _ => ("a cause constle cannot tell".to_owned(), Fixes::NONE),
    };
    finding.push_str(&format!("refused by {by}: {}", refused.join(", ")));
    if !untried.is_empty() {
        finding.push_str(&format!("; not tried after that: {}", untried.join(", ")));
    }
    Verdict::missing(finding, fixes)
}

/// The `proc_mount` check.
pub(crate) fn proc_mount(probes: &Probes, seen: &Seen, blocker: Blocker) -> Verdict {
    let errno = match (probes.get(Step::Proc), blocker) {
        (Some(Outcome::Ok), _) => {
            return Verdict::ok("/proc: a fresh proc mounts in a new PID namespace".to_owned());
        }
        (Some(Outcome::Errno(e)), _) => e,
        (_, Blocker::None) => {
            return Verdict::unknown("/proc: not tried (the probe process did not say)".to_owned());
        }
        _ => {
            return Verdict::unknown(
                "/proc: not tried without a user and PID namespace (see user_namespaces)"
                    .to_owned(),
            );
        }
    };
    let tried = format!(
        "mounting proc in a new user, PID and mount namespace returned {}",
        errno_name(errno)
    );
    let masked = &seen.proc_overmounts;
    if masked.is_empty() {
        return Verdict::missing(
            format!("/proc: cannot mount a fresh proc ({tried}; nothing is mounted over /proc)"),
            Fixes::NONE,
        );
    }
    let shown: Vec<&str> = masked.iter().take(3).map(String::as_str).collect();
    let more = if masked.len() > shown.len() {
        ", …"
    } else {
        ""
    };
    Verdict::missing(
        format!(
            "/proc: masked, so a fresh proc cannot be mounted ({tried}; {} paths under /proc are \
             mounted over: {}{more})",
            masked.len(),
            shown.join(", ")
        ),
        fixes::unmask_proc(),
    )
}

/// The `idmapped_mounts` check for the work directory `dir` on a file
/// system of type `fs_type`, given how making the idmapped copy went.
pub(crate) fn idmapped(
    dir: &Path,
    fs_type: Option<&str>,
    made: Result<(), std::io::Error>,
) -> Verdict {
    let on = format!(
        "{} ({})",
        dir.display(),
        fs_type.unwrap_or("file system unknown")
    );
    let err = match made {
        Ok(()) => return Verdict::ok(format!("idmapped mounts: supported on {on}")),
        Err(err) => err,
    };
    let tried = format!("open_tree and mount_setattr(MOUNT_ATTR_IDMAP) returned: {err}");
    match err.raw_os_error() {
        Some(libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS) => Verdict::missing(
            format!("idmapped mounts: unsupported by this file system, {on} ({tried})"),
            fixes::not_root(
                ", or the work directory on a volume whose file system supports them (ext4, \
                 xfs, btrfs; tmpfs from Linux 6.3)",
            ),
        ),
        Some(libc::EPERM | libc::EACCES) => Verdict::missing(
            format!(
                "idmapped mounts: not permitted on {on} ({tried}): this root does not own the \
                 mount, as in a container with a user namespace of its own"
            ),
            fixes::not_root(""),
        ),
        _ => Verdict::missing(
            format!("idmapped mounts: failed on {on} ({tried})"),
            Fixes::NONE,
        ),
    }
}

/// The `cgroup_delegation` check, given how making the run's cgroups went
/// (`controllers`: what was asked for).
pub(crate) fn cgroups(controllers: &str, made: Result<(), String>) -> Verdict {
    match made {
        Ok(()) => Verdict::ok(format!(
            "cgroups for sandbox.limits: the run's cgroups can be made here ({controllers})"
        )),
        Err(err) => Verdict::missing(
            format!("cgroups for sandbox.limits: {err}"),
            fixes::container_limits(),
        ),
    }
}

/// The `bwrap` or `squid` check: `found` is the program and the first line
/// of its version output; `min`, the oldest version that will do, if any.
pub(crate) fn program(
    name: &str,
    package: &str,
    found: Result<(&Path, &str), String>,
    min: Option<(u32, u32)>,
) -> Verdict {
    let (path, version) = match found {
        Ok(found) => found,
        Err(err) => {
            return Verdict::missing(format!("{name}: {err}"), fixes::package(package));
        }
    };
    let finding = format!("{name}: {} ({version})", path.display());
    match (min, version_of(version)) {
        (Some(min), Some(have)) if have < min => Verdict::missing(
            format!(
                "{finding}, older than {}.{} which constle needs",
                min.0, min.1
            ),
            fixes::package(package),
        ),
        (Some(_), None) => Verdict::unknown(format!("{finding}: its version cannot be read")),
        _ => Verdict::ok(finding),
    }
}

/// The major and minor version in a version line: the first word that
/// starts with a digit (`bubblewrap 0.8.0` is 0.8, `Squid Cache: Version
/// 5.7` is 5.7).
pub(crate) fn version_of(line: &str) -> Option<(u32, u32)> {
    let word = line
        .split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?;
    let mut parts = word.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| {
        m.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()
    })?;
    Some((major, minor))
}
