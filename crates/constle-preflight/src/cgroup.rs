//! The `cgroup_delegation` check: the run's cgroups made, with the limits,
//! by `constle_limits` exactly as a run makes them, then removed. Nothing
//! enters them.

use constle_limits::{Limits, RunCgroup};

use crate::classify;
use crate::needs::Needs;
use crate::report::{Check, CheckId};

/// The label of the trial cgroups (`constle-preflight-<pid>-<n>`).
const LABEL: &str = "preflight";

/// The check: required when limits are declared; otherwise tried with
/// [`Needs::PROBE_LIMITS`].
pub(crate) fn check(needs: &Needs) -> Check {
    let required = !needs.limits.is_empty();
    let limits = match required {
        true => needs.limits,
        false => Needs::PROBE_LIMITS,
    };
    let made = RunCgroup::create(LABEL, &limits)
        .and_then(RunCgroup::remove)
        .map_err(|e| e.to_string());
    classify::cgroups(&controllers(&limits), made).check(CheckId::CgroupDelegation, required)
}

/// The controllers `limits` need: `memory, pids, cpu`.
fn controllers(limits: &Limits) -> String {
    [
        ("memory", limits.memory_bytes.is_some()),
        ("pids", limits.pids.is_some()),
        ("cpu", limits.cpu_millis.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, declared)| declared.then_some(name))
    .collect::<Vec<_>>()
    .join(", ")
}
