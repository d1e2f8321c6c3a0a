//! The host variables an Agentfile names, and the environment that gives
//! them to Constle's container from a Secret.
//!
//! Every field that names a host variable is here: `llm.providers[].key_secret_ref`,
//! `mcp.servers[].headers[].value_secret_ref`, `mcp.servers[].env_secret_refs`
//! (the host side of each pair) and `human_gates.notify[].url_secret_ref`.
//! They are set on Constle's container only; the agent never sees them, as
//! `constle run` starts the sandbox with an emptied environment (bwrap
//! `--clearenv`) and gives the agent only `sandbox.env` and its own
//! variables.

use std::collections::BTreeSet;

use constle_manifest::{Manifest, McpTransport};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, SecretKeySelector};

/// Every host variable `manifest` names, sorted, each once.
pub fn host_variables(manifest: &Manifest) -> BTreeSet<String> {
    let llm = manifest.llm.providers.iter().map(|p| &p.key_secret_ref);
    let headers = manifest
        .mcp
        .servers
        .iter()
        .flat_map(|s| s.headers())
        .map(|h| &h.value_secret_ref);
    let stdio = manifest
        .mcp
        .servers
        .iter()
        .filter_map(|s| match &s.transport {
            McpTransport::Stdio(stdio) => Some(stdio.env_secret_refs.values()),
            McpTransport::Url { .. } => None,
        })
        .flatten();
    let notify = manifest
        .human_gates
        .notify
        .iter()
        .map(|n| &n.url_secret_ref);
    llm.chain(headers)
        .chain(stdio)
        .chain(notify)
        .map(|var| var.as_str().to_owned())
        .collect()
}

/// One variable per name, each from the key of the same name in `secret`.
/// Not optional: a missing key keeps the pod from starting, as an unset
/// variable keeps `constle run` from starting.
pub fn env_from_secret(variables: &BTreeSet<String>, secret: &str) -> Vec<EnvVar> {
    variables
        .iter()
        .map(|name| EnvVar {
            name: name.clone(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.to_owned(),
                    key: name.clone(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        })
        .collect()
}
