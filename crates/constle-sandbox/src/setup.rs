//! Whether a sandbox was ever set up, and when it was not, why.
//!
//! bwrap exits with status 1 when it cannot build the sandbox (a `/proc`
//! it may not mount, namespaces it may not make), and the launcher with
//! 125 when its own part fails: numbers an agent may exit with too. What
//! tells them apart is bwrap's status (`--json-status-fd`), which the
//! launcher has bwrap write to [`STATUS_FILE`] in the spec's stage: bwrap
//! writes an `exit-code` object only when its command (constle's init, and
//! through it the agent) was started, so a process that exited without one
//! never ran the agent. Its stderr, which nothing but the launcher and bwrap
//! wrote then, says why; [`setup_failure`] adds what to change.

use std::fs::File;
use std::io::{self, Read as _};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::process::ExitStatus;

use crate::error::{SetupCause, SetupFailure};

/// The file in the stage that bwrap writes its status to.
pub(crate) const STATUS_FILE: &str = "bwrap-status";

/// The most of the status file read: bwrap writes two short lines.
const STATUS_MAX_BYTES: u64 = 64 * 1024;

/// The sysctls that can keep unprivileged users from making user
/// namespaces, and the value of each that does.
const USERNS_SYSCTLS: [(&str, &str); 3] = [
    ("user.max_user_namespaces", "0"),
    ("kernel.unprivileged_userns_clone", "0"),
    ("kernel.apparmor_restrict_unprivileged_userns", "1"),
];

/// Makes the status file in `stage` (the launcher's, before anything is
/// mounted over it), for bwrap to write to; emptied when a sandbox before
/// left one (a stdio server restarted in the same stage).
pub(crate) fn create_status(stage: &Path) -> io::Result<OwnedFd> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(stage.join(STATUS_FILE))
        .map(OwnedFd::from)
}

/// How the process [`sandbox_command`](crate::sandbox_command) started
/// ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxEnd {
    /// The sandbox was set up and its command ran: the exit code it ended
    /// with, or 128 + the signal that ended it.
    Ran(i32),
    /// The sandbox was never set up: the command never ran, and the
    /// launched process's stderr says why (see [`setup_failure`]).
    NotSetUp,
}

/// How the sandbox of `spec` ended, its launched process having exited with
/// `status`. Read once that process has exited: bwrap writes its status
/// before it exits.
///
/// A process ended by a signal (killed from outside) counts as having run:
/// whether it got that far is not known, and it is reported as the signal.
pub fn sandbox_end(spec: &crate::SandboxSpec, status: ExitStatus) -> SandboxEnd {
    end_of(&spec.stage, status)
}

/// [`sandbox_end`], for the sandbox whose stage is `stage`.
fn end_of(stage: &Path, status: ExitStatus) -> SandboxEnd {
    use std::os::unix::process::ExitStatusExt as _;
    let reported = read_status(&stage.join(STATUS_FILE));
    match (status.code(), status.signal()) {
        (Some(code), _) if reported => SandboxEnd::Ran(code),
        (Some(_), _) => SandboxEnd::NotSetUp,
        (None, signal) => SandboxEnd::Ran(128 + signal.unwrap_or(0)),
    }
}

/// Whether bwrap's status in `path` holds an `exit-code`: whether it
/// started its command.
fn read_status(path: &Path) -> bool {
    let mut text = String::new();
    let read = File::open(path).and_then(|f| f.take(STATUS_MAX_BYTES).read_to_string(&mut text));
    read.is_ok() && reports_exit(&text)
}

/// Whether bwrap's JSON lines hold an object with an `exit-code`.
fn reports_exit(status: &str) -> bool {
    status.lines().any(|line| {
        serde_json::from_str::<serde_json::Value>(line)
            .is_ok_and(|v| v.get("exit-code").is_some_and(serde_json::Value::is_i64))
    })
}

/// Why a sandbox that was never set up failed: `said`, what the launcher
/// and bwrap wrote to stderr (escaped), and what to change, found from
/// what they said and, when the namespaces were refused, from this
/// process's seccomp mode and the sysctls that restrict user namespaces.
pub fn setup_failure(said: &str, status: ExitStatus) -> SetupFailure {
    let said = said.trim();
    // Only bwrap's own lines: the launcher's messages explain themselves.
    let bwrap: Vec<&str> = said
        .lines()
        .filter(|line| line.starts_with("bwrap: "))
        .collect();
    let cause = match bwrap.iter().any(|line| line.contains("namespace")) {
        true => namespaces_cause(seccomp_mode(), &read_sysctls()),
        false => bwrap.iter().find_map(|line| plain_cause(line)),
    };
    let said = match said.is_empty() {
        true => format!("the sandbox's launcher exited with {status} and said nothing"),
        false => said.lines().map(str::trim).collect::<Vec<_>>().join("; "),
    };
    SetupFailure { said, cause }
}

/// The cause a failure names without looking further.
fn plain_cause(said: &str) -> Option<SetupCause> {
    said.contains("Can't mount proc")
        .then_some(SetupCause::ProcMasked)
}

