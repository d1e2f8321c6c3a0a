//! The agent's pod: one container running `constle run` on the mounted
//! Agentfile, under the security context the sandbox needs and no more.
//!
//! Why each setting (docs/kubernetes.md has the long form):
//! - `hostUsers: false`: the pod gets a user namespace of its own, so even
//!   root in it would be nobody on the node; bwrap's namespaces nest inside.
//! - `procMount: Unmasked` on the container: bwrap mounts a fresh `/proc`
//!   for the sandbox's pid namespace, and the kernel refuses a new proc
//!   mount while the container's `/proc` has paths masked by mounts over
//!   them (`/proc/kcore`, `/proc/sys`, …): it would uncover them. Kubernetes
//!   allows `Unmasked` only with `hostUsers: false`, where it uncovers
//!   nothing of the node's. The agent still sees a read-only `/proc/sys`.
//! - a Localhost seccomp profile: the runtime default refuses the system
//!   calls bwrap needs (`clone` with namespace flags, `unshare`, `mount`, …);
//!   the shipped profile is that default plus only those.
//! - non-root, `allowPrivilegeEscalation: false`, all capabilities dropped:
//!   Constle takes its unprivileged path, and bwrap needs no capability.
//! - a read-only root file system: what Constle writes goes to `emptyDir`
//!   volumes (the Agentfile's directory, its home, `/tmp`, the agent's
//!   work directory).
//! - no service account token: nothing in the pod talks to the API server.
//!
//! The Agentfile reaches the pod through an init container that copies it
//! from the ConfigMap into an `emptyDir` at `/etc/constle`, rather than a
//! `subPath` mount of the ConfigMap: the work directory (`./work` by
//! default) lies in the Agentfile's directory, and a mount point cannot be
//! made inside a ConfigMap's read-only volume; and podman 4.3, which plays
//! this pod in CI, ignores `subPath`. The same pod spec serves Kubernetes
//! and podman.

use std::path::{Path, PathBuf};

use constle_manifest::Manifest;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PodSecurityContext, PodSpec, SeccompProfile, Volume,
    VolumeMount,
};

use crate::agentfile::{self, AGENTFILE_DIR, AGENTFILE_PATH};
use crate::container;
use crate::init;
use crate::options::Options;
use crate::resources::container_resources;
use crate::secrets::{env_from_secret, host_variables};

/// The emptyDir holding Constle's state; `$CONSTLE_HOME` is a directory
/// Constle makes in it, so it gets the mode 0700 Constle gives it.
pub const STATE_DIR: &str = "/var/lib/constle";
/// `$CONSTLE_HOME` in the pod.
pub const CONSTLE_HOME: &str = "/var/lib/constle/home";
/// The agent's container.
pub const CONTAINER_NAME: &str = "constle";

/// The pod spec running the agent of `manifest` once.
pub fn agent_pod_spec(manifest: &Manifest, options: &Options) -> PodSpec {
    let (volumes, mounts): (Vec<Volume>, Vec<VolumeMount>) = volumes(manifest).into_iter().unzip();
    let resources = container_resources(&manifest.sandbox.limits);
    let keys_dir = format!("{CONSTLE_HOME}/keys/agent");
    let (init_volumes, init_containers) =
        init::init_containers(options, &mounts[0], &mounts[1], &keys_dir, &resources);
    PodSpec {
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        host_users: Some(false),
        restart_policy: Some("Never".to_owned()),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(options.uid),
            run_as_group: Some(options.uid),
            fs_group: Some(options.uid),
            seccomp_profile: Some(SeccompProfile {
                type_: "Localhost".to_owned(),
                localhost_profile: Some(options.seccomp_profile.clone()),
            }),
            ..PodSecurityContext::default()
        }),
        init_containers: Some(init_containers),
        containers: vec![Container {
            name: CONTAINER_NAME.to_owned(),
            image: Some(options.image.clone()),
            command: Some(
                ["constle", "run", AGENTFILE_PATH]
                    .map(str::to_owned)
                    .to_vec(),
            ),
            env: Some(container_env(manifest, options)),
            resources: Some(resources),
            security_context: Some(container::security_context(true)),
            volume_mounts: Some(mounts),
            ..Container::default()
        }],
        volumes: Some(init_volumes.into_iter().chain(volumes).collect()),
        ..PodSpec::default()
    }
}

/// `CONSTLE_HOME`, then every host variable from the Secret.
fn container_env(manifest: &Manifest, options: &Options) -> Vec<EnvVar> {
    let home = EnvVar {
        name: "CONSTLE_HOME".to_owned(),
        value: Some(CONSTLE_HOME.to_owned()),
        ..EnvVar::default()
    };
    std::iter::once(home)
        .chain(env_from_secret(&host_variables(manifest), &options.secret))
        .collect()
}

/// Constle's volumes with where each is mounted, the Agentfile's directory
/// first: empty directories for the Agentfile, Constle's state, `/tmp`,
/// and each directory the Agentfile names that the agent or a stdio
/// server writes.
fn volumes(manifest: &Manifest) -> Vec<(Volume, VolumeMount)> {
    let written = [
        ("config", PathBuf::from(AGENTFILE_DIR)),
        ("state", PathBuf::from(STATE_DIR)),
        ("tmp", PathBuf::from("/tmp")),
        (
            "work",
            agentfile::pod_path(manifest, &manifest.sandbox.workdir),
        ),
    ]
    .map(|(name, path)| (name.to_owned(), path));
    let home = manifest
        .sandbox
        .home
        .iter()
        .map(|home| ("agent-home".to_owned(), agentfile::pod_path(manifest, home)));
    let stdio = manifest
        .mcp
        .stdio_servers()
        .filter_map(|(_, stdio)| stdio.workdir.as_deref())
        .enumerate()
        .map(|(i, dir)| (format!("mcp-work-{i}"), agentfile::pod_path(manifest, dir)));
    written
        .into_iter()
        .chain(home)
        .chain(stdio)
        .map(|(name, path)| empty_dir(name, &path))
        .collect()
}

fn empty_dir(name: String, path: &Path) -> (Volume, VolumeMount) {
    (
        Volume {
            name: name.clone(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        container::mount(&name, &path.to_string_lossy(), false),
    )
}
