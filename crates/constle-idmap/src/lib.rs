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
//! `nix` wraps, and a user namespace holding the mapping, which takes a
//! process in it while the mapping is written: a forked child
//! ([`user_namespace`]) costs a fraction of a millisecond where starting a
//! program costs one or two. This crate is those calls, so the rest of the
//! workspace keeps `#![forbid(unsafe_code)]`.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use std::os::fd::AsFd;
//! let dir = std::fs::File::open("/srv/agent/work")?;
//! // The directory's owner (root) shown as uid 65533, its group as gid 65533.
//! let userns = constle_idmap::user_namespace("0 65533 1\n", "0 65533 1\n")?;
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

/// A new user namespace whose `uid_map` and `gid_map` are the lines given
/// (`"INSIDE OUTSIDE COUNT\n"`), as a descriptor: what [`idmapped_clone`]
/// takes. Needs the capabilities to write such maps (root, for mapping ids
/// other than one's own).
///
/// A namespace lives as long as a process is in it or a descriptor names
/// it. A child is forked into a new one only for as long as its maps are
/// written and the descriptor opened; it runs nothing but system calls.
pub fn user_namespace(uid_map: &str, gid_map: &str) -> io::Result<OwnedFd> {
    let (ready_r, ready_w) = std::io::pipe()?;
    let (go_r, go_w) = std::io::pipe()?;
    let child = fork_into_userns(&ready_w, &go_r, &go_w)?;
    drop((ready_w, go_r));
    let result = map_child(child, ready_r, uid_map, gid_map);
    drop(go_w);
    let mut status = 0;
    #[allow(unsafe_code)]
    // SAFETY: waits for the child forked above, which exits once `go_w`
    // is closed; `status` is a live local.
    unsafe {
        libc::waitpid(child, &mut status, 0)
    };
    result
}

fn map_child(
    child: libc::pid_t,
    mut ready: std::io::PipeReader,
    uid_map: &str,
    gid_map: &str,
) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    if std::io::Read::read(&mut ready, &mut byte)? != 1 || byte[0] != 0 {
        return Err(io::Error::other(
            "the child could not make a user namespace",
        ));
    }
    let proc = format!("/proc/{child}");
    std::fs::write(format!("{proc}/uid_map"), uid_map)?;
    std::fs::write(format!("{proc}/gid_map"), gid_map)?;
    Ok(std::fs::File::open(format!("{proc}/ns/user"))?.into())
}

/// Forks a child that enters a new user namespace, says so on `ready` (a
/// zero byte, or 1 if it could not), and waits for `go` to reach its end,
/// which it can only once it has closed its own copy of `go`'s write end,
/// `go_end`.
fn fork_into_userns(
    ready: &std::io::PipeWriter,
    go: &std::io::PipeReader,
    go_end: &std::io::PipeWriter,
) -> io::Result<libc::pid_t> {
    let (ready, go, go_end) = (ready.as_raw_fd(), go.as_raw_fd(), go_end.as_raw_fd());
    #[allow(unsafe_code)]
    // SAFETY: between fork and _exit the child calls only async-signal-safe
    // system calls (close, unshare, write, read, _exit) on descriptors it
    // inherited, and touches no memory but stack bytes, so it is sound even
    // when the parent has other threads.
    let pid = unsafe {
        match libc::fork() {
            0 => {
                libc::close(go_end);
                let said: u8 = u8::from(libc::unshare(libc::CLONE_NEWUSER) != 0);
                libc::write(ready, (&raw const said).cast(), 1);
                let mut byte = 0u8;
                while libc::read(go, (&raw mut byte).cast(), 1) > 0 {}
                libc::_exit(0)
            }
            pid => pid,
        }
    };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        pid => Ok(pid),
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    #[test]
    fn a_clone_shows_the_owner_as_the_mapped_id() {
        // SAFETY: geteuid has no preconditions.
        #[allow(unsafe_code)]
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: idmapped mounts need root");
            return;
        }
        let dir = tempfile::tempdir().expect("a temp dir");
        let owner = std::fs::metadata(dir.path()).expect("stat").uid();
        let map = format!("{owner} 65533 1\n");
        let userns = user_namespace(&map, "0 65533 1\n").expect("a user namespace");
        let opened = std::fs::File::open(dir.path()).expect("open");
        let tree = idmapped_clone(opened.as_fd(), userns.as_fd()).expect("an idmapped clone");
        let shown = std::fs::File::from(tree).metadata().expect("fstat");
        assert_eq!(shown.uid(), 65533);
        assert_eq!(
            shown.ino(),
            std::fs::metadata(dir.path()).expect("stat").ino()
        );
    }
}
