//! What each limit is in each cgroup version: the files written when a
//! run's group is made, and the counter that says a limit was reached.

use crate::{Controller, LimitKind};

/// cgroup v1 or v2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}

/// The period of the CPU quota, in microseconds: 100 ms, the kernel's
/// default and Docker's.
pub(crate) const CPU_PERIOD_US: u64 = 100_000;

/// A file written when a run's group is made.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Setting {
    pub file: &'static str,
    pub value: String,
    /// When false, a kernel without the file is fine: it only makes the
    /// limit harder to dodge.
    pub required: bool,
}

/// The files that set `controller`'s limit to `value` (bytes, processes,
/// or thousandths of a CPU), in the order they must be written.
pub(crate) fn settings(controller: Controller, version: Version, value: u64) -> Vec<Setting> {
    let set = |file, value: String, required| Setting {
        file,
        value,
        required,
    };
    let quota = || (value * CPU_PERIOD_US / 1000).to_string();
    match (controller, version) {
        // Swap would let the tree hold more than the limit; oom.group kills
        // the whole tree on OOM, so the run ends instead of limping on.
        (Controller::Memory, Version::V2) => vec![
            set("memory.max", value.to_string(), true),
            set("memory.swap.max", "0".to_owned(), false),
            set("memory.oom.group", "1".to_owned(), false),
        ],
        // memsw (memory + swap) must be set after the memory limit, which
        // it may not be below.
        (Controller::Memory, Version::V1) => vec![
            set("memory.limit_in_bytes", value.to_string(), true),
            set("memory.memsw.limit_in_bytes", value.to_string(), false),
        ],
        (Controller::Pids, _) => vec![set("pids.max", value.to_string(), true)],
        (Controller::Cpu, Version::V2) => {
            vec![set("cpu.max", format!("{} {CPU_PERIOD_US}", quota()), true)]
        }
        (Controller::Cpu, Version::V1) => vec![
            set("cpu.cfs_period_us", CPU_PERIOD_US.to_string(), true),
            set("cpu.cfs_quota_us", quota(), true),
        ],
    }
}

/// The file and key counting how often `kind`'s limit was reached: OOM
/// kills for memory, refused forks for pids.
pub(crate) fn counter(kind: LimitKind, version: Version) -> (&'static str, &'static str) {
    match (kind, version) {
        (LimitKind::Memory, Version::V2) => ("memory.events", "oom_kill"),
        // memory.failcnt counts every time the limit was touched, reclaim
        // that succeeded included; only oom_kill means something died.
        (LimitKind::Memory, Version::V1) => ("memory.oom_control", "oom_kill"),
        (LimitKind::Pids, _) => ("pids.events", "max"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(controller: Controller, version: Version, value: u64) -> Vec<(&'static str, String)> {
        settings(controller, version, value)
            .into_iter()
            .map(|s| (s.file, s.value))
            .collect()
    }

    #[test]
    fn memory() {
        let mib64 = (64u64 << 20).to_string();
        assert_eq!(
            files(Controller::Memory, Version::V2, 64 << 20),
            [
                ("memory.max", mib64.clone()),
                ("memory.swap.max", "0".into()),
                ("memory.oom.group", "1".into())
            ]
        );
        assert_eq!(
            files(Controller::Memory, Version::V1, 64 << 20),
            [
                ("memory.limit_in_bytes", mib64.clone()),
                ("memory.memsw.limit_in_bytes", mib64)
            ]
        );
        assert!(settings(Controller::Memory, Version::V2, 1)[0].required);
        assert!(!settings(Controller::Memory, Version::V1, 1)[1].required);
    }

    #[test]
    fn cpu_quota_per_100ms() {
        assert_eq!(
            files(Controller::Cpu, Version::V2, 200),
            [("cpu.max", "20000 100000".into())]
        );
        assert_eq!(
            files(Controller::Cpu, Version::V2, 1500),
            [("cpu.max", "150000 100000".into())]
        );
        // 0.01 CPU is the kernel's smallest quota, 1 ms.
        assert_eq!(
            files(Controller::Cpu, Version::V1, 10),
            [
                ("cpu.cfs_period_us", "100000".into()),
                ("cpu.cfs_quota_us", "1000".into())
            ]
        );
    }

    #[test]
    fn pids_and_counters() {
        assert_eq!(
            files(Controller::Pids, Version::V1, 32),
            [("pids.max", "32".into())]
        );
        assert_eq!(
            files(Controller::Pids, Version::V2, 32),
            [("pids.max", "32".into())]
        );
        assert_eq!(
            counter(LimitKind::Memory, Version::V2),
            ("memory.events", "oom_kill")
        );
        assert_eq!(
            counter(LimitKind::Memory, Version::V1),
            ("memory.oom_control", "oom_kill")
        );
        assert_eq!(
            counter(LimitKind::Pids, Version::V1),
            ("pids.events", "max")
        );
    }
}
