//! What fixes each missing layer, for docker, podman and Kubernetes: the
//! exact flag or setting. `--cap-add SYS_ADMIN` is never among them: it
//! gives the whole container, constle and everything it starts, the power
//! to undo its own confinement, where the fixes below give the sandbox
//! only what it uses.

use crate::report::Fixes;

/// Constle's seccomp profile, as shipped in the source tree
/// (docs/containers.md says what it adds and why).
const PROFILE: &str = "deploy/container/seccomp.json";

/// A seccomp filter refuses what bubblewrap needs.
pub(crate) fn seccomp() -> Fixes {
    Fixes::of(
        &format!("--security-opt seccomp={PROFILE}"),
        &format!("--security-opt seccomp={PROFILE}"),
        &format!(
            "securityContext.seccompProfile: {{type: Localhost, localhostProfile: \
             constle/seccomp.json}}, {PROFILE} copied there under the kubelet's seccomp root"
        ),
    )
}

/// A host sysctl (`name=value`) that no container flag changes.
pub(crate) fn host_sysctl(setting: &str) -> Fixes {
    let host = format!("on the host: sysctl -w {setting} (a host setting; no flag changes it)");
    Fixes::of(
        &host,
        &host,
        &format!("on every node: sysctl -w {setting} (a node setting; a pod cannot change it)"),
    )
}

/// Ubuntu's AppArmor restriction of unprivileged user namespaces.
pub(crate) fn apparmor_userns() -> Fixes {
    host_sysctl("kernel.apparmor_restrict_unprivileged_userns=0")
}

/// An AppArmor profile refuses mounts.
pub(crate) fn apparmor_mount() -> Fixes {
    Fixes::of(
        "--security-opt apparmor=unconfined (or a profile of yours that allows mount)",
        "--security-opt apparmor=unconfined (or a profile of yours that allows mount)",
        "securityContext.appArmorProfile: {type: Unconfined} (or a Localhost profile that allows mount)",
    )
}

/// A masked `/proc`.
pub(crate) fn unmask_proc() -> Fixes {
    Fixes::of(
        "--security-opt systempaths=unconfined",
        "--security-opt unmask=/proc/*",
        "securityContext.procMount: Unmasked, with spec.hostUsers: false",
    )
}

/// Idmapped mounts unavailable: the unprivileged path needs none.
pub(crate) fn not_root(also: &str) -> Fixes {
    Fixes::of(
        &format!("--user 1000:1000 (constle as a non-root user needs no idmapped mount){also}"),
        &format!("--user 1000:1000 (constle as a non-root user needs no idmapped mount){also}"),
        &format!(
            "securityContext: {{runAsUser: 1000, runAsNonRoot: true}} (constle as a non-root user \
             needs no idmapped mount){also}"
        ),
    )
}

/// A container's cgroups are not delegated to what runs in it.
pub(crate) fn container_limits() -> Fixes {
    Fixes::of(
        "--memory, --pids-limit and --cpus on the container instead of sandbox.limits (its cgroups \
         are not delegated to the container)",
        "--memory, --pids-limit and --cpus on the container instead of sandbox.limits (its cgroups \
         are not delegated to the container)",
        "resources.limits on the container (constle kube renders them from sandbox.limits) instead \
         of sandbox.limits in the Agentfile the pod runs",
    )
}

/// A Debian package missing from the image.
pub(crate) fn package(name: &str) -> Fixes {
    let install = format!("in the image: apt-get install {name}");
    Fixes::of(&install, &install, &install)
}
