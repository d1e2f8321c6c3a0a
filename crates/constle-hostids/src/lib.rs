//! The host ids a sandbox runs as when constle runs as root with
//! `CAP_SYS_ADMIN` ([`privileged`]).
//!
//! Such a run never lets the agent be root: the sandbox's launcher switches
//! to an unprivileged host uid and gid before bubblewrap starts. The kernel
//! keeps some quotas per uid (inotify instances and watches, processes
//! under `RLIMIT_NPROC`, message queue bytes, user namespaces): had every
//! sandbox the same uid, one agent could use them up for every other run.
//! So each sandbox gets an id of its own, from [`RUN_IDS`], for as long as
//! its run lasts: the agent's, and each stdio MCP server's.
//!
//! One more id, [`KEEPER_ID`], is never given to a process: while a run is
//! going, it owns the operator's read-only files in the agent's work
//! directory, so that the agent can change none of them
//! (`constle-workdir`).
//!
//! The range, [`HOST_ID_RANGE`], is one that systemd documents as unused
//! (`UIDS-GIDS.md`: 60578–61183), below 65536 so that it is mapped in
//! containers whose user namespace holds only 0–65535. Before an id is
//! given, [`HostId::allocate`] checks that no user or group of this
//! machine has it (the name service, so LDAP users too) and that no range
//! in `/etc/subuid` or `/etc/subgid` holds it, and takes a lock on
//! `/run/constle/hostids/<id>`: two runs never share an id, and an id is
//! free again when the run that held it ends, however it ends (the kernel
//! drops the lock with the process).
//!
//! ```no_run
//! # fn main() -> Result<(), constle_hostids::HostIdError> {
//! let id = constle_hostids::HostId::allocate()?;
//! println!("the sandbox runs as uid and gid {}", id.get());
//! // … the run …
//! drop(id); // free for the next run
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod error;
mod taken;

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::RangeInclusive;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

pub use error::HostIdError;

/// Every id constle uses on the host when it runs as root: [`KEEPER_ID`]
/// and then [`RUN_IDS`].
pub const HOST_ID_RANGE: RangeInclusive<u32> = 60578..=61183;

/// The owner of the operator's read-only files in a work directory while a
/// run is going. No process ever runs as it.
pub const KEEPER_ID: u32 = *HOST_ID_RANGE.start();

/// The ids sandboxes run as, one per sandbox at a time.
pub const RUN_IDS: RangeInclusive<u32> = KEEPER_ID + 1..=*HOST_ID_RANGE.end();

/// Where the locks are: one empty file per id, root's.
pub const LOCK_DIR: &str = "/run/constle/hostids";

/// Whether `id` is one that constle uses (the keeper's or a run's): a file
/// owned by one outside a run is left over from a run that was killed.
pub fn is_constle_id(id: u32) -> bool {
    HOST_ID_RANGE.contains(&id)
}

/// `CAP_SYS_ADMIN`'s bit in the capability sets of `/proc/self/status`.
const CAP_SYS_ADMIN_BIT: u32 = 21;

/// Whether this process can take a sandbox's root path: it is root (its
/// effective uid is 0) and has `CAP_SYS_ADMIN` in its effective set, which
/// that path's mount namespace and idmapped mounts need. Root without it
/// (every default container) takes the path an unprivileged user takes,
/// as does anyone else: bwrap in a user namespace of its own, the agent
/// being constle's own user on the host.
pub fn privileged() -> bool {
    starter() == Starter::PrivilegedRoot
}

/// Who this process is, for the sandboxes it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Starter {
    /// Root with `CAP_SYS_ADMIN`: each sandbox runs as a host id of its own.
    PrivilegedRoot,
    /// Root without `CAP_SYS_ADMIN`: sandboxes take an unprivileged user's
    /// path, so the agent, uid 1000 in its sandbox without capabilities,
    /// is root outside it.
    RootWithoutSysAdmin,
    /// Anyone else: the agent is this user on the host.
    User,
}

/// Who this process is, for the sandboxes it starts ([`privileged`]).
pub fn starter() -> Starter {
    if !nix::unistd::geteuid().is_root() {
        return Starter::User;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    match has_cap(&status, CAP_SYS_ADMIN_BIT) {
        true => Starter::PrivilegedRoot,
        false => Starter::RootWithoutSysAdmin,
    }
}

/// Whether the `CapEff:` set of a `/proc/PID/status` text holds `bit`.
fn has_cap(status: &str, bit: u32) -> bool {
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|set| set >> bit & 1 == 1)
}

/// A uid and gid (the same number) held for one sandbox; free again when
/// dropped.
#[derive(Debug)]
pub struct HostId {
    id: u32,
    /// The locked file; the lock goes with it.
    _lock: File,
}

