//! Idmapped bind mounts, for the one case where Constle's sandbox needs
//! them: `constle run` started as root.
//!
//! As root, the agent does not run as root: the sandbox launcher switches
//! to an unprivileged host uid before bubblewrap starts. The agent's work
//! directory belongs to someone else (root, or the operator), so it is shown
//! to the agent through an *idmapped* mount (Linux 5.12+): a copy of the
//! directory's mount whose files owned by one uid/gid appear owned by
//! another, here the agent's. Files the agent creates are written to disk
//! with the directory owner's ids, exactly as if that owner had written them.
//!
//! Making such a mount takes `open_tree(2)` (in `rustix`) and
//! `mount_setattr(2)` with `MOUNT_ATTR_IDMAP`, which neither `rustix` nor
//! `nix` wraps. This crate is that one call, so the rest of the workspace
//! keeps `#![forbid(unsafe_code)]`.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use std::os::fd::AsFd;
//! let dir = std::fs::File::open("/srv/agent/work")?;
//! let userns = std::fs::File::open("/proc/12345/ns/user")?; // maps the owner to the agent
//! let mount = constle_idmap::idmapped_clone(dir.as_fd(), userns.as_fd())?;
//! # Ok(()) }
//! ```

use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd, OwnedFd};

use rustix::mount::{OpenTreeFlags, open_tree};

/// A detached copy of the mount at `dir` (that directory only, not the
/// mounts below it), idmapped through the user namespace `userns`, and
/// `nosuid` and `nodev`.
///
/// A file whose on-disk owner is uid *k* appears owned by the host uid that
/// `userns` maps *k* to, and a file created through the copy gets *k* on
/// disk; ids `userns` does not map appear as the overflow id (`nobody`) and
/// cannot be written as. The copy is detached: attach it with
/// `move_mount(2)` (`rustix::mount::move_mount`), or it vanishes when the
/// descriptor is closed.
///
/// Needs `CAP_SYS_ADMIN` and a file system that supports idmapped mounts
/// (ext4, xfs, btrfs, tmpfs since Linux 6.3, …); otherwise the error is the
/// kernel's (`EPERM`, `EINVAL`, `ENOSYS`).
pub fn idmapped_clone(dir: BorrowedFd<'_>, userns: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let flags = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_EMPTY_PATH;
    let tree = open_tree(dir, "", flags)?;
    set_idmap(&tree, userns)?;
    Ok(tree)
}

fn set_idmap(tree: &OwnedFd, userns: BorrowedFd<'_>) -> io::Result<()> {
    let userns =
        u64::try_from(userns.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns,
    };
    #[allow(unsafe_code)]
    // SAFETY: mount_setattr(2) reads `size_of::<mount_attr>()` bytes from
    // `&attr`, a live, initialised `mount_attr` on this stack frame, and the
    // path, a NUL-terminated static string; it writes no memory of ours. Both
    // descriptors are borrowed for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}
