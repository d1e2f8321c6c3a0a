//! Preflight: whether each layer Constle's sandbox needs is there on this
//! machine, for this user and a given run, and, for each missing one, the
//! flag or setting that fixes it under docker, podman and Kubernetes.
//! `constle doctor` prints the [`Report`]; `constle run` stops at its first
//! [blocking](Report::blocking) check.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! let needs = constle_preflight::Needs::any_run(std::env::current_exe()?, None);
//! let report = constle_preflight::check(&needs);
//! if let Some(check) = report.blocking().next() {
//!     eprintln!("{}", check.finding);
//!     if let Some(fix) = &check.fixes.docker {
//!         eprintln!("docker: {fix}");
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # The checks
//!
//! In the order of [`CheckId::ALL`]:
//!
//! - `user`: who runs constle, whether root, whether `CAP_SYS_ADMIN` is in
//!   the effective set; root without it (every default container) takes
//!   the unprivileged path (`constle_hostids::starter`).
//! - `user_namespaces`: `unshare(CLONE_NEWUSER)` and the new namespace's
//!   maps, and when refused, what refuses them: `user.max_user_namespaces`,
//!   `kernel.unprivileged_userns_clone`,
//!   `kernel.apparmor_restrict_unprivileged_userns` (read), or a seccomp
//!   filter (`Seccomp: 2` in `/proc/self/status` while the sysctls allow).
//! - `system_calls`: `clone` with namespace flags, `unshare`, `mount`,
//!   `umount2`, `pivot_root`, `sethostname`, each tried in a throwaway user
//!   and mount namespace.
//! - `proc_mount`: a fresh `proc` mounted by pid 1 of a new PID namespace;
//!   a masked `/proc` (paths mounted over, as containers do) refuses it.
//! - `idmapped_mounts`: an idmapped copy of the work directory's mount,
//!   only for a run as root; "unsupported by this file system" (`EINVAL`)
//!   told from "not permitted" (`EPERM`).
//! - `cgroup_delegation`: the run's cgroups for `sandbox.limits`, made and
//!   removed by `constle_limits` itself.
//! - `bwrap`, `squid`: found where a run looks for them, with versions.
//!
//! Required: the namespace checks and `bwrap` always; `idmapped_mounts`
//! for a run as root ([`Needs::as_root`]); `cgroup_delegation` when limits
//! are declared; `squid` when the egress proxy starts.
//!
//! # Why a child process, and one unsafe block
//!
//! The namespace probes run in the constle binary started again as
//! `constle preflight-probe` ([`PROBE_SUBCOMMAND`], [`probe_main`]), as the
//! sandbox's launcher and init are: a fresh process is single-threaded, so
//! `unshare(CLONE_NEWUSER)` is allowed in it and needs no `fork` from a
//! process that may have threads, and whatever it enters dies with it;
//! every mount it makes is in its own mount namespace. It uses `nix`'s safe
//! wrappers, but for one call no safe wrapper offers: a `clone(2)` with
//! namespace flags, which a seccomp profile may refuse while it allows
//! `unshare` (`src/probe/clone.rs`, the crate's only `unsafe`, whose child
//! only exits). So the crate denies `unsafe_code` instead of forbidding it,
//! as `constle-idmap` does.
//!
//! Probing as root for a run that takes the root path would prove nothing
//! (the launcher runs bubblewrap as an unprivileged host id), so the probe
//! process then first drops to uid and gid 65534.
//!
//! The `idmapped_mounts` and `cgroup_delegation` checks run in this
//! process through the crates the run uses (`constle_idmap`,
//! `constle_limits`): the idmapped copy is detached and dropped; the
//! cgroups are removed. Like a run, the cgroup check may move this process
//! into a leaf cgroup of its own (`constle-<pid>-self`).

#![deny(clippy::print_stdout, clippy::print_stderr)]

mod cgroup;
mod classify;
mod error;
mod fixes;
mod identity;
mod idmap;
mod needs;
mod passed;
mod probe;
mod programs;
mod report;
mod seen;
mod steps;

pub use constle_limits::Limits;
pub use needs::Needs;
pub use probe::child::probe_main;
pub use report::{Check, CheckId, Fixes, Report, Status};
pub use steps::PROBE_SUBCOMMAND;

use std::path::Path;

use classify::Verdict;
use seen::Seen;

/// Checks every layer for the run `needs` describes. Blocking: it starts
/// the probe process, `bwrap --version` and `squid -v` (tens of
/// milliseconds).
pub fn check(needs: &Needs) -> Report {
    let [userns, system_calls, proc_mount] = namespaces(needs);
    Report {
        checks: vec![
            identity::check(),
            userns.check(CheckId::UserNamespaces, true),
            system_calls.check(CheckId::SystemCalls, true),
            proc_mount.check(CheckId::ProcMount, true),
            idmap::check(needs),
            cgroup::check(needs),
            programs::bwrap(),
            programs::squid(needs.egress_proxy),
        ],
    }
}

/// What `constle run` checks before anything starts: the layers the
/// probe process tries (user namespaces, bwrap's system calls, a
/// mountable `/proc`), and each that is missing (all required). They
/// are probed only where something on this machine could refuse them (a
/// seccomp filter or an AppArmor profile on this process, a sysctl that
/// limits user namespaces, mounts over `/proc`: what containers bring);
/// on a host with none of these, the run's own sandbox is the probe, and
/// costs nothing more. The other checks are the run's own steps (the
/// idmapped mount, the cgroups, finding bwrap and Squid), which fail with
/// their own reasons. Empty: nothing is missing.
///
/// A probe that found nothing missing is remembered in `passed` (a
/// directory only constle reads, e.g. under `$CONSTLE_HOME`) under what it
/// depended on: the boot, the user, the path the run takes, the constle
/// binary, and everything [`before_run`] reads to decide to probe. The
/// next run in the same place skips it (a container's runs after its
/// first); anything changed, it probes again. A failure is never
/// remembered.
pub fn before_run(needs: &Needs, passed: &Path) -> Vec<Check> {
    let seen = Seen::read();
    if !seen.could_refuse_namespaces() {
        return Vec::new();
    }
    let marker = passed::marker(passed, needs, &seen);
    if marker.as_deref().is_some_and(Path::exists) {
        return Vec::new();
    }
    let ids = [
        CheckId::UserNamespaces,
        CheckId::SystemCalls,
        CheckId::ProcMount,
    ];
    let missing: Vec<Check> = ids
        .into_iter()
        .zip(namespaces_as_seen(needs, &seen))
        .map(|(id, verdict)| verdict.check(id, true))
        .filter(|check| check.status == Status::Missing)
        .collect();
    if let (true, Some(marker)) = (missing.is_empty(), marker) {
        passed::remember(&marker);
    }
    missing
}

/// The three checks the probe process serves.
fn namespaces(needs: &Needs) -> [Verdict; 3] {
    namespaces_as_seen(needs, &Seen::read())
}

/// The three checks the probe process serves, with what the machine
/// showed.
fn namespaces_as_seen(needs: &Needs, seen: &Seen) -> [Verdict; 3] {
    match probe::run(&needs.constle_exe, needs.as_root) {
        Ok(probes) => {
            let (userns, blocker) = classify::user_namespaces(&probes, seen);
            [
                userns,
                classify::system_calls(&probes, seen, blocker),
                classify::proc_mount(&probes, seen, blocker),
            ]
        }
        Err(err) => ["user namespaces", "system calls bwrap needs", "/proc"]
            .map(|what| Verdict::unknown(format!("{what}: not told ({err})"))),
    }
}
