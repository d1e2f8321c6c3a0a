//! What the probe process tries, and how it tells the parent: one line per
//! step, `<step> ok`, `<step> errno <n>` or `<step> skipped`.

use std::collections::BTreeMap;

/// The hidden subcommand that runs the probe process:
/// `constle preflight-probe`. The `constle` binary hands it to
/// [`probe_main`](crate::probe_main) before any other argument parsing.
pub const PROBE_SUBCOMMAND: &str = "preflight-probe";

/// One thing the probe process tries, in the order it tries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Step {
    /// `clone(2)` with every namespace flag bubblewrap uses, from the
    /// process's own namespaces.
    Clone,
    /// `unshare(CLONE_NEWUSER)`.
    Userns,
    /// Writing `setgroups`, `uid_map` and `gid_map` of the new namespace.
    Maps,
    /// `unshare` of the mount, UTS, IPC, network, cgroup and PID
    /// namespaces, inside the new user namespace.
    Unshare,
    /// `mount(2)`: `/` made private, a tmpfs on `/tmp`.
    Mount,
    /// `mount(2)` of a fresh `proc` by pid 1 of the new PID namespace.
    Proc,
    /// `sethostname(2)`.
    Sethostname,
    /// `pivot_root(2)` into the tmpfs.
    PivotRoot,
    /// `umount2(2)` of the old root.
    Umount2,
}

impl Step {
    pub(crate) const ALL: [Step; 9] = [
        Step::Clone,
        Step::Userns,
        Step::Maps,
        Step::Unshare,
        Step::Mount,
        Step::Proc,
        Step::Sethostname,
        Step::PivotRoot,
        Step::Umount2,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::Clone => "clone",
            Step::Userns => "userns",
            Step::Maps => "maps",
            Step::Unshare => "unshare",
            Step::Mount => "mount",
            Step::Proc => "proc",
            Step::Sethostname => "sethostname",
            Step::PivotRoot => "pivot_root",
            Step::Umount2 => "umount2",
        }
    }

    fn named(name: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// How a step went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    /// Refused, with this errno.
    Errno(i32),
    /// Not tried: an earlier step it depends on failed.
    Skipped,
}

impl Outcome {
    pub(crate) fn of<T>(result: nix::Result<T>) -> Outcome {
        match result {
            Ok(_) => Outcome::Ok,
            Err(errno) => Outcome::Errno(errno as i32),
        }
    }

    /// The line the probe process prints for `step`.
    pub(crate) fn line(self, step: Step) -> String {
        match self {
            Outcome::Ok => format!("{} ok", step.name()),
            Outcome::Errno(n) => format!("{} errno {n}", step.name()),
            Outcome::Skipped => format!("{} skipped", step.name()),
        }
    }
}

/// What the probe process reported, by step; a step it did not report is
/// absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Probes(BTreeMap<Step, Outcome>);

impl Probes {
    /// The steps in the probe process's output; other lines are ignored.
    pub(crate) fn parse(output: &str) -> Probes {
        let outcomes = output.lines().filter_map(|line| {
            let mut words = line.split(' ');
            let step = Step::named(words.next()?)?;
            let outcome = match (words.next()?, words.next()) {
                ("ok", None) => Outcome::Ok,
                ("skipped", None) => Outcome::Skipped,
                ("errno", Some(n)) => Outcome::Errno(n.parse().ok()?),
                _ => return None,
            };
            Some((step, outcome))
        });
        Probes(outcomes.collect())
    }

    /// How `step` went; `None` when it was not reported.
    pub(crate) fn get(&self, step: Step) -> Option<Outcome> {
        self.0.get(&step).copied()
    }

    /// Probes from pairs, for tests.
    #[cfg(test)]
    pub(crate) fn from_pairs(pairs: &[(Step, Outcome)]) -> Probes {
        Probes(pairs.iter().copied().collect())
    }
}

/// `EPERM`, `EINVAL`…: an errno's symbolic name.
pub(crate) fn errno_name(n: i32) -> String {
    format!("{:?}", nix::errno::Errno::from_raw(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_noise_is_ignored() {
        let text = [
            Outcome::Ok.line(Step::Clone),
            Outcome::Errno(1).line(Step::Userns),
            Outcome::Skipped.line(Step::Umount2),
            "proc errno x".to_owned(),
            "something else".to_owned(),
        ]
        .join("\n");
        let probes = Probes::parse(&text);
        assert_eq!(probes.get(Step::Clone), Some(Outcome::Ok));
        assert_eq!(probes.get(Step::Userns), Some(Outcome::Errno(1)));
        assert_eq!(probes.get(Step::Umount2), Some(Outcome::Skipped));
        assert_eq!(probes.get(Step::Proc), None);
        assert_eq!(errno_name(libc::EPERM), "EPERM");
    }
}
