//! Killing everything in a run's cgroups, so that nothing outlives a run.
//!
//! cgroup v2's `cgroup.kill` (Linux 5.14) kills a whole group at once,
//! forks in flight included. Then, and wherever there is no such file (v1,
//! older kernels), every listed process is sent SIGKILL and the lists are
//! read again until they are empty: a child forked while the kill is under
//! way shows up in the next read, and the pids limit bounds how many there
//! can be. Each process is signalled through a pidfd opened while it is
//! still listed, so a pid freed and reused by an unrelated process between
//! the read and the signal is never hit (on kernels before 5.3, which have
//! no pidfds, that small race remains).

use std::os::fd::OwnedFd;
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal, kill_process, pidfd_open, pidfd_send_signal};

use crate::{LimitsError, cgfs};

/// How long the killing goes on before [`LimitsError::StillRunning`].
const KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// How to signal one listed process.
enum Target {
    Pidfd(OwnedFd),
    /// No pidfds on this kernel: by pid.
    Pid(Pid),
    /// It exited before it could be opened.
    Gone,
}

/// Kills every process in the cgroups at `dirs` and waits until they are
/// all gone.
pub(crate) fn kill_all(dirs: &[&Path]) -> Result<(), LimitsError> {
    for dir in dirs {
        let file = dir.join("cgroup.kill");
        if file.exists() {
            cgfs::write(&file, "1").map_err(LimitsError::io("cannot write", &file))?;
        }
    }
    sigkill_until_empty(dirs)
}

/// SIGKILL rounds until the cgroups at `dirs` are empty.
fn sigkill_until_empty(dirs: &[&Path]) -> Result<(), LimitsError> {
    let deadline = Instant::now() + KILL_TIMEOUT;
    loop {
        let pids = members(dirs)?;
        if pids.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(LimitsError::StillRunning { pids });
        }
        signal(&pids, dirs)?;
        sleep(Duration::from_millis(10));
    }
}

/// Every process listed in the cgroups at `dirs`, sorted, once each.
pub(crate) fn members(dirs: &[&Path]) -> Result<Vec<u32>, LimitsError> {
    let mut pids = Vec::new();
    for dir in dirs {
        pids.extend(cgfs::pids(&dir.join("cgroup.procs"))?);
    }
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// Sends SIGKILL to each of `pids` still listed once it has been opened.
/// A process that cannot be signalled is left for the next round and, in
/// the end, for [`LimitsError::StillRunning`].
fn signal(pids: &[u32], dirs: &[&Path]) -> Result<(), LimitsError> {
    let targets: Vec<(u32, Target)> = pids.iter().map(|&pid| (pid, open(pid))).collect();
    let listed = members(dirs)?;
    for (pid, target) in targets {
        if listed.binary_search(&pid).is_err() {
            continue;
        }
        let _ = match target {
            Target::Pidfd(fd) => pidfd_send_signal(&fd, Signal::KILL),
            Target::Pid(pid) => kill_process(pid, Signal::KILL),
            Target::Gone => Ok(()),
        };
    }
    Ok(())
}

fn open(pid: u32) -> Target {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Target::Gone;
    };
    match pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => Target::Pidfd(fd),
        Err(Errno::SRCH) => Target::Gone,
        Err(_) => Target::Pid(pid),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    use super::*;
    use crate::{LimitKind, Limits, RunCgroup};

    /// Each process forks up to three children, five generations deep, and
    /// retries refused forks: 364 processes at most even without a limit.
    const BOMB: &str = "\
import os, time
deadline = time.time() + 30
depth = forked = 0
while time.time() < deadline:
    if forked < 3 and depth < 5:
        try:
            if os.fork() == 0:
                depth, forked = depth + 1, 0
                continue
            forked += 1
        except OSError:
            pass
    time.sleep(0.01)
";

    /// Without `cgroup.kill` (v1, kernels before 5.14) the SIGKILL rounds
    /// alone empty a group in which a fork bomb keeps forking.
    #[test]
    fn sigkill_rounds_stop_a_fork_bomb() {
        let test = "kill::tests::sigkill_rounds_stop_a_fork_bomb";
        if !constle_testkit::require_root(test, &["/usr/bin/python3"]) {
            return;
        }
        let limits = Limits {
            pids: Some(64),
            ..Limits::default()
        };
        let run = match RunCgroup::create("bomb", &limits) {
            Ok(run) => run,
            Err(e) if std::env::var(constle_testkit::E2E_ENV).is_ok_and(|v| v == "require") => {
                panic!("{test}: cgroups cannot enforce limits here: {e}")
            }
            Err(e) => {
                eprintln!("skipped: {test}: cgroups cannot enforce limits here: {e}");
                return;
            }
        };
        // Enters as the launcher does, by writing 0 into each file.
        let mut bomb = Command::new("/bin/sh")
            .arg("-c")
            .arg(r#"for f; do echo 0 > "$f" || exit 1; done; exec /usr/bin/python3 -c "$BOMB""#)
            .arg("sh")
            .args(run.procs_files())
            .env("BOMB", BOMB)
            .spawn()
            .unwrap();
        let full = Instant::now() + Duration::from_secs(10);
        while !run
            .hits()
            .unwrap()
            .iter()
            .any(|h| h.limit == LimitKind::Pids)
        {
            assert!(Instant::now() < full, "the bomb never reached its limit");
            sleep(Duration::from_millis(10));
        }
        let dirs = run.dirs();
        assert!(members(&dirs).unwrap().len() > 32);
        sigkill_until_empty(&dirs).unwrap();
        assert!(members(&dirs).unwrap().is_empty());
        assert_eq!(bomb.wait().unwrap().signal(), Some(9));
        run.remove().unwrap();
    }
}
