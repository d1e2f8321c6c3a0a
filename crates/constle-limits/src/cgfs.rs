//! Reading and writing cgroup files: the few shapes they come in.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::LimitsError;

/// How long removing a cgroup retries while the kernel still counts
/// processes that have just been killed.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(2);

/// A file's text.
pub(crate) fn read(path: &Path) -> Result<String, LimitsError> {
    fs::read_to_string(path).map_err(LimitsError::io("cannot read", path))
}

/// A file of space-separated words, such as `cgroup.controllers`.
pub(crate) fn words(path: &Path) -> io::Result<Vec<String>> {
    let text = fs::read_to_string(path)?;
    Ok(text.split_whitespace().map(str::to_owned).collect())
}

/// Writes `value` in one `write`, as cgroup files need. Never creates the
/// file: a cgroup file that is missing means the controller is.
pub(crate) fn write(path: &Path, value: &str) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

/// The process ids listed in a `cgroup.procs` file.
pub(crate) fn pids(procs: &Path) -> Result<Vec<u32>, LimitsError> {
    let text = read(procs)?;
    text.lines()
        .map(|line| {
            line.trim().parse().map_err(|_| LimitsError::Io {
                action: "cannot read",
                path: procs.to_path_buf(),
                source: io::Error::new(io::ErrorKind::InvalidData, format!("not a pid: {line:?}")),
            })
        })
        .collect()
}

/// The value of `key` in a flat-keyed file (`oom_kill 3`, `max 12`).
pub(crate) fn counter(path: &Path, key: &str) -> Result<u64, LimitsError> {
    let text = read(path)?;
    text.lines()
        .filter_map(|line| line.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
        .ok_or_else(|| LimitsError::Io {
            action: "cannot read",
            path: path.to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("no `{key}` count (the kernel may be too old)"),
            ),
        })
}

/// Removes an empty cgroup, retrying while it is busy: a killed process
/// leaves its cgroup a moment after the signal. Gone already is success.
pub(crate) fn remove_dir(dir: &Path) -> Result<(), LimitsError> {
    let deadline = Instant::now() + REMOVE_TIMEOUT;
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy && Instant::now() < deadline => {
                sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(LimitsError::io("cannot remove", dir)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let events = dir.path().join("memory.events");
        fs::write(
            &events,
            "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n",
        )
        .unwrap();
        assert_eq!(counter(&events, "oom_kill").unwrap(), 1);
        assert_eq!(counter(&events, "max").unwrap(), 12);
        let missing = counter(&events, "oom_killed").unwrap_err().to_string();
        assert!(missing.contains("no `oom_killed` count"), "{missing}");
    }

    #[test]
    fn pids_one_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let procs = dir.path().join("cgroup.procs");
        fs::write(&procs, "").unwrap();
        assert!(pids(&procs).unwrap().is_empty());
        fs::write(&procs, "12\n345\n").unwrap();
        assert_eq!(pids(&procs).unwrap(), [12, 345]);
        fs::write(&procs, "12\nx\n").unwrap();
        assert!(pids(&procs).is_err());
    }

    #[test]
    fn write_never_creates() {
        let dir = tempfile::tempdir().unwrap();
        let err = write(&dir.path().join("memory.max"), "1").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
