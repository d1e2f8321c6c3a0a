//! The agent container's resources from `sandbox.limits`.
//!
//! The limits bound the agent's process tree; the container also holds
//! Constle (the gates, the audit writer) and Squid, so it gets the agent's
//! limit plus a fixed headroom:
//!
//! - memory: `sandbox.limits.memory` + [`MEMORY_HEADROOM_BYTES`] (256 MiB);
//! - CPU: `sandbox.limits.cpus` + [`CPU_HEADROOM_MILLIS`] (0.5 CPU);
//!
//! requests equal limits, so the pod is scheduled where the whole of it
//! fits. A limit the Agentfile does not declare is not declared here
//! either: the requests are then the headroom alone. `pids` has no
//! per-container counterpart in Kubernetes (the kubelet's `podPidsLimit` is
//! the node's): Constle enforces it itself where it can make cgroups.

use std::collections::BTreeMap;

use constle_manifest::Limits;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Memory for Constle and Squid beside the agent.
pub const MEMORY_HEADROOM_BYTES: u64 = 256 * MIB;
/// CPU for Constle and Squid beside the agent, in thousandths.
pub const CPU_HEADROOM_MILLIS: u32 = 500;
/// How much longer than `wall_clock_seconds` the Job may run: Constle stops
/// the agent at its limit, then needs time to settle calls and finish the
/// log before Kubernetes kills the pod.
pub const DEADLINE_HEADROOM_SECONDS: u32 = 60;

const MIB: u64 = 1024 * 1024;

/// The container's requests and limits for `limits`.
pub fn container_resources(limits: &Limits) -> ResourceRequirements {
    let memory = limits
        .memory_bytes
        .map(|bytes| bytes.saturating_add(MEMORY_HEADROOM_BYTES));
    let cpu = limits
        .cpu_millis
        .map(|millis| millis.saturating_add(CPU_HEADROOM_MILLIS));
    let mut declared = BTreeMap::new();
    if let Some(bytes) = memory {
        declared.insert("memory".to_owned(), memory_quantity(bytes));
    }
    if let Some(millis) = cpu {
        declared.insert("cpu".to_owned(), cpu_quantity(millis));
    }
    let mut requests = BTreeMap::from([
        ("memory".to_owned(), memory_quantity(MEMORY_HEADROOM_BYTES)),
        ("cpu".to_owned(), cpu_quantity(CPU_HEADROOM_MILLIS)),
    ]);
    requests.extend(declared.clone());
    ResourceRequirements {
        limits: (!declared.is_empty()).then_some(declared),
        requests: Some(requests),
        ..ResourceRequirements::default()
    }
}

/// The Job's `activeDeadlineSeconds`: the wall clock and its headroom.
pub fn active_deadline(limits: &Limits) -> Option<i64> {
    limits
        .wall_clock_seconds
        .map(|s| i64::from(s) + i64::from(DEADLINE_HEADROOM_SECONDS))
}

/// Whole mebibytes as `NMi`, anything else in bytes: exact either way.
fn memory_quantity(bytes: u64) -> Quantity {
    Quantity(match bytes % MIB {
        0 => format!("{}Mi", bytes / MIB),
        _ => bytes.to_string(),
    })
}

fn cpu_quantity(millis: u32) -> Quantity {
    Quantity(format!("{millis}m"))
}