/// Why the kernel refused namespaces: a seccomp filter already on this
/// process (mode 2) first, then a sysctl that forbids them.
fn namespaces_cause(seccomp: Option<u8>, sysctls: &[(&'static str, String)]) -> Option<SetupCause> {
    if seccomp == Some(2) {
        return Some(SetupCause::SeccompFilter);
    }
    let blocking = sysctls.iter().find(|(name, value)| {
        USERNS_SYSCTLS
            .iter()
            .any(|(n, refusing)| n == name && value.trim() == *refusing)
    });
    Some(match blocking {
        Some((name, value)) => SetupCause::Sysctl {
            name,
            value: value.trim().to_owned(),
        },
        None => SetupCause::Namespaces,
    })
}

/// The `Seccomp:` field of this process's status: 0 none, 1 strict, 2 a
/// filter.
fn seccomp_mode() -> Option<u8> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Each of [`USERNS_SYSCTLS`] this kernel has, with its value.
fn read_sysctls() -> Vec<(&'static str, String)> {
    USERNS_SYSCTLS
        .iter()
        .filter_map(|(name, _)| {
            let path = Path::new("/proc/sys").join(name.replace('.', "/"));
            std::fs::read_to_string(path).ok().map(|v| (*name, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;

    use super::*;

    #[test]
    fn a_status_left_by_a_sandbox_before_is_emptied() {
        let stage = tempfile::tempdir().unwrap();
        let path = stage.path().join(STATUS_FILE);
        std::fs::write(&path, "{ \"exit-code\": 0 }\n").unwrap();
        drop(create_status(stage.path()).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"");
        assert_eq!(
            end_of(stage.path(), ExitStatus::from_raw(1 << 8)),
            SandboxEnd::NotSetUp
        );
        // Never through a link planted in its place.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/null", &path).unwrap();
        assert!(create_status(stage.path()).is_err());
    }

    #[test]
    fn only_an_exit_code_says_the_command_ran() {
        let started = "{ \"child-pid\": 12, \"cgroup-namespace\": 4026531835 }\n";
        assert!(!reports_exit(""));
        assert!(!reports_exit(started));
        assert!(reports_exit(&format!("{started}{{ \"exit-code\": 1 }}\n")));
        assert!(!reports_exit("{ \"exit-code\": \"1\" }\n"));
        assert!(!reports_exit("exit-code 1\n"));
    }

    #[test]
    fn the_end_of_a_sandbox() {
        let stage = tempfile::tempdir().unwrap();
        let end = |status| end_of(stage.path(), status);
        let exited = |code: i32| ExitStatus::from_raw(code << 8);
        // No status at all: the launcher failed before bwrap.
        assert_eq!(end(exited(125)), SandboxEnd::NotSetUp);
        let status = stage.path().join(STATUS_FILE);
        std::fs::write(&status, "{ \"child-pid\": 12 }\n").unwrap();
        assert_eq!(end(exited(1)), SandboxEnd::NotSetUp);
        std::fs::write(&status, "{ \"child-pid\": 12 }\n{ \"exit-code\": 1 }\n").unwrap();
        assert_eq!(end(exited(1)), SandboxEnd::Ran(1));
        // Killed: reported as the signal, as before.
        std::fs::remove_file(&status).unwrap();
        assert_eq!(end(ExitStatus::from_raw(9)), SandboxEnd::Ran(137));
    }

    #[test]
    fn causes() {
        let proc = "bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n";
        assert_eq!(plain_cause(proc), Some(SetupCause::ProcMasked));
        assert_eq!(plain_cause("bwrap: execvp x: No such file"), None);
        let sysctls = |pairs: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
            pairs.iter().map(|(n, v)| (*n, format!("{v}\n"))).collect()
        };
        let open = sysctls(&[
            ("user.max_user_namespaces", "96367"),
            ("kernel.unprivileged_userns_clone", "1"),
            ("kernel.apparmor_restrict_unprivileged_userns", "0"),
        ]);
        assert_eq!(
            namespaces_cause(Some(2), &open),
            Some(SetupCause::SeccompFilter)
        );
        assert_eq!(
            namespaces_cause(Some(0), &open),
            Some(SetupCause::Namespaces)
        );
        for (name, value) in USERNS_SYSCTLS {
            let mut closed = open.clone();
            closed.retain(|(n, _)| *n != name);
            closed.push((name, format!("{value}\n")));
            assert_eq!(
                namespaces_cause(None, &closed),
                Some(SetupCause::Sysctl {
                    name,
                    value: value.into()
                }),
                "{name}"
            );
        }
        // A filter is the likelier cause even where a sysctl also refuses.
        let closed = sysctls(&[("user.max_user_namespaces", "0")]);
        assert_eq!(
            namespaces_cause(Some(2), &closed),
            Some(SetupCause::SeccompFilter)
        );
    }

    #[test]
    fn what_was_said_is_kept() {
        let failure = setup_failure(
            "bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n",
            ExitStatus::from_raw(1 << 8),
        );
        assert_eq!(
            failure.said,
            "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"
        );
        let text = failure.to_string();
        assert!(text.starts_with("bwrap: Can't mount proc"), "{text}");
        for flag in [
            "systempaths=unconfined",
            "unmask=ALL",
            "procMount: Unmasked",
            "hostUsers: false",
            "docs/containers.md",
        ] {
            assert!(text.contains(flag), "{flag}: {text}");
        }
        let silent = setup_failure("  \n", ExitStatus::from_raw(125 << 8));
        assert_eq!(silent.cause, None);
        assert!(silent.said.contains("125"), "{}", silent.said);
        let two = setup_failure("a\n b \n", ExitStatus::from_raw(1 << 8));
        assert_eq!(two.said, "a; b");
        // The launcher's own message names namespaces or proc: not bwrap's.
        let launcher = setup_failure(
            "constle sandbox-exec: … is not permitted here: it takes CAP_SYS_ADMIN in the user \
             namespace that mounted the file system; Can't mount proc",
            ExitStatus::from_raw(125 << 8),
        );
        assert_eq!(launcher.cause, None);
    }
}
