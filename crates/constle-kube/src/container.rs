//! What every container of the agent's pod shares: its security context
//! and how a volume is mounted into it.

use k8s_openapi::api::core::v1::{Capabilities, SecurityContext, VolumeMount};

/// A container's own settings (pod.rs says why each). Only Constle's
/// container needs an unmasked `/proc`.
pub fn security_context(unmasked_proc: bool) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        privileged: Some(false),
        proc_mount: unmasked_proc.then(|| "Unmasked".to_owned()),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..SecurityContext::default()
    }
}

/// The volume `name` at `path`.
pub fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}
