//! [`RunCgroup`]: one run's cgroups, from creation to removal.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::controller::{Version, counter, settings};
use crate::discover::{Host, self_leaf};
use crate::error::OWN_SCOPE_HELP;
use crate::plan::{Place, plan};
use crate::{Controller, CpuStat, LimitHit, Limits, LimitsError, cgfs, kill};

/// The `<n>` of the next run cgroup `constle-<label>-<pid>-<n>`.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Serialises changes to the v2 parent (`cgroup.subtree_control`, constle
/// moving itself), which concurrent runs of one process would race on.
static PARENT: Mutex<()> = Mutex::new(());

/// How many names are tried when earlier ones are taken (left behind by a
/// crashed process that had the same pid).
const NAME_ATTEMPTS: u32 = 64;

/// One run's cgroups: at most one in the v2 hierarchy and one per v1
/// hierarchy used, all named `constle-<label>-<pid>-<n>`, with the run's
/// limits set. Dropping it kills whatever is still inside and removes them.
///
/// See the [crate documentation](crate) for how a run uses it.
#[derive(Debug)]
pub struct RunCgroup {
    groups: Vec<Group>,
    limits: Limits,
}

#[derive(Debug)]
struct Group {
    dir: PathBuf,
    version: Version,
    /// The limits enforced here; none for a v2 group made only for
    /// `cgroup.kill` and CPU time on a machine whose limits are all in v1.
    controllers: Vec<Controller>,
}

/// Why one try at making the groups under one name did not succeed.
enum Attempt {
    /// The name exists already somewhere: try the next.
    Taken,
    Failed(LimitsError),
}

impl From<LimitsError> for Attempt {
    fn from(e: LimitsError) -> Attempt {
        Attempt::Failed(e)
    }
}

impl RunCgroup {
    /// Makes the run's cgroups with `limits` set, before anything of the
    /// run starts. `label` (the agent's name) makes them easy to recognise
    /// in `systemd-cgls` or `/sys/fs/cgroup`.
    ///
    /// With no limit declared, makes nothing and cannot fail on cgroups.
    ///
    /// # Errors
    ///
    /// [`LimitsError::Unavailable`] when a declared limit cannot be
    /// enforced here, saying what was found and what to do;
    /// [`LimitsError::Zero`], [`LimitsError::InvalidLabel`]; or
    /// [`LimitsError::Io`] when the kernel refuses a value. Whatever was
    /// made before the error is removed.
    pub fn create(label: &str, limits: &Limits) -> Result<RunCgroup, LimitsError> {
        check_label(label)?;
        let declared = limits.declared()?;
        if declared.is_empty() {
            return Ok(RunCgroup {
                groups: Vec::new(),
                limits: *limits,
            });
        }
        create_on(&Host::current()?, label, *limits, &declared)
    }

