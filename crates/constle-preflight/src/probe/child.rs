//! The probe process: `constle preflight-probe`, a fresh, single-threaded
//! copy of the constle binary that tries, in throwaway namespaces, what
//! bubblewrap will do, and prints one line per step (`crate::steps`).
//!
//! Nothing it makes outlives it: every namespace it enters or creates dies
//! with it (or with its pid 1 child), every mount it makes is in its own
//! mount namespace, and it changes nothing of the host's.

use std::ffi::OsString;
use std::io::{self, Write as _};
use std::process::{Command, Stdio};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::unistd::{Gid, Uid, getgid, getuid, pivot_root, sethostname};

use crate::steps::{Outcome, Probes, Step};

/// The argument that makes the probe process pid 1 of the new PID
/// namespace, which mounts a fresh `proc`.
const PROC_ARG: &str = "proc";

/// The argument that makes the probe process drop to an unprivileged id
/// first, as the sandbox launcher does before bubblewrap when started as
/// root.
pub(crate) const AS_ARG: &str = "--as";

/// Runs the probe process; `args` are the arguments after the subcommand.
/// Prints its findings on stdout; returns the exit status (non-zero only
/// when it could not try anything).
pub fn probe_main(args: Vec<OsString>) -> i32 {
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        [] => Ok(all_steps()),
        [AS_ARG, id] => drop_to(id).map(|()| all_steps()),
        // Only as pid 1 of a PID namespace of its own, which the probe
        // process made: anywhere else, the mount would be someone else's.
        [PROC_ARG] if std::process::id() == 1 => Ok(vec![(Step::Proc, mount_proc())]),
        [PROC_ARG] => Err("`proc` only as pid 1 of a PID namespace of its own".to_owned()),
        _ => Err(format!("unexpected arguments {args:?}")),
    };
    match result {
        Ok(steps) => {
            let mut out = io::stdout().lock();
            for (step, outcome) in steps {
                let _ = writeln!(out, "{}", outcome.line(step));
            }
            0
        }
        Err(err) => {
            let _ = writeln!(
                io::stderr().lock(),
                "constle {}: {err}",
                crate::steps::PROBE_SUBCOMMAND
            );
            2
        }
    }
}

/// Becomes uid and gid `id`, with no supplementary groups, for good.
fn drop_to(id: &str) -> Result<(), String> {
    let id: u32 = id.parse().map_err(|_| format!("not an id: {id:?}"))?;
    let (uid, gid) = (Uid::from_raw(id), Gid::from_raw(id));
    nix::unistd::setgroups(&[])
        .and_then(|()| nix::unistd::setresgid(gid, gid, gid))
        .and_then(|()| nix::unistd::setresuid(uid, uid, uid))
        // A change of uid makes the process undumpable, which makes its own
        // `/proc/self` files root's: the maps below could not be written.
        .and_then(|()| nix::sys::prctl::set_dumpable(true))
        .map_err(|e| format!("cannot become uid and gid {id}: {e}"))
}

/// Every step, in order; a step whose ground failed is skipped.
fn all_steps() -> Vec<(Step, Outcome)> {
    let (uid, gid) = (getuid(), getgid());
    let mut steps = vec![(Step::Clone, crate::probe::clone::namespaced_clone())];
    let userns = Outcome::of(unshare(CloneFlags::CLONE_NEWUSER));
    steps.push((Step::Userns, userns));
    if userns != Outcome::Ok {
        return skip_from(steps, Step::Maps);
    }
    steps.push((Step::Maps, Outcome::of(write_maps(uid, gid))));
    let namespaces = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWCGROUP
        | CloneFlags::CLONE_NEWPID;
    let unshared = Outcome::of(unshare(namespaces));
    steps.push((Step::Unshare, unshared));
    if unshared != Outcome::Ok {
        return skip_from(steps, Step::Mount);
    }
    let mounted = Outcome::of(private_tmpfs());
    steps.push((Step::Mount, mounted));
    steps.push((Step::Proc, proc_in_child()));
    steps.push((
        Step::Sethostname,
        Outcome::of(sethostname("constle-preflight")),
    ));
    if mounted != Outcome::Ok {
        return skip_from(steps, Step::PivotRoot);
    }
    let pivoted = Outcome::of(pivot());
    steps.push((Step::PivotRoot, pivoted));
    if pivoted != Outcome::Ok {
        return skip_from(steps, Step::Umount2);
    }
    steps.push((
        Step::Umount2,
        Outcome::of(umount2("/old", MntFlags::MNT_DETACH)),
    ));
    steps
}

/// `steps`, then every step from `first` on (each later than those in
/// `steps`), skipped.
fn skip_from(mut steps: Vec<(Step, Outcome)>, first: Step) -> Vec<(Step, Outcome)> {
    let rest = Step::ALL.into_iter().filter(|s| *s >= first);
    steps.extend(rest.map(|s| (s, Outcome::Skipped)));
    steps
}

/// Maps this process's uid and gid to 0 in its new user namespace, as an
/// unprivileged process may.
fn write_maps(uid: Uid, gid: Gid) -> nix::Result<()> {
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text).map_err(|e| io_errno(&e))
    };
    write("setgroups", "deny".to_owned())?;
    write("uid_map", format!("0 {uid} 1\n"))?;
    write("gid_map", format!("0 {gid} 1\n"))
}

/// Makes every mount of the new mount namespace private (so nothing
/// propagates to the host's), then mounts a tmpfs on `/tmp`.
fn private_tmpfs() -> nix::Result<()> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )?;
    mount(
        Some("tmpfs"),
        "/tmp",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("size=64k"),
    )
}

/// Moves the root to the tmpfs on `/tmp`, the old one to `/old`.
fn pivot() -> nix::Result<()> {
    std::fs::create_dir("/tmp/old").map_err(|e| io_errno(&e))?;
    pivot_root("/tmp", "/tmp/old")?;
    nix::unistd::chdir("/")
}

/// Starts the probe process again as pid 1 of the new PID namespace, to
/// mount `proc` there, and returns what it said.
fn proc_in_child() -> Outcome {
    // `/proc/self/exe`: the binary itself, even where its path is not
    // searchable by the id this process dropped to.
    let out = Command::new("/proc/self/exe")
        .args([crate::steps::PROBE_SUBCOMMAND, PROC_ARG])
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(out) => Probes::parse(&String::from_utf8_lossy(&out.stdout))
            .get(Step::Proc)
            .unwrap_or(Outcome::Skipped),
        Err(e) => Outcome::Errno(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

/// Mounts a fresh `proc` on `/proc`, as bubblewrap does.
fn mount_proc() -> Outcome {
    Outcome::of(mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    ))
}

fn io_errno(e: &io::Error) -> nix::errno::Errno {
    nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}