impl HostId {
    /// The first id of [`RUN_IDS`] that no user, group or subordinate id
    /// range of this machine has and no other run holds. Needs root (the
    /// lock directory is root's).
    pub fn allocate() -> Result<HostId, HostIdError> {
        Self::allocate_in(Path::new(LOCK_DIR), &taken::Taken::of_this_machine())
    }

    /// An id when this process is [`privileged`], whose sandboxes need
    /// one; `None` otherwise (the sandbox runs as this process's user).
    pub fn allocate_if_privileged() -> Result<Option<HostId>, HostIdError> {
        match privileged() {
            true => HostId::allocate().map(Some),
            false => Ok(None),
        }
    }

    /// The id, as uid and as gid.
    pub fn get(&self) -> u32 {
        self.id
    }

    fn allocate_in(dir: &Path, taken: &taken::Taken) -> Result<HostId, HostIdError> {
        let dir = lock_dir(dir)?;
        for id in RUN_IDS.filter(|id| !taken.holds(*id)) {
            let path = dir.join(id.to_string());
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|source| HostIdError::Lock { path, source })?;
            match file.try_lock() {
                Ok(()) => return Ok(HostId { id, _lock: file }),
                Err(std::fs::TryLockError::WouldBlock) => continue,
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(HostIdError::Lock {
                        path: dir.join(id.to_string()),
                        source,
                    });
                }
            }
        }
        Err(HostIdError::Exhausted)
    }
}

/// `dir`, made if missing (mode 0700), provided it is a directory that only
/// its owner, this process's user, can change.
fn lock_dir(dir: &Path) -> Result<PathBuf, HostIdError> {
    let failed = |source| HostIdError::LockDir {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(failed)?;
    let meta = std::fs::symlink_metadata(dir).map_err(failed)?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(failed(io::Error::other(
            "it is not a directory that only this user can change",
        )));
    }
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_sys_admin_is_read_from_the_effective_set() {
        let status = |eff: &str| format!("Name:\tx\nCapPrm:\t000001ffffffffff\nCapEff:\t{eff}\n");
        assert!(has_cap(&status("000001ffffffffff"), CAP_SYS_ADMIN_BIT));
        assert!(has_cap(&status("0000000000200000"), CAP_SYS_ADMIN_BIT));
        // docker's default set: no CAP_SYS_ADMIN
        assert!(!has_cap(&status("00000000a80425fb"), CAP_SYS_ADMIN_BIT));
        assert!(!has_cap(&status("000001ffffdfffff"), CAP_SYS_ADMIN_BIT));
        assert!(!has_cap("CapPrm:\t000001ffffffffff\n", CAP_SYS_ADMIN_BIT));
        assert!(!has_cap(&status("zz"), CAP_SYS_ADMIN_BIT));
    }

    #[test]
    fn the_range_is_below_65536_and_the_keeper_is_no_run_id() {
        assert!(*HOST_ID_RANGE.end() < 65536);
        assert!(!RUN_IDS.contains(&KEEPER_ID));
        assert!(is_constle_id(KEEPER_ID) && RUN_IDS.clone().all(is_constle_id));
        assert!(!is_constle_id(0) && !is_constle_id(65534) && !is_constle_id(1000));
    }

    #[test]
    fn two_holders_never_share_an_id_and_a_dropped_one_is_free_again() {
        let dir = tempfile::tempdir().unwrap();
        let locks = dir.path().join("hostids");
        let none = taken::Taken::default();
        let a = HostId::allocate_in(&locks, &none).unwrap();
        let b = HostId::allocate_in(&locks, &none).unwrap();
        assert_eq!(a.get(), *RUN_IDS.start());
        assert_eq!(b.get(), a.get() + 1);
        let first = a.get();
        drop(a);
        assert_eq!(HostId::allocate_in(&locks, &none).unwrap().get(), first);
    }

    #[test]
    fn ids_of_users_groups_and_subordinate_ranges_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let first = *RUN_IDS.start();
        let taken = taken::Taken::from_parts(
            |id| id == *RUN_IDS.start(),
            |id| id == *RUN_IDS.start() + 1,
            &format!("alice:{}:1\n", first + 2),
            &format!("alice:{}:1\n", first + 3),
        );
        let id = HostId::allocate_in(&dir.path().join("l"), &taken).unwrap();
        assert_eq!(id.get(), first + 4);
    }

    #[test]
    fn a_lock_directory_others_could_change_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = HostId::allocate_in(dir.path(), &taken::Taken::default()).unwrap_err();
        assert!(err.to_string().contains("only this user"), "{err}");
    }
}