    /// The `cgroup.procs` file of each of the run's cgroups. A process that
    /// writes `0` into each ([`enter`](crate::enter)) is inside, and so is
    /// everything it starts afterwards. Empty when no limit is declared.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.groups
            .iter()
            .map(|g| g.dir.join("cgroup.procs"))
            .collect()
    }

    /// The limits reached so far: memory when the kernel's OOM killer has
    /// killed a process of the run, pids when a fork or a new thread was
    /// refused. A CPU limit slows the run down and is never "reached".
    /// Cheap enough to poll every second.
    ///
    /// # Errors
    ///
    /// [`LimitsError::Io`] when a counter cannot be read.
    pub fn hits(&self) -> Result<Vec<LimitHit>, LimitsError> {
        let mut hits = Vec::new();
        for group in &self.groups {
            for kind in group.controllers.iter().filter_map(|c| c.hit_kind()) {
                let (file, key) = counter(kind, group.version);
                let count = cgfs::counter(&group.dir.join(file), key)?;
                if count > 0 {
                    hits.push(LimitHit::new(kind, count, &self.limits));
                }
            }
        }
        Ok(hits)
    }

    /// The CPU time the run has used and, under a CPU limit, how long it
    /// was held back, for the run's summary.
    ///
    /// # Errors
    ///
    /// [`LimitsError::Io`] when `cpu.stat` cannot be read.
    pub fn cpu_stat(&self) -> Result<CpuStat, LimitsError> {
        let v2 = self.groups.iter().find(|g| g.version == Version::V2);
        let usage = match v2 {
            Some(g) => Some(Duration::from_micros(cgfs::counter(
                &g.dir.join("cpu.stat"),
                "usage_usec",
            )?)),
            None => None,
        };
        let limited = self
            .groups
            .iter()
            .find(|g| g.controllers.contains(&Controller::Cpu));
        let throttled = match limited {
            Some(g) if g.version == Version::V2 => Some(Duration::from_micros(cgfs::counter(
                &g.dir.join("cpu.stat"),
                "throttled_usec",
            )?)),
            Some(g) => Some(Duration::from_nanos(cgfs::counter(
                &g.dir.join("cpu.stat"),
                "throttled_time",
            )?)),
            None => None,
        };
        Ok(CpuStat { usage, throttled })
    }

    /// Kills every process in the run's cgroups and waits until none is
    /// left: `cgroup.kill` where the kernel has it, else SIGKILL to each
    /// listed process until the lists are empty.
    ///
    /// # Errors
    ///
    /// [`LimitsError::StillRunning`] when processes remain after 5 seconds;
    /// [`LimitsError::Io`] when a list cannot be read.
    pub fn kill_all(&self) -> Result<(), LimitsError> {
        kill::kill_all(&self.dirs())
    }

    /// Kills what is left ([`kill_all`](RunCgroup::kill_all)) and removes
    /// the run's cgroups, reporting what went wrong; dropping does the same
    /// silently.
    ///
    /// # Errors
    ///
    /// The first failure; the rest of the teardown is still done.
    pub fn remove(mut self) -> Result<(), LimitsError> {
        self.teardown()
    }

    pub(crate) fn dirs(&self) -> Vec<&Path> {
        self.groups.iter().map(|g| g.dir.as_path()).collect()
    }

    fn teardown(&mut self) -> Result<(), LimitsError> {
        let mut result = self.kill_all();
        for group in self.groups.drain(..).rev() {
            let removed = cgfs::remove_dir(&group.dir);
            if result.is_ok() {
                result = removed;
            }
        }
        result
    }

    /// Makes the group `dir`; on failure other than a taken name,
    /// `refused` says whether that fails the run (`Some`) or leaves the
    /// group out (`None`).
    fn make(
        &mut self,
        dir: PathBuf,
        version: Version,
        controllers: Vec<Controller>,
        refused: impl FnOnce(&Path, io::Error) -> Option<LimitsError>,
    ) -> Result<(), Attempt> {
        match fs::create_dir(&dir) {
            Ok(()) => {
                self.groups.push(Group {
                    dir,
                    version,
                    controllers,
                });
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(Attempt::Taken),
            Err(e) => refused(&dir, e).map_or(Ok(()), |e| Err(Attempt::Failed(e))),
        }
    }

    /// Writes every limit into the groups made.
    fn apply(&self) -> Result<(), LimitsError> {
        for group in &self.groups {
            let declared = group
                .controllers
                .iter()
                .filter_map(|&c| self.limits.get(c).map(|value| (c, value)));
            for (controller, value) in declared {
                for setting in settings(controller, group.version, value) {
                    let file = group.dir.join(setting.file);
                    if !setting.required && !file.exists() {
                        continue;
                    }
                    cgfs::write(&file, &setting.value)
                        .map_err(LimitsError::io("cannot set", &file))?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        // Nothing to report to; `remove` is the way to hear about failures.
        let _ = self.teardown();
    }
}

/// The label is part of a directory name in every hierarchy.
fn check_label(label: &str) -> Result<(), LimitsError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if (1..=64).contains(&label.len()) && label.chars().all(ok) {
        Ok(())
    } else {
        Err(LimitsError::InvalidLabel {
            label: label.to_owned(),
        })
    }
}

/// [`RunCgroup::create`] on the cgroups `host` describes.
pub(crate) fn create_on(
    host: &Host,
    label: &str,
    limits: Limits,
    declared: &[Controller],
) -> Result<RunCgroup, LimitsError> {
    let plan = plan(host, declared)?;
    let on_v2: Vec<Controller> = plan
        .iter()
        .filter(|(_, place)| *place == Place::V2)
        .map(|(c, _)| *c)
        .collect();
    if let (Some(parent), false) = (&host.v2, on_v2.is_empty()) {
        enable(parent, &on_v2, host.pid)?;
    }
    let mut name = String::new();
    for _ in 0..NAME_ATTEMPTS {
        name = format!(
            "constle-{label}-{}-{}",
            host.pid,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        match build(host, &plan, &on_v2, &name, limits) {
            Ok(run) => return Ok(run),
            Err(Attempt::Taken) => continue,
            Err(Attempt::Failed(e)) => return Err(e),
        }
    }
    Err(LimitsError::Io {
        action: "cannot find a free cgroup name; the last tried was",
        path: PathBuf::from(name),
        source: io::ErrorKind::AlreadyExists.into(),
    })
}

/// Makes the groups called `name` and sets the limits. On error, what was
/// made is removed when the half-made [`RunCgroup`] drops.
fn build(
    host: &Host,
    plan: &[(Controller, Place)],
    on_v2: &[Controller],
    name: &str,
    limits: Limits,
) -> Result<RunCgroup, Attempt> {
    let mut run = RunCgroup {
        groups: Vec::new(),
        limits,
    };
    if let Some(parent) = &host.v2 {
        // With no limit of its own the v2 group only serves cgroup.kill and
        // the CPU time: where it cannot be made, nothing declared is lost.
        let needed = on_v2.first().copied();
        run.make(parent.join(name), Version::V2, on_v2.to_vec(), |dir, e| {
            needed.map(|c| LimitsError::unavailable(c, v2_refused(dir, &e)))
        })?;
    }
    for (controller, place) in plan {
        let Place::V1 { parent, why_not_v2 } = place else {
            continue;
        };
        let dir = parent.join(name);
        // Controllers co-mounted in one v1 hierarchy share one group.
        if let Some(group) = run.groups.iter_mut().find(|g| g.dir == dir) {
            group.controllers.push(*controller);
            continue;
        }
        run.make(dir, Version::V1, vec![*controller], |dir, e| {
            Some(LimitsError::unavailable(
                *controller,
                format!(
                    "{why_not_v2}, and creating {} in the cgroup v1 {controller} hierarchy failed: {e}",
                    dir.display()
                ),
            ))
        })?;
    }
    run.apply()?;
    Ok(run)
}

fn v2_refused(dir: &Path, e: &io::Error) -> String {
    format!(
        "creating {} in the cgroup v2 hierarchy failed: {e}{}",
        dir.display(),
        not_delegated(e)
    )
}

/// What a refusal to write a v2 group's files usually means.
fn not_delegated(e: &io::Error) -> &'static str {
    if e.kind() == io::ErrorKind::PermissionDenied {
        " (constle's cgroup is not delegated to this user)"
    } else {
        ""
    }
}

/// Makes `controllers` available to the children of `parent` through its
/// `cgroup.subtree_control`.
///
/// cgroup v2 lets a group hand controllers down only while it holds no
/// process itself. When constle is that process (started alone in a
/// delegated scope, as `systemd-run --user --scope -p Delegate=yes` does),
/// it moves itself into a leaf of its own, `constle-<pid>-self`, beside
/// the runs, as systemd's delegation rules expect. When other processes
/// share the group, moving them is not constle's call: that is an error.
fn enable(parent: &Path, controllers: &[Controller], pid: u32) -> Result<(), LimitsError> {
    let _serial = PARENT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let file = parent.join("cgroup.subtree_control");
    let enabled = cgfs::words(&file).map_err(LimitsError::io("cannot read", &file))?;
    let missing: Vec<Controller> = controllers
        .iter()
        .copied()
        .filter(|c| !enabled.iter().any(|e| e == c.name()))
        .collect();
    let Some(&first) = missing.first() else {
        return Ok(());
    };
    let line: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
    let line = line.join(" ");
    let refused = |e: io::Error| {
        LimitsError::unavailable(
            first,
            format!(
                "cgroup v2 offers the {first} controller, but writing {line:?} to {} failed: {e}{}",
                file.display(),
                not_delegated(&e)
            ),
        )
    };
    match cgfs::write(&file, &line) {
        Err(e) if e.kind() == io::ErrorKind::ResourceBusy => {
            move_self(parent, pid, first)?;
            cgfs::write(&file, &line).map_err(refused)
        }
        written => written.map_err(refused),
    }
}

/// Moves this process out of `parent` into its own leaf, if it is the only
/// process there.
fn move_self(parent: &Path, pid: u32, controller: Controller) -> Result<(), LimitsError> {
    let others: Vec<u32> = cgfs::pids(&parent.join("cgroup.procs"))?
        .into_iter()
        .filter(|p| *p != pid)
        .collect();
    if !others.is_empty() {
        return Err(LimitsError::Unavailable {
            controller,
            found: format!(
                "cgroup v2 offers the {controller} controller, but constle's cgroup {} also holds other processes ({others:?}), and a cgroup v2 group with processes cannot hand controllers down",
                parent.display()
            ),
            help: OWN_SCOPE_HELP,
        });
    }
    let leaf = parent.join(self_leaf(pid));
    match fs::create_dir(&leaf) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            return Err(LimitsError::io("cannot create", &leaf)(e));
        }
        _ => {}
    }
    crate::enter(&[leaf.join("cgroup.procs")])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::V1Hierarchy;

    #[test]
    fn labels() {
        for ok in ["invoice-processor", "a", "A_b.9", &"x".repeat(64)] {
            assert!(check_label(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "..x/", "a b", "é", &"x".repeat(65)] {
            assert!(check_label(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn no_limits_make_nothing() {
        let run = RunCgroup::create("x", &Limits::default()).unwrap();
        assert!(run.procs_files().is_empty());
        assert!(run.hits().unwrap().is_empty());
        assert_eq!(
            run.cpu_stat().unwrap(),
            CpuStat {
                usage: None,
                throttled: None
            }
        );
        run.remove().unwrap();
    }

    #[test]
    fn zero_is_refused() {
        let zero = Limits {
            pids: Some(0),
            ..Limits::default()
        };
        let err = RunCgroup::create("x", &zero).unwrap_err();
        assert!(
            matches!(
                err,
                LimitsError::Zero {
                    controller: Controller::Pids
                }
            ),
            "{err}"
        );
    }

    /// On a fake hierarchy a directory is made but its limit files do not
    /// exist: the error names the file, and the directory is removed.
    #[test]
    fn a_failed_create_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let memory = root.path().join("memory");
        fs::create_dir(&memory).unwrap();
        let host = Host {
            pid: 7,
            v2: None,
            v1: vec![V1Hierarchy {
                controllers: vec!["memory".into()],
                dir: memory.clone(),
            }],
        };
        let limits = Limits {
            memory_bytes: Some(64 << 20),
            ..Limits::default()
        };
        let err = create_on(&host, "t", limits, &[Controller::Memory]).unwrap_err();
        let LimitsError::Io { action, path, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(*action, "cannot set");
        assert!(path.ends_with("memory.limit_in_bytes"), "{err}");
        assert_eq!(fs::read_dir(&memory).unwrap().count(), 0);
    }

    #[test]
    fn enable_writes_only_what_is_missing() {
        let parent = tempfile::tempdir().unwrap();
        let file = parent.path().join("cgroup.subtree_control");
        fs::write(&file, "memory\n").unwrap();
        enable(
            parent.path(),
            &[Controller::Memory, Controller::Pids, Controller::Cpu],
            7,
        )
        .unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "+pids +cpu");
        fs::write(&file, "cpu memory pids\n").unwrap();
        enable(parent.path(), &[Controller::Memory], 7).unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "cpu memory pids\n");
    }

    /// constle moves itself aside only when it is alone in its cgroup.
    #[test]
    fn moving_aside_needs_an_own_scope() {
        let parent = tempfile::tempdir().unwrap();
        fs::write(parent.path().join("cgroup.procs"), "1\n7\n").unwrap();
        let err = move_self(parent.path(), 7, Controller::Memory).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("also holds other processes ([1])"),
            "{message}"
        );
        assert!(message.ends_with(OWN_SCOPE_HELP), "{message}");
        assert!(!parent.path().join("constle-7-self").exists());

        // Alone: it makes its leaf and enters it (which the fake cannot do).
        fs::write(parent.path().join("cgroup.procs"), "7\n").unwrap();
        let err = move_self(parent.path(), 7, Controller::Memory).unwrap_err();
        let LimitsError::Io { action, path, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(*action, "cannot enter");
        assert_eq!(path, &parent.path().join("constle-7-self/cgroup.procs"));
    }

    #[test]
    fn a_taken_name_is_skipped() {
        let root = tempfile::tempdir().unwrap();
        let pids = root.path().join("pids");
        let host = Host {
            pid: 7,
            v2: None,
            v1: vec![V1Hierarchy {
                controllers: vec!["pids".into()],
                dir: pids.clone(),
            }],
        };
        let next = NEXT.load(Ordering::Relaxed);
        for n in next..next + 3 {
            fs::create_dir_all(pids.join(format!("constle-t-7-{n}"))).unwrap();
        }
        let limits = Limits {
            pids: Some(8),
            ..Limits::default()
        };
        // The first free name is made (and fails on the fake's missing
        // pids.max, which removes it again).
        let err = create_on(&host, "t", limits, &[Controller::Pids]).unwrap_err();
        let LimitsError::Io { path, .. } = &err else {
            panic!("{err}");
        };
        let made = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        let n: u32 = made.rsplit('-').next().unwrap().parse().unwrap();
        assert!(n >= next + 3, "{made}");
        assert!(!path.parent().unwrap().exists());
    }
}
