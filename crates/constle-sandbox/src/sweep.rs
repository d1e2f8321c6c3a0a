//! After a root run: no set-id file of the agent's is left in its work
//! directory.
//!
//! In a root run the agent's files belong on disk to the work directory's
//! owner, often root, so a set-user-ID bit on one would make it a setuid
//! program of the host's. The seccomp filter refuses every way of setting
//! such a bit; this sweep is the second layer, for a filter that missed one.
//! It walks the directory by descriptor, never following a link or leaving
//! the directory's file system, and clears `S_ISUID` and `S_ISGID` on every
//! regular file changed since the run began ([`SandboxSpec::clear_setid`]).

use std::ffi::{CStr, OsStr};
use std::os::fd::{AsFd, AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, fstatat};

use crate::spec::check_workdir;
use crate::{SandboxError, SandboxSpec};

/// The set-id bits.
const SETID: u32 = 0o6000;

impl SandboxSpec {
    /// Clears the set-id bits of every regular file in the work directory
    /// whose status changed at or after `since` (the run's start); returns
    /// the paths it cleared, relative to the work directory. The directory
    /// is checked again first, as for a run, so a link swapped in for it
    /// since cannot point the sweep anywhere else. Subdirectories it cannot
    /// open are skipped.
    pub fn clear_setid(&self, since: SystemTime) -> Result<Vec<PathBuf>, SandboxError> {
        let workdir = check_workdir(&self.workdir, None, &self.private)?;
        let failed = |source| SandboxError::Workdir {
            path: workdir.path.clone(),
            source,
        };
        let listing = format!("/proc/self/fd/{}", workdir.fd.as_raw_fd());
        let root = nix::fcntl::open(listing.as_str(), DIR_FLAGS, Mode::empty())
            .map_err(|e| failed(e.into()))?;
        clear_under(root, since).map_err(failed)
    }
}

fn clear_under(root: OwnedFd, since: SystemTime) -> std::io::Result<Vec<PathBuf>> {
    let since = since
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let device = fstat(&root)?.st_dev;
    let mut cleared = Vec::new();
    let mut pending = vec![(root, PathBuf::new())];
    while let Some((fd, at)) = pending.pop() {
        let Ok(mut listing) = Dir::from_fd(fd.try_clone()?) else {
            continue;
        };
        for entry in listing.iter().flatten() {
            let name = entry.file_name().to_owned();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            let Ok(st) = fstatat(&fd, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            let path = at.join(OsStr::from_bytes(name.to_bytes()));
            match kind(&st) {
                SFlag::S_IFDIR if st.st_dev == device => {
                    let flags = DIR_FLAGS | OFlag::O_NOFOLLOW;
                    if let Ok(sub) = openat(&fd, name.as_c_str(), flags, Mode::empty()) {
                        pending.push((sub, path));
                    }
                }
                SFlag::S_IFREG
                    if suspect(&st, since, device)
                        && clear_one(&fd, name.as_c_str(), since, device)? =>
                {
                    cleared.push(path);
                }
                _ => {}
            }
        }
    }
    Ok(cleared)
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_CLOEXEC);

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// A regular file of this file system with a set-id bit, changed at or
/// after `since`.
fn suspect(st: &FileStat, since: i64, device: u64) -> bool {
    kind(st) == SFlag::S_IFREG
        && st.st_mode & SETID != 0
        && st.st_ctime >= since
        && st.st_dev == device
}

/// Opens `name` in `dir` without following a link and clears its set-id
/// bits, if what was opened is still a suspect.
fn clear_one(dir: &impl AsFd, name: &CStr, since: i64, device: u64) -> std::io::Result<bool> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    let file = openat(dir, name, flags | OFlag::O_CLOEXEC, Mode::empty())?;
    let st = fstat(&file)?;
    if !suspect(&st, since, device) {
        return Ok(false);
    }
    fchmod(
        &file,
        Mode::from_bits_truncate(st.st_mode & 0o7777 & !SETID),
    )?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::Duration;

    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;
    use crate::{CommandIo, TmpfsSizes};

    fn setid(path: &Path, mode: u32) {
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn clears_what_changed_and_follows_no_link() {
        let outside = tempfile::tempdir().unwrap();
        let kept = outside.path().join("kept");
        setid(&kept, 0o4755);
        let work = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(work.path().join("a/b")).unwrap();
        setid(&work.path().join("top"), 0o4755);
        setid(&work.path().join("a/b/deep"), 0o2750);
        setid(&work.path().join("a/plain"), 0o755);
        std::os::unix::fs::symlink(outside.path(), work.path().join("a/out")).unwrap();
        std::os::unix::fs::symlink(&kept, work.path().join("link")).unwrap();
        let spec = SandboxSpec {
            command: vec!["true".into()],
            workdir: work.path().to_path_buf(),
            env: BTreeMap::new(),
            rootfs: None,
            relays: vec![],
            stdio: CommandIo::Inherit,
            constle_exe: "/usr/bin/true".into(),
            private: vec![],
            stage: outside.path().to_path_buf(),
            cgroup_procs: vec![],
            host_id: None,
            tmpfs: TmpfsSizes::DEFAULT,
        };
        let before = SystemTime::now() - Duration::from_secs(5);
        let mut cleared = spec.clear_setid(before).unwrap();
        cleared.sort();
        assert_eq!(cleared, [PathBuf::from("a/b/deep"), PathBuf::from("top")]);
        assert_eq!(mode(&work.path().join("top")), 0o755);
        assert_eq!(mode(&work.path().join("a/b/deep")), 0o750);
        assert_eq!(mode(&work.path().join("a/plain")), 0o755);
        assert_eq!(mode(&kept), 0o4755, "a link was followed");
        // Files that did not change during the run are the owner's business.
        setid(&work.path().join("old"), 0o4755);
        let later = SystemTime::now() + Duration::from_secs(5);
        assert!(spec.clear_setid(later).unwrap().is_empty());
        assert_eq!(mode(&work.path().join("old")), 0o4755);
    }
}
