//! The Redis that the agent's runs share: the spend ledger (day and month
//! totals across every Job) and the A2A replay store (a message accepted
//! once across the fleet). A Deployment of one replica and a Service.
//!
//! Its data is in an `emptyDir` with append-only persistence: it survives a
//! restart of the container, not the loss of the pod. Totals lost with it
//! start again from zero (docs/kubernetes.md: use a volume of your own or a
//! managed Redis where that matters).

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, SeccompProfile, SecurityContext, Service, ServicePort, ServiceSpec, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::fence::REDIS_PORT;
use crate::meta::{self, Component};
use crate::options::Options;

/// The uid of the `redis` user in the Debian-based Redis images.
const REDIS_UID: i64 = 999;

/// The Redis Deployment.
pub fn deployment(options: &Options) -> Deployment {
    Deployment {
        metadata: meta::object(options, Component::Redis, "-redis"),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: meta::selector(options, Component::Redis),
            // One Redis at a time: two would each hold half the totals.
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".to_owned()),
                ..DeploymentStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(meta::labels(options, Component::Redis)),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec(options)),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// The Service the Agentfile's `redis://` URLs name.
pub fn service(options: &Options) -> Service {
    Service {
        metadata: meta::object(options, Component::Redis, "-redis"),
        spec: Some(ServiceSpec {
            selector: Some(meta::labels(options, Component::Redis)),
            ports: Some(vec![ServicePort {
                name: Some("redis".to_owned()),
                port: REDIS_PORT,
                target_port: Some(IntOrString::Int(REDIS_PORT)),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// `redis://<service>.<namespace>.svc:6379/0`, or `redis://<service>:6379/0`
/// without a namespace (resolved in the pod's own).
pub fn url(options: &Options) -> String {
    let host = match &options.namespace {
        Some(ns) => format!("{}.{}.svc", meta::redis_service(options), ns.as_str()),
        None => meta::redis_service(options),
    };
    format!("redis://{host}:{REDIS_PORT}/0")
}

fn pod_spec(options: &Options) -> PodSpec {
    PodSpec {
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(REDIS_UID),
            run_as_group: Some(REDIS_UID),
            fs_group: Some(REDIS_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        containers: vec![Container {
            name: "redis".to_owned(),
            image: Some(options.redis_image.clone()),
            command: Some(
                // No password: only the agent's pods can reach it (the
                // fence), and a password would sit in the Agentfile's URL.
                // So protected mode, which refuses every client from
                // another address when there is none, is off.
                [
                    "redis-server",
                    "--appendonly",
                    "yes",
                    "--dir",
                    "/data",
                    "--protected-mode",
                    "no",
                ]
                .map(str::to_owned)
                .to_vec(),
            ),
            ports: Some(vec![ContainerPort {
                container_port: REDIS_PORT,
                name: Some("redis".to_owned()),
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            }]),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".to_owned()]),
                    ..Capabilities::default()
                }),
                read_only_root_filesystem: Some(true),
                ..SecurityContext::default()
            }),
            volume_mounts: Some(vec![VolumeMount {
                name: "data".to_owned(),
                mount_path: "/data".to_owned(),
                ..VolumeMount::default()
            }]),
            ..Container::default()
        }],
        volumes: Some(vec![Volume {
            name: "data".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        }]),
        ..PodSpec::default()
    }
}
