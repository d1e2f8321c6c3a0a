//! The pod's init containers: what must be in place before `constle run`
//! starts, copied from volumes only they mount.
//!
//! - `agentfile` copies the Agentfile from the ConfigMap into the
//!   Agentfile's directory (pod.rs says why not a `subPath` mount).
//! - `agent-key`, with `--key-secret`, installs the agent's signing key
//!   from a Secret into `$CONSTLE_HOME/keys/agent/`. Constle refuses a key
//!   whose file or directories others could read (mode 0600 in 0700
//!   directories), and a Secret volume's directory is never 0700, so the
//!   key is copied, under `umask 077`, by a fixed script whose only inputs
//!   are the two fixed paths below.

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ResourceRequirements, SecretVolumeSource, Volume, VolumeMount,
};

use crate::agentfile::{AGENTFILE_KEY, AGENTFILE_PATH};
use crate::container::{mount, security_context};
use crate::options::Options;

/// Where the `agentfile` init container sees the ConfigMap.
const CONFIG_MAP_DIR: &str = "/run/constle/agentfile";
/// Where the `agent-key` init container sees the key's Secret.
const KEY_SECRET_DIR: &str = "/run/constle/agent-key";
/// The key's name in its Secret, and its file name in the key store.
pub const KEY_FILE: &str = "agent.pem";
/// Makes `$1` (and its parents) private, then copies `$2` into it.
const INSTALL_KEY: &str = "umask 077 && mkdir -p \"$1\" && cp \"$2\" \"$1/\"";

/// The volumes and init containers that put the Agentfile (and with
/// `--key-secret` the agent's key) in place; `config` and `state` are the
/// mounts of the Agentfile's directory and Constle's state.
pub fn init_containers(
    options: &Options,
    config: &VolumeMount,
    state: &VolumeMount,
    keys_dir: &str,
    resources: &ResourceRequirements,
) -> (Vec<Volume>, Vec<Container>) {
    let config_map = Volume {
        name: "agentfile".to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: format!("{}-agentfile", options.name.as_str()),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    };
    let source = format!("{CONFIG_MAP_DIR}/{AGENTFILE_KEY}");
    let copy = container(
        options,
        "agentfile",
        vec!["cp".to_owned(), source, AGENTFILE_PATH.to_owned()],
        vec![
            mount(&config_map.name, CONFIG_MAP_DIR, true),
            config.clone(),
        ],
        resources,
    );
    let mut volumes = vec![config_map];
    let mut containers = vec![copy];
    if let Some(secret) = &options.key_secret {
        let key = Volume {
            name: "agent-key".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                default_mode: Some(0o400),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        };
        let command = ["sh", "-c", INSTALL_KEY, "sh", keys_dir]
            .map(str::to_owned)
            .into_iter()
            .chain([format!("{KEY_SECRET_DIR}/{KEY_FILE}")])
            .collect();
        containers.push(container(
            options,
            "agent-key",
            command,
            vec![mount(&key.name, KEY_SECRET_DIR, true), state.clone()],
            resources,
        ));
        volumes.push(key);
    }
    (volumes, containers)
}

fn container(
    options: &Options,
    name: &str,
    command: Vec<String>,
    mounts: Vec<VolumeMount>,
    resources: &ResourceRequirements,
) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(options.image.clone()),
        command: Some(command),
        resources: Some(resources.clone()),
        security_context: Some(security_context(false)),
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}
