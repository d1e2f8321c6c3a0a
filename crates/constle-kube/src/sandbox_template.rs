//! agent-sandbox's `SandboxTemplate`, for clusters that run agents through
//! kubernetes-sigs/agent-sandbox (Sandbox, SandboxClaim, SandboxWarmPool).
//!
//! It is not in k8s-openapi, so it is typed here, with only the fields
//! Constle sets. Checked against kubernetes-sigs/agent-sandbox at commit
//! 2fd412d55ecae90861a101a5424a75473de97c36:
//! `extensions/api/v1beta1/groupversion_info.go` (group
//! `extensions.agents.x-k8s.io`, version `v1beta1`, the CRD's storage
//! version; `v1alpha1` is served but deprecated),
//! `extensions/api/v1beta1/sandboxtemplate_types.go` (`SandboxTemplateSpec`:
//! the inlined `SandboxBlueprint`, `networkPolicy` with `ingress` and
//! `egress`, `networkPolicyManagement`) and `api/v1beta1/sandbox_types.go`
//! (`SandboxBlueprint.podTemplate`: `metadata` with `labels` and
//! `annotations`, `spec` a core `PodSpec`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::networking::v1::{NetworkPolicyEgressRule, NetworkPolicyIngressRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::fence;
use crate::options::Options;

/// `apiVersion` of a SandboxTemplate; read back, any other is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApiVersion {
    /// The only version written.
    #[serde(rename = "extensions.agents.x-k8s.io/v1beta1")]
    V1beta1,
}

/// `kind` of a SandboxTemplate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// The only kind written.
    SandboxTemplate,
}

/// A `SandboxTemplate`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxTemplate {
    /// Always [`ApiVersion::V1beta1`].
    pub api_version: ApiVersion,
    /// Always [`Kind::SandboxTemplate`].
    pub kind: Kind,
    /// Name, namespace, labels.
    pub metadata: ObjectMeta,
    /// The pod and its fence.
    pub spec: SandboxTemplateSpec,
}

/// `spec` of a SandboxTemplate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxTemplateSpec {
    /// The pod each Sandbox runs.
    pub pod_template: PodTemplate,
    /// The fence; with `networkPolicyManagement: Managed` the controller
    /// applies it to every Sandbox from this template.
    pub network_policy: NetworkPolicySpec,
    /// Always `Managed`: the controller creates the NetworkPolicy.
    pub network_policy_management: String,
}

/// `spec.podTemplate`: only labels and annotations of its metadata are used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodTemplate {
    /// Labels (the fence's Redis rule selects by them).
    pub metadata: PodMetadata,
    /// The pod.
    pub spec: PodSpec,
}

/// `spec.podTemplate.metadata`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodMetadata {
    /// The pod's labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// `spec.networkPolicy`: NetworkPolicy rules without selector or types,
/// which the controller sets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicySpec {
    /// Empty: no ingress at all.
    pub ingress: Vec<NetworkPolicyIngressRule>,
    /// The agent's egress rules.
    pub egress: Vec<NetworkPolicyEgressRule>,
}

/// The SandboxTemplate for the agent's pod `spec`, fenced by the agent's
/// egress rules and no ingress.
pub fn template(options: &Options, metadata: ObjectMeta, spec: PodSpec) -> SandboxTemplate {
    SandboxTemplate {
        api_version: ApiVersion::V1beta1,
        kind: Kind::SandboxTemplate,
        metadata: metadata.clone(),
        spec: SandboxTemplateSpec {
            pod_template: PodTemplate {
                metadata: PodMetadata {
                    labels: metadata.labels.unwrap_or_default(),
                },
                spec,
            },
            network_policy: NetworkPolicySpec {
                ingress: Vec::new(),
                egress: fence::agent_egress(options),
            },
            network_policy_management: "Managed".to_owned(),
        },
    }
}
