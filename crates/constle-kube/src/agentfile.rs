//! The Agentfile inside the pod: its bytes in a ConfigMap, copied to
//! [`AGENTFILE_PATH`] by the pod's init container, and where the paths it
//! names land.
//!
//! Relative paths in an Agentfile are resolved against its directory, so in
//! the pod they are resolved against [`AGENTFILE_DIR`]; absolute paths stay
//! as written. Only the Agentfile itself is shipped: files it refers to (an
//! approver set, a rootfs, an agent's code in its work directory) must be in
//! the image or in volumes the operator adds (docs/kubernetes.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use constle_manifest::Manifest;
use k8s_openapi::api::core::v1::ConfigMap;

use crate::meta::{self, Component};
use crate::options::Options;

/// The Agentfile's directory in the pod.
pub const AGENTFILE_DIR: &str = "/etc/constle";
/// The Agentfile in the pod, and the ConfigMap's key for it.
pub const AGENTFILE_KEY: &str = "agent.yaml";
/// The Agentfile's path in the pod.
pub const AGENTFILE_PATH: &str = "/etc/constle/agent.yaml";

/// The ConfigMap holding the Agentfile's exact text (its policy digest is
/// the same in the pod as here).
pub fn config_map(options: &Options, text: &str) -> ConfigMap {
    ConfigMap {
        metadata: meta::object(options, Component::Agent, "-agentfile"),
        data: Some(BTreeMap::from([(
            AGENTFILE_KEY.to_owned(),
            text.to_owned(),
        )])),
        immutable: Some(true),
        ..ConfigMap::default()
    }
}

/// Where `local`, a path the Agentfile resolved against its own directory,
/// is in the pod.
pub fn pod_path(manifest: &Manifest, local: &Path) -> PathBuf {
    match local.strip_prefix(&manifest.base_dir) {
        Ok(relative) => Path::new(AGENTFILE_DIR).join(relative),
        Err(_) => local.to_path_buf(),
    }
}
