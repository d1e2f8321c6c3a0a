//! Changes made to the work directory's entries, each on the very object
//! that was judged: opened by descriptor relative to its directory without
//! following a link, checked to be the same inode, then changed through
//! that descriptor.

use std::ffi::{CStr, CString, OsStr};
use std::io::Write as _;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, fstat};
use nix::unistd::{Gid, Uid, fchownat};

/// The entry `name` of `dir`, opened without following it (`O_PATH`),
/// provided it is still the inode `expected` describes.
pub(crate) fn open_same(dir: impl AsFd, name: &CStr, expected: &FileStat) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(dir, name, flags, Mode::empty())?;
    let st = fstat(&fd)?;
    match (st.st_dev, st.st_ino) == (expected.st_dev, expected.st_ino) {
        true => Ok(fd),
        false => Err(Errno::ESTALE),
    }
}

/// Changes the owner (and, with `gid`, the group) of what `fd` is. A link
/// is changed itself, never its target.
pub(crate) fn chown(fd: &OwnedFd, uid: u32, gid: Option<u32>) -> nix::Result<()> {
    fchownat(
        fd,
        "",
        Some(Uid::from_raw(uid)),
        gid.map(Gid::from_raw),
        AtFlags::AT_EMPTY_PATH,
    )
}

/// Sets the permission bits of what `fd` (an `O_PATH` descriptor of
/// anything but a link) is, through `/proc/self/fd`, which names that
/// inode whatever happened to its name.
pub(crate) fn chmod(fd: &OwnedFd, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// The directory `relative` below `root`, opened one component at a time
/// without following a link.
pub(crate) fn open_dir_below(root: &OwnedFd, relative: &Path) -> nix::Result<OwnedFd> {
    let mut dir = root.try_clone().map_err(|_| Errno::EMFILE)?;
    for component in relative.components() {
        let Component::Normal(name) = component else {
            return Err(Errno::EINVAL);
        };
        let name = cstring(name)?;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        dir = openat(&dir, name.as_c_str(), flags, Mode::empty())?;
    }
    Ok(dir)
}

/// The path the kernel has for the directory `fd`.
pub(crate) fn real_path(fd: &OwnedFd) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

pub(crate) fn cstring(name: &OsStr) -> nix::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)
}

/// Writes `bytes` as a new file in `dir` under a fresh name, with `mode`
/// and the owner `owner` (uid, gid) when given, synced: the caller renames
/// it into place. Returns the name.
pub(crate) fn write_new(
    dir: BorrowedFd<'_>,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> nix::Result<CString> {
    for attempt in 0..16u32 {
        let name = CString::new(format!(
            ".constle-{}-{}-{attempt}.tmp",
            std::process::id(),
            nonce()
        ))
        .map_err(|_| Errno::EINVAL)?;
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match openat(dir, name.as_c_str(), flags, Mode::from_bits_truncate(0o600)) {
            Ok(fd) => fd,
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(e),
        };
        let mut file = std::fs::File::from(fd);
        let written = file
            .write_all(bytes)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(Errno::EIO as i32)));
        let done = written.and_then(|()| {
            if let Some((uid, gid)) = owner {
                nix::unistd::fchown(&file, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
            }
            nix::sys::stat::fchmod(&file, Mode::from_bits_truncate(mode))?;
            nix::unistd::fsync(&file)
        });
        if let Err(e) = done {
            let _ = nix::unistd::unlinkat(
                dir,
                name.as_c_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
            return Err(e);
        }
        return Ok(name);
    }
    Err(Errno::EEXIST)
}

/// A number unlikely to repeat between calls.
fn nonce() -> u64 {
    use std::hash::{BuildHasher as _, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}
