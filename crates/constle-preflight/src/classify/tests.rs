//! Each cause, from probe results and sysctl values alone.

use std::io;
use std::path::Path;

use super::*;
use crate::steps::Outcome::{Errno, Ok as Fine, Skipped};

const EPERM: i32 = libc::EPERM;

/// A host like Docker's default container: sysctls allowing, a filter on.
fn docker_like() -> Seen {
    Seen {
        max_user_namespaces: Some(63_704),
        unprivileged_userns_clone: Some(1),
        apparmor_restrict: None,
        seccomp_filter: true,
        apparmor_profile: None,
        proc_overmounts: Vec::new(),
        effective_caps: Some("00000000a80425fb".to_owned()),
    }
}

/// The probe process's report when `unshare(CLONE_NEWUSER)` is refused
/// with `errno`.
fn userns_refused(clone: Outcome, errno: i32) -> Probes {
    Probes::from_pairs(&[
        (Step::Clone, clone),
        (Step::Userns, Errno(errno)),
        (Step::Maps, Skipped),
        (Step::Unshare, Skipped),
        (Step::Mount, Skipped),
        (Step::Proc, Skipped),
        (Step::Sethostname, Skipped),
        (Step::PivotRoot, Skipped),
        (Step::Umount2, Skipped),
    ])
}

/// Every step worked but those given.
fn all_but(changed: &[(Step, Outcome)]) -> Probes {
    let mut pairs: Vec<(Step, Outcome)> = Step::ALL.iter().map(|s| (*s, Fine)).collect();
    for (step, outcome) in changed {
        pairs.retain(|(s, _)| s != step);
        pairs.push((*step, *outcome));
    }
    Probes::from_pairs(&pairs)
}

#[test]
fn user_namespaces_that_work() {
    let (verdict, blocker) = user_namespaces(&all_but(&[]), &docker_like());
    assert_eq!(verdict.status, Status::Ok);
    assert_eq!(blocker, Blocker::None);
    assert_eq!(verdict.fixes, Fixes::NONE);
}

#[test]
fn seccomp_is_named_with_the_sysctls_that_allow() {
    let (verdict, blocker) = user_namespaces(&userns_refused(Errno(EPERM), EPERM), &docker_like());
    assert_eq!(verdict.status, Status::Missing);
    assert_eq!(blocker, Blocker::Seccomp);
    assert_eq!(
        verdict.finding,
        "user namespaces: blocked by seccomp (unshare(CLONE_NEWUSER) returned EPERM while \
         kernel.unprivileged_userns_clone=1 and user.max_user_namespaces=63704)"
    );
    let docker = verdict.fixes.docker.unwrap();
    assert!(docker.starts_with("--security-opt seccomp="), "{docker}");
    let kube = verdict.fixes.kubernetes.unwrap();
    assert!(kube.contains("type: Localhost"), "{kube}");
    assert!(!docker.contains("SYS_ADMIN"));
}

#[test]
fn the_debian_sysctl_comes_before_seccomp() {
    let seen = Seen {
        unprivileged_userns_clone: Some(0),
        ..docker_like()
    };
    let (verdict, blocker) = user_namespaces(&userns_refused(Errno(EPERM), EPERM), &seen);
    assert_eq!(blocker, Blocker::Other);
    assert_eq!(
        verdict.finding,
        "user namespaces: disabled by sysctl kernel.unprivileged_userns_clone=0 \
         (unshare(CLONE_NEWUSER) returned EPERM)"
    );
    assert!(
        verdict
            .fixes
            .podman
            .unwrap()
            .contains("sysctl -w kernel.unprivileged_userns_clone=1")
    );
}

#[test]
fn no_user_namespaces_allowed_at_all() {
    let seen = Seen {
        max_user_namespaces: Some(0),
        seccomp_filter: false,
        ..docker_like()
    };
    let (verdict, _) = user_namespaces(&userns_refused(Fine, libc::ENOSPC), &seen);
    assert_eq!(
        verdict.finding,
        "user namespaces: disabled by sysctl user.max_user_namespaces=0 \
         (unshare(CLONE_NEWUSER) returned ENOSPC)"
    );
    assert!(
        verdict
            .fixes
            .kubernetes
            .unwrap()
            .starts_with("on every node: sysctl -w user.max_user_namespaces=")
    );
    let seen = Seen {
        max_user_namespaces: Some(1),
        ..seen
    };
    let (verdict, _) = user_namespaces(&userns_refused(Fine, libc::ENOSPC), &seen);
    assert!(
        verdict.finding.contains("the limit is reached"),
        "{}",
        verdict.finding
    );
    assert_eq!(verdict.fixes, Fixes::NONE);
}

