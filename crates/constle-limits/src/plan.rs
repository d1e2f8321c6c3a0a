//! Which hierarchy enforces each declared limit: cgroup v2 when this
//! process's v2 group offers the controller, else the controller's own v1
//! hierarchy, else nothing, which is an error naming what was found.

use std::io;
use std::path::{Path, PathBuf};

use crate::discover::Host;
use crate::{Controller, LimitsError, cgfs};

/// Where one limit is enforced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// In the run's group under [`Host::v2`].
    V2,
    /// In the run's group under `parent`, this process's cgroup in the
    /// controller's v1 hierarchy. `why_not_v2` says why, for the error
    /// when that group cannot be made either.
    V1 { parent: PathBuf, why_not_v2: String },
}

/// A place for each of `declared`, in order.
pub(crate) fn plan(
    host: &Host,
    declared: &[Controller],
) -> Result<Vec<(Controller, Place)>, LimitsError> {
    let offered = host.v2.as_deref().map(|dir| {
        let file = dir.join("cgroup.controllers");
        let words = cgfs::words(&file);
        (dir, file, words)
    });
    declared
        .iter()
        .map(|&controller| {
            let why_not_v2 = match &offered {
                Some((_, _, Ok(words))) if words.iter().any(|w| w == controller.name()) => {
                    return Ok((controller, Place::V2));
                }
                Some((dir, _, Ok(words))) => not_offered(dir, controller, words),
                Some((_, file, Err(e))) => unreadable(file, e),
                None => "no cgroup v2 hierarchy is mounted".to_owned(),
            };
            match host.v1_for(controller) {
                Some(v1) => Ok((
                    controller,
                    Place::V1 {
                        parent: v1.dir.clone(),
                        why_not_v2,
                    },
                )),
                None => Err(LimitsError::unavailable(
                    controller,
                    format!("{why_not_v2}, and no cgroup v1 {controller} hierarchy is mounted"),
                )),
            }
        })
        .collect()
}

fn not_offered(dir: &Path, controller: Controller, offered: &[String]) -> String {
    let offered = if offered.is_empty() {
        "none".to_owned()
    } else {
        offered.join(" ")
    };
    format!(
        "the cgroup v2 group {} does not offer the {controller} controller (it offers: {offered})",
        dir.display()
    )
}

fn unreadable(file: &Path, e: &io::Error) -> String {
    format!("cannot read {}: {e}", file.display())
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::discover::V1Hierarchy;

    const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    /// A host whose v2 group is a temporary directory offering `offered`,
    /// with v1 hierarchies for `v1`.
    fn fake(offered: Option<&str>, v1: &[&str]) -> (tempfile::TempDir, Host) {
        let root = tempfile::tempdir().unwrap();
        let v2 = offered.map(|words| {
            let dir = root.path().join("unified/user.slice");
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("cgroup.controllers"), words).unwrap();
            dir
        });
        let v1 = v1
            .iter()
            .map(|c| V1Hierarchy {
                controllers: vec![(*c).to_owned()],
                dir: root.path().join(c),
            })
            .collect();
        (root, Host { pid: 7, v2, v1 })
    }

    #[test]
    fn pure_v2_delegated() {
        let (_root, host) = fake(Some("cpuset cpu io memory pids\n"), &[]);
        let plan = plan(&host, &ALL).unwrap();
        assert!(
            plan.iter().all(|(_, place)| *place == Place::V2),
            "{plan:?}"
        );
    }

    #[test]
    fn hybrid_falls_back_per_controller() {
        let (root, host) = fake(Some("hugetlb pids\n"), &["memory", "cpu"]);
        let plan = plan(&host, &ALL).unwrap();
        assert_eq!(plan[1], (Controller::Pids, Place::V2));
        let Place::V1 { parent, why_not_v2 } = &plan[0].1 else {
            panic!("{plan:?}");
        };
        assert_eq!(parent, &root.path().join("memory"));
        assert!(
            why_not_v2.ends_with(
                "user.slice does not offer the memory controller (it offers: hugetlb pids)"
            ),
            "{why_not_v2}"
        );
        assert!(matches!(plan[2].1, Place::V1 { .. }));
    }

    #[test]
    fn neither_is_an_error_naming_what_was_found() {
        let (_root, host) = fake(Some(""), &["memory"]);
        let err = plan(&host, &ALL).unwrap_err();
        let LimitsError::Unavailable {
            controller, found, ..
        } = &err
        else {
            panic!("{err}");
        };
        assert_eq!(*controller, Controller::Pids);
        assert!(
            found.ends_with(
                "does not offer the pids controller (it offers: none), and no cgroup v1 pids hierarchy is mounted"
            ),
            "{found}"
        );
        let message = err.to_string();
        assert!(message.starts_with("cannot enforce the pids limit: the cgroup v2 group "));
        assert!(message.ends_with(crate::error::help()), "{message}");

        let (_root, host) = fake(None, &[]);
        assert_eq!(
            plan(&host, &[Controller::Cpu]).unwrap_err().to_string(),
            format!(
                "cannot enforce the cpu limit: no cgroup v2 hierarchy is mounted, and no cgroup v1 cpu hierarchy is mounted; {}",
                crate::error::help()
            )
        );
    }

    #[test]
    fn unreadable_v2_group() {
        let (root, mut host) = fake(None, &["pids"]);
        host.v2 = Some(root.path().join("gone"));
        let plan = plan(&host, &[Controller::Pids]).unwrap();
        let Place::V1 { why_not_v2, .. } = &plan[0].1 else {
            panic!("{plan:?}");
        };
        assert!(why_not_v2.starts_with("cannot read "), "{why_not_v2}");
        assert!(
            why_not_v2.contains("gone/cgroup.controllers: No such file"),
            "{why_not_v2}"
        );
    }
}
