//! The Kubernetes objects that run an Agentfile as a Job per run, typed with
//! `k8s-openapi` (Kubernetes 1.33's API) and written as one YAML stream.
//!
//! [`render`] takes a validated [`Manifest`], the Agentfile's exact text and
//! the operator's [`Options`], and returns [`Rendered`]: the YAML and the
//! notes on what the operator must still provide. The stream holds, in
//! order:
//!
//! 1. a ConfigMap with the Agentfile's bytes, which the pod's init
//!    container copies to `/etc/constle/agent.yaml`;
//! 2. the Redis the spend ledger and A2A replay store share (its
//!    NetworkPolicy, Deployment and Service);
//! 3. the agent's NetworkPolicy, the outer fence: out only to TCP 443 on
//!    public addresses, DNS to the cluster's resolver and the Redis; in,
//!    nothing;
//! 4. the agent's workload: a Job (the default), a bare Pod (for
//!    `podman kube play`) or an agent-sandbox SandboxTemplate, whose pod
//!    runs `constle run /etc/constle/agent.yaml` with `hostUsers: false`, an
//!    unmasked `/proc`, a Localhost seccomp profile, no root, no
//!    capabilities, a read-only root, the Agentfile's host variables from a
//!    Secret and resources from `sandbox.limits`.
//!
//! Nothing here talks to a cluster, reads a file or prints: the binary does.
//! The output is deterministic (same input, same bytes) and checked to read
//! back as the objects built. docs/kubernetes.md explains every field.
//!
//! ```
//! use std::path::Path;
//! use constle_kube::{Label, Options, render};
//!
//! let text = "name: invoice-processor\nsandbox:\n  command: [python, agent.py]\n";
//! let manifest = constle_manifest::parse_str(text, Path::new("/srv/agent.yaml"), &|_| None)
//!     .unwrap()
//!     .manifest;
//! let options = Options::new(Label::new("--name", "invoices", 40).unwrap());
//! let rendered = render(&manifest, text, &options).unwrap();
//! assert!(rendered.yaml.contains("kind: Job"));
//! ```

#![forbid(unsafe_code)]

mod agentfile;
mod container;
mod error;
mod fence;
mod init;
mod meta;
mod notes;
mod options;
mod pod;
mod redis;
mod resources;
mod sandbox_template;
mod secrets;
mod stream;

use constle_manifest::Manifest;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use agentfile::{AGENTFILE_DIR, AGENTFILE_PATH};
pub use error::KubeError;
pub use fence::{DENIED_V4, DENIED_V6, REDIS_PORT};
pub use init::KEY_FILE;
pub use options::{
    Cidr, DEFAULT_IMAGE, DEFAULT_REDIS_IMAGE, DEFAULT_SECCOMP_PROFILE, DEFAULT_SECRET_SUFFIX,
    DEFAULT_TTL_SECONDS, DEFAULT_UID, Label, MAX_NAME_LEN, Options, Workload, parse_cidr,
};
pub use pod::{CONSTLE_HOME, CONTAINER_NAME};
pub use resources::{CPU_HEADROOM_MILLIS, DEADLINE_HEADROOM_SECONDS, MEMORY_HEADROOM_BYTES};
pub use sandbox_template::SandboxTemplate;
pub use secrets::host_variables;
pub use stream::{Object, from_yaml};

/// What [`render`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The objects, one YAML document each, separated by `---`.
    pub yaml: String,
    /// What the operator must still do, one sentence or two each.
    pub notes: Vec<String>,
}

/// The objects that run `manifest` (whose Agentfile's exact text is
/// `text`) as `options` says.
pub fn render(manifest: &Manifest, text: &str, options: &Options) -> Result<Rendered, KubeError> {
    options.check()?;
    let objects = objects(manifest, text, options);
    Ok(Rendered {
        yaml: stream::to_yaml(&objects)?,
        notes: notes::notes(manifest, options),
    })
}

/// Every object, in the order the stream has them.
fn objects(manifest: &Manifest, text: &str, options: &Options) -> Vec<stream::Object> {
    use stream::Object;
    let mut objects = vec![
        Object::ConfigMap(agentfile::config_map(options, text)),
        Object::NetworkPolicy(fence::redis_policy(options)),
        Object::Deployment(redis::deployment(options)),
        Object::Service(redis::service(options)),
    ];
    let pod_meta = || meta::object(options, meta::Component::Agent, "");
    let spec = pod::agent_pod_spec(manifest, options);
    match options.workload {
        Workload::Job => {
            objects.push(Object::NetworkPolicy(fence::agent_policy(options)));
            objects.push(Object::Job(job(manifest, options, pod_meta(), spec)));
        }
        Workload::Pod => {
            objects.push(Object::NetworkPolicy(fence::agent_policy(options)));
            objects.push(Object::Pod(Pod {
                metadata: pod_meta(),
                spec: Some(spec),
                ..Pod::default()
            }));
        }
        Workload::SandboxTemplate => objects.push(Object::SandboxTemplate(
            sandbox_template::template(options, pod_meta(), spec),
        )),
    }
    objects
}

/// The Job: one pod, never retried (a second run is a new Job, and a new
/// run in the audit log), deleted `ttl_seconds` after it finishes.
fn job(
    manifest: &Manifest,
    options: &Options,
    metadata: ObjectMeta,
    spec: k8s_openapi::api::core::v1::PodSpec,
) -> Job {
    Job {
        metadata: metadata.clone(),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            ttl_seconds_after_finished: Some(options.ttl_seconds),
            active_deadline_seconds: resources::active_deadline(&manifest.sandbox.limits),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: metadata.labels,
                    ..ObjectMeta::default()
                }),
                spec: Some(spec),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

#[cfg(test)]
mod tests;