#[test]
fn apparmor_lets_the_namespace_be_made_but_not_used() {
    let seen = Seen {
        apparmor_restrict: Some(1),
        ..docker_like()
    };
    let probes = all_but(&[(Step::Maps, Errno(EPERM)), (Step::Unshare, Errno(EPERM))]);
    let (verdict, blocker) = user_namespaces(&probes, &seen);
    assert_eq!(blocker, Blocker::Other);
    assert!(
        verdict.finding.starts_with(
            "user namespaces: blocked by AppArmor (unshare(CLONE_NEWUSER) worked but writing"
        ),
        "{}",
        verdict.finding
    );
    assert!(
        verdict
            .finding
            .ends_with("kernel.apparmor_restrict_unprivileged_userns=1)"),
        "{}",
        verdict.finding
    );
    assert!(
        verdict
            .fixes
            .docker
            .unwrap()
            .contains("kernel.apparmor_restrict_unprivileged_userns=0")
    );
    // …and then the system calls cannot be told apart.
    assert_eq!(
        system_calls(&probes, &seen, blocker).status,
        Status::Unknown
    );
}

#[test]
fn a_refusal_nothing_explains_has_no_fix() {
    let seen = Seen {
        seccomp_filter: false,
        ..docker_like()
    };
    let (verdict, _) = user_namespaces(&userns_refused(Fine, EPERM), &seen);
    assert_eq!(verdict.status, Status::Missing);
    assert!(verdict.finding.contains("a cause constle cannot tell"));
    assert_eq!(verdict.fixes, Fixes::NONE);
    assert!(
        verdict
            .finding
            .ends_with("with no seccomp filter on this process)")
    );
    let (verdict, _) = user_namespaces(&userns_refused(Fine, libc::EINVAL), &seen);
    assert!(verdict.finding.contains("this kernel has none"));
    // The maps refused under a filter, with no AppArmor restriction: the
    // filter does not refuse unshare, so it is not named as the cause.
    let probes = all_but(&[(Step::Maps, Errno(EPERM))]);
    let (verdict, blocker) = user_namespaces(&probes, &docker_like());
    assert_eq!(blocker, Blocker::Other);
    assert!(
        verdict
            .finding
            .ends_with("with a seccomp filter on this process)"),
        "{}",
        verdict.finding
    );
}

#[test]
fn an_unreported_probe_is_unknown_not_missing() {
    let (verdict, blocker) = user_namespaces(&Probes::default(), &docker_like());
    assert_eq!(verdict.status, Status::Unknown);
    assert_eq!(
        proc_mount(&Probes::default(), &docker_like(), blocker).status,
        Status::Unknown
    );
}

#[test]
fn docker_default_refuses_clone_and_unshare() {
    let probes = userns_refused(Errno(EPERM), EPERM);
    let verdict = system_calls(&probes, &docker_like(), Blocker::Seccomp);
    assert_eq!(verdict.status, Status::Missing);
    assert_eq!(
        verdict.finding,
        "system calls bwrap needs: refused by seccomp: clone with namespace flags (EPERM), \
         unshare (EPERM); not tried after that: mount, umount2, pivot_root, sethostname"
    );
    assert_eq!(verdict.fixes, fixes::seccomp());
}

#[test]
fn podman_default_refuses_only_sethostname() {
    let probes = all_but(&[(Step::Sethostname, Errno(EPERM))]);
    let (_, blocker) = user_namespaces(&probes, &docker_like());
    let verdict = system_calls(&probes, &docker_like(), blocker);
    assert_eq!(
        verdict.finding,
        "system calls bwrap needs: refused by seccomp: sethostname (EPERM)"
    );
    assert_eq!(verdict.fixes, fixes::seccomp());
}

#[test]
fn an_apparmor_mount_denial_is_told_from_seccomp() {
    let seen = Seen {
        apparmor_profile: Some("docker-default (enforce)".to_owned()),
        ..docker_like()
    };
    let probes = all_but(&[
        (Step::Mount, Errno(libc::EACCES)),
        (Step::PivotRoot, Skipped),
    ]);
    let verdict = system_calls(&probes, &seen, Blocker::None);
    assert!(
        verdict
            .finding
            .starts_with("system calls bwrap needs: refused by AppArmor (profile docker-default (enforce)): mount (EACCES)"),
        "{}",
        verdict.finding
    );
    assert_eq!(verdict.fixes, fixes::apparmor_mount());
}

#[test]
fn all_system_calls_allowed() {
    let verdict = system_calls(&all_but(&[]), &docker_like(), Blocker::None);
    assert_eq!(verdict.status, Status::Ok);
    let untried = all_but(&[(Step::Umount2, Skipped)]);
    let verdict = system_calls(&untried, &docker_like(), Blocker::None);
    assert_eq!(verdict.status, Status::Unknown);
    assert!(verdict.finding.ends_with("not tried: umount2"));
}

