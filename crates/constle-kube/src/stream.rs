//! The objects as one YAML stream (`---` between documents), and the check
//! that the stream reads back as exactly those objects.
//!
//! The emitter is serde-saphyr's, the project's YAML library: it quotes
//! every string YAML 1.1 readers (kubectl's included) would take for a
//! number, boolean or null, and writes multi-line strings (the Agentfile)
//! as literal blocks. The read-back is what makes that a guarantee rather
//! than a hope: the ConfigMap's Agentfile, every selector and every port
//! must come back equal, or nothing is printed.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::{Deserialize, Serialize};

use crate::error::KubeError;
use crate::sandbox_template::SandboxTemplate;

/// One rendered object. Each type checks its own `apiVersion` and `kind`
/// when read, so the stream reads back without a tag.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)] // a handful, built once
pub enum Object {
    /// The Agentfile.
    ConfigMap(ConfigMap),
    /// A fence.
    NetworkPolicy(NetworkPolicy),
    /// The Redis.
    Deployment(Deployment),
    /// The Redis's address.
    Service(Service),
    /// One run of the agent.
    Job(Job),
    /// One run of the agent, for `podman kube play`.
    Pod(Pod),
    /// The agent's pod for agent-sandbox.
    SandboxTemplate(SandboxTemplate),
}

/// `objects` as a YAML stream, after checking it reads back as them.
pub fn to_yaml(objects: &[Object]) -> Result<String, KubeError> {
    let yaml =
        serde_saphyr::to_string_multiple(objects).map_err(|e| KubeError::Yaml(e.to_string()))?;
    let read: Vec<Object> = from_yaml(&yaml)?;
    if read != objects {
        return Err(KubeError::RoundTrip(
            "an object reads back different from what was built".to_owned(),
        ));
    }
    Ok(yaml)
}

/// The objects of a YAML stream this crate wrote.
pub fn from_yaml(yaml: &str) -> Result<Vec<Object>, KubeError> {
    serde_saphyr::from_str_multiple::<Object, Vec<Object>>(yaml)
        .map_err(|e| KubeError::RoundTrip(e.to_string()))
}
