//! The one unsafe call of the crate: `clone(2)` with namespace flags, which
//! no safe wrapper offers (`nix::sched::clone` is `unsafe` too). A seccomp
//! profile can allow `unshare` and still refuse a `clone` whose flags make
//! namespaces (Docker's default does, by argument), and bubblewrap makes its
//! sandbox with exactly such a `clone`, so `unshare` alone cannot stand for it.

use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use crate::steps::Outcome;

/// The namespaces bubblewrap's `clone` makes for Constle's sandbox.
const FLAGS: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP;

/// Clones a child into new namespaces of every kind the sandbox uses; the
/// child exits at once, and its namespaces with it.
///
/// Called only by the probe process, which is single-threaded.
pub(crate) fn namespaced_clone() -> Outcome {
    let flags = libc::c_ulong::try_from(FLAGS | libc::SIGCHLD).unwrap_or_default();
    #[allow(unsafe_code)]
    // SAFETY: with a null stack, clone(2) works as fork(2): the child runs
    // on a copy-on-write copy of this stack. The child calls only _exit(2),
    // which is async-signal-safe and touches no memory, so this is sound
    // whatever state other threads left (and the probe process has none).
    let pid = unsafe {
        match libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) {
            0 => libc::_exit(0),
            pid => pid,
        }
    };
    match i32::try_from(pid) {
        Ok(-1) | Err(_) => Outcome::Errno(nix::errno::Errno::last_raw()),
        Ok(pid) => {
            let _ = waitpid(Pid::from_raw(pid), None);
            Outcome::Ok
        }
    }
}