#[test]
fn a_masked_proc_names_what_masks_it() {
    let seen = Seen {
        proc_overmounts: ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/sys"]
            .map(String::from)
            .to_vec(),
        ..docker_like()
    };
    let probes = all_but(&[(Step::Proc, Errno(EPERM))]);
    let verdict = proc_mount(&probes, &seen, Blocker::None);
    assert_eq!(verdict.status, Status::Missing);
    assert_eq!(
        verdict.finding,
        "/proc: masked, so a fresh proc cannot be mounted (mounting proc in a new user, PID and \
         mount namespace returned EPERM; 4 paths under /proc are mounted over: /proc/acpi, \
         /proc/kcore, /proc/keys, …)"
    );
    assert_eq!(
        verdict.fixes.docker.as_deref(),
        Some("--security-opt systempaths=unconfined")
    );
    assert_eq!(
        verdict.fixes.podman.as_deref(),
        Some("--security-opt unmask=/proc/*")
    );
    assert!(
        verdict
            .fixes
            .kubernetes
            .unwrap()
            .contains("procMount: Unmasked")
    );
    // Refused with nothing mounted over it: no fix to offer.
    let verdict = proc_mount(&probes, &docker_like(), Blocker::None);
    assert_eq!(verdict.status, Status::Missing);
    assert_eq!(verdict.fixes, Fixes::NONE);
    assert_eq!(
        proc_mount(&all_but(&[]), &docker_like(), Blocker::None).status,
        Status::Ok
    );
}

#[test]
fn idmapped_unsupported_is_told_from_not_permitted() {
    let dir = Path::new("/work");
    let unsupported = idmapped(
        dir,
        Some("overlay"),
        Err(io::Error::from_raw_os_error(libc::EINVAL)),
    );
    assert_eq!(unsupported.status, Status::Missing);
    assert!(
        unsupported
            .finding
            .starts_with("idmapped mounts: unsupported by this file system, /work (overlay)"),
        "{}",
        unsupported.finding
    );
    assert!(unsupported.fixes.docker.unwrap().contains("a volume"));
    let refused = idmapped(dir, Some("ext4"), Err(io::Error::from_raw_os_error(EPERM)));
    assert!(
        refused
            .finding
            .starts_with("idmapped mounts: not permitted on /work (ext4)"),
        "{}",
        refused.finding
    );
    assert!(
        refused
            .fixes
            .podman
            .unwrap()
            .starts_with("--user 1000:1000")
    );
    assert_eq!(idmapped(dir, None, Ok(())).status, Status::Ok);
}

#[test]
fn cgroups_made_or_not() {
    assert_eq!(cgroups("pids", Ok(())).status, Status::Ok);
    let missing = cgroups("pids", Err("cannot enforce the pids limit: …".to_owned()));
    assert_eq!(missing.status, Status::Missing);
    assert!(
        missing
            .fixes
            .docker
            .unwrap()
            .starts_with("--memory, --pids-limit and --cpus")
    );
}

#[test]
fn programs_found_too_old_or_missing() {
    let bwrap = Path::new("/usr/bin/bwrap");
    let ok = program(
        "bwrap",
        "bubblewrap",
        Ok((bwrap, "bubblewrap 0.8.0")),
        Some((0, 8)),
    );
    assert_eq!(ok.status, Status::Ok);
    assert_eq!(ok.finding, "bwrap: /usr/bin/bwrap (bubblewrap 0.8.0)");
    let old = program(
        "bwrap",
        "bubblewrap",
        Ok((bwrap, "bubblewrap 0.7.9")),
        Some((0, 8)),
    );
    assert_eq!(old.status, Status::Missing);
    let gone = program(
        "squid",
        "squid",
        Err("cannot run it: not found".to_owned()),
        None,
    );
    assert_eq!(gone.status, Status::Missing);
    assert_eq!(
        gone.fixes.kubernetes.as_deref(),
        Some("in the image: apt-get install squid")
    );
    assert_eq!(version_of("Squid Cache: Version 5.7"), Some((5, 7)));
    assert_eq!(version_of("bubblewrap 0.11.0"), Some((0, 11)));
    assert_eq!(version_of("bubblewrap"), None);
}

#[test]
fn only_required_missing_checks_block() {
    let check = |id, required, status| Check {
        id,
        required,
        status,
        finding: String::new(),
        fixes: Fixes::NONE,
    };
    let report = crate::Report {
        checks: vec![
            check(CheckId::UserNamespaces, true, Status::Ok),
            check(CheckId::CgroupDelegation, false, Status::Missing),
            check(CheckId::SystemCalls, true, Status::Unknown),
            check(CheckId::ProcMount, true, Status::Missing),
        ],
    };
    let blocking: Vec<CheckId> = report.blocking().map(|c| c.id).collect();
    assert_eq!(blocking, [CheckId::ProcMount]);
    assert!(!report.ok());
    let json = serde_json::to_value(&report.checks[3]).unwrap();
    assert_eq!(json["id"], "proc_mount");
    assert_eq!(json["status"], "missing");
    assert!(json["fixes"]["docker"].is_null());
}

#[test]
fn who_runs_constle() {
    let status = "Name:\tconstle\nCapEff:\t000001ffffffffff\nSeccomp:\t2\n";
    assert_eq!(crate::identity::status_field(status, "Seccomp"), Some("2"));
    let without = constle_hostids::Starter::RootWithoutSysAdmin;
    assert!(crate::identity::finding(0, "root", without).contains("the unprivileged path applies"));
}
