//! The policy, checked by running the bytes [`seccomp_programs`] returns
//! through a classic-BPF interpreter that answers as the kernel does.
//!
//! The tables below are the specification, written independently of
//! [`POLICY`]: every refused row must get its errno from exactly one
//! program, every allowed row must pass every program, and every system
//! call the policy names must appear in a refused row.

use libc::{
    AF_ALG, AF_BLUETOOTH, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_UNIX, AF_VSOCK, AT_FDCWD,
    CLONE_CHILD_CLEARTID, CLONE_CHILD_SETTID, CLONE_FILES, CLONE_FS, CLONE_NEWCGROUP, CLONE_NEWIPC,
    CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWTIME, CLONE_NEWUSER, CLONE_NEWUTS,
    CLONE_PARENT_SETTID, CLONE_PIDFD, CLONE_SETTLS, CLONE_SIGHAND, CLONE_SYSVSEM, CLONE_THREAD,
    CLONE_VFORK, CLONE_VM, EAFNOSUPPORT, EINVAL, ENOSYS, EPERM, FIONREAD, IPPROTO_ICMP,
    IPPROTO_ICMPV6, IPPROTO_MPTCP, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_UDPLITE,
    O_CLOEXEC, O_CREAT, O_RDONLY, O_RDWR, O_TMPFILE, O_TRUNC, O_WRONLY, PR_SET_NAME,
    PR_SET_NO_NEW_PRIVS, S_IFIFO, S_IFREG, SECCOMP_RET_ACTION_FULL, SECCOMP_RET_ALLOW,
    SECCOMP_RET_DATA, SECCOMP_RET_ERRNO, SECCOMP_RET_KILL_PROCESS, SIGCHLD, SOCK_CLOEXEC,
    SOCK_DCCP, SOCK_DGRAM, SOCK_NONBLOCK, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET, SOCK_STREAM, TCGETS,
    TIOCCONS, TIOCGWINSZ, TIOCLINUX, TIOCSCTTY, TIOCSETD, TIOCSTI,
};

use super::*;

// ---------------------------------------------------------------------------
// The interpreter

/// `struct seccomp_data` as the kernel lays it out: `nr` (i32), `arch`
/// (u32), `instruction_pointer` (u64), `args` ([u64; 6]), native endian.
fn seccomp_data(nr: i64, arch: u32, args: &[u64]) -> [u8; 64] {
    let mut data = [0u8; 64];
    let nr = i32::try_from(nr).expect("system call numbers fit in an int");
    data[0..4].copy_from_slice(&nr.to_ne_bytes());
    data[4..8].copy_from_slice(&arch.to_ne_bytes());
    for (i, arg) in args.iter().enumerate() {
        data[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_ne_bytes());
    }
    data
}

const LD_W_ABS: u16 = 0x20;
const ALU_AND_K: u16 = 0x54;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGT_K: u16 = 0x25;
const JMP_JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;

fn decode(program: &[u8]) -> Vec<sock_filter> {
    assert_eq!(program.len() % 8, 0, "not whole instructions");
    program
        .chunks_exact(8)
        .map(|b| sock_filter {
            code: u16::from_ne_bytes([b[0], b[1]]),
            jt: b[2],
            jf: b[3],
            k: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        })
        .collect()
}

/// What the kernel checks before it installs a filter: a length it takes,
/// known instructions only, loads of aligned words inside
/// `struct seccomp_data`, jumps that stay inside the program, and a return
/// at the end (jumps only go forward, so every path ends in a return).
fn check(program: &[sock_filter]) {
    assert!(
        (1..=4096).contains(&program.len()),
        "{} instructions",
        program.len()
    );
    for (pc, insn) in program.iter().enumerate() {
        let after = pc + 1;
        let target = |skip: u32| after + skip as usize;
        match insn.code {
            LD_W_ABS => assert!(insn.k % 4 == 0 && insn.k < 64, "load at {}", insn.k),
            ALU_AND_K | RET_K => {}
            JMP_JA => assert!(target(insn.k) < program.len(), "jump out at {pc}"),
            JMP_JEQ_K | JMP_JGT_K | JMP_JGE_K => {
                let far = insn.jt.max(insn.jf);
                assert!(target(far.into()) < program.len(), "jump out at {pc}");
            }
            other => panic!("instruction {other:#x} at {pc}"),
        }
    }
    assert_eq!(
        program.last().map(|i| i.code),
        Some(RET_K),
        "no return at the end"
    );
}

/// One program's answer.
fn run(program: &[sock_filter], data: &[u8; 64]) -> u32 {
    let (mut pc, mut a) = (0usize, 0u32);
    loop {
        let insn = &program[pc];
        pc += 1;
        let skip = |holds: bool| usize::from(if holds { insn.jt } else { insn.jf });
        match insn.code {
            LD_W_ABS => {
                let at = insn.k as usize;
                a = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
            }
            ALU_AND_K => a &= insn.k,
            JMP_JA => pc += insn.k as usize,
            JMP_JEQ_K => pc += skip(a == insn.k),
            JMP_JGT_K => pc += skip(a > insn.k),
            JMP_JGE_K => pc += skip(a >= insn.k),
            RET_K => return insn.k,
            other => panic!("instruction {other:#x}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Allow,
    Errno(i32),
    Kill,
}

fn verdict(ret: u32) -> Verdict {
    match ret & SECCOMP_RET_ACTION_FULL {
        SECCOMP_RET_ALLOW => Verdict::Allow,
        SECCOMP_RET_ERRNO => Verdict::Errno((ret & SECCOMP_RET_DATA) as i32),
        SECCOMP_RET_KILL_PROCESS => Verdict::Kill,
        other => panic!("action {other:#x}"),
    }
}

/// The programs as the kernel holds them, checked.
fn programs() -> Vec<Vec<sock_filter>> {
    let programs: Vec<_> = seccomp_programs()
        .unwrap()
        .iter()
        .map(|p| decode(p))
        .collect();
    programs.iter().for_each(|p| check(p));
    programs
}

/// Every program's answer, in installation order.
fn answers(programs: &[Vec<sock_filter>], data: &[u8; 64]) -> Vec<u32> {
    programs.iter().map(|p| run(p, data)).collect()
}

/// What the kernel does with all the answers: the newest program runs
/// first, and an answer replaces the one kept so far only if its action
/// has a strictly higher precedence (a lower value as a signed number:
/// kill first, allow last).
fn combined(answers: &[u32]) -> Verdict {
    let action = |ret: u32| (ret & SECCOMP_RET_ACTION_FULL) as i32;
    let mut kept = SECCOMP_RET_ALLOW;
    for &ret in answers.iter().rev() {
        if action(ret) < action(kept) {
            kept = ret;
        }
    }
    verdict(kept)
}

#[cfg(target_arch = "x86_64")]
const NATIVE: u32 = AUDIT_ARCH_X86_64;
/// `AUDIT_ARCH_AARCH64`: `EM_AARCH64` (183), 64-bit, little endian.
#[cfg(target_arch = "aarch64")]
const NATIVE: u32 = 183 | 0x8000_0000 | 0x4000_0000;

// ---------------------------------------------------------------------------
// The specification

/// Always refused, whatever the arguments.
const ALWAYS_EPERM: &[(&str, i64)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("process_madvise", libc::SYS_process_madvise),
    ("kcmp", libc::SYS_kcmp),
    ("move_pages", libc::SYS_move_pages),
    ("migrate_pages", libc::SYS_migrate_pages),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("nfsservctl", libc::SYS_nfsservctl),
    #[cfg(target_arch = "x86_64")]
    ("modify_ldt", libc::SYS_modify_ldt),
    #[cfg(target_arch = "x86_64")]
    ("uselib", libc::SYS_uselib),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("open_tree", libc::SYS_open_tree),
    ("open_tree_attr", 467),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("syslog", libc::SYS_syslog),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("vhangup", libc::SYS_vhangup),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm),
];

const ALWAYS_ENOSYS: &[(&str, i64)] =
    &[("clone3", libc::SYS_clone3), ("openat2", libc::SYS_openat2)];

type Row = (&'static str, i64, &'static [u64], Verdict);

/// An `int` argument, sign-extended as the C calling convention leaves it.
const fn u(value: i32) -> u64 {
    value as u64
}

/// An ioctl request: `libc::Ioctl` is `c_ulong` with glibc, `c_int` with musl.
#[allow(clippy::unnecessary_cast)]
const fn ioctl(request: libc::Ioctl) -> u64 {
    request as u64
}

const PATH: u64 = 0x7f00_0000_1000;
const FDCWD: u64 = AT_FDCWD as u64;
const THREAD: i32 = CLONE_VM
    | CLONE_FS
    | CLONE_FILES
    | CLONE_SIGHAND
    | CLONE_THREAD
    | CLONE_SYSVSEM
    | CLONE_SETTLS
    | CLONE_PARENT_SETTID
    | CLONE_CHILD_CLEARTID;
const HIGH: u64 = 0xdead_beef_0000_0000;
const SUID: u64 = 0o4755;
const SGID: u64 = 0o2755;
#[cfg(target_arch = "x86_64")]
const X32: i64 = 0x4000_0000;

/// Refused on their arguments.
#[rustfmt::skip]
const REFUSED: &[Row] = &[
    ("clone CLONE_NEWUSER", libc::SYS_clone, &[u(CLONE_NEWUSER | SIGCHLD)], Verdict::Errno(EPERM)),
    ("clone CLONE_NEWNS", libc::SYS_clone, &[u(CLONE_NEWNS | SIGCHLD)], Verdict::Errno(EPERM)),
    ("clone CLONE_NEWPID", libc::SYS_clone, &[u(CLONE_NEWPID | SIGCHLD)], Verdict::Errno(EPERM)),
    ("clone CLONE_NEWNET", libc::SYS_clone, &[u(CLONE_NEWNET)], Verdict::Errno(EPERM)),
    ("clone CLONE_NEWUTS", libc::SYS_clone, &[u(CLONE_NEWUTS)], Verdict::Errno(EPERM)),
    ("clone CLONE_NEWIPC", libc::SYS_clone, &[u(CLONE_NEWIPC)], Verdict::Errno(EPERM)),
    ("clone CLONE_NEWCGROUP", libc::SYS_clone, &[u(CLONE_NEWCGROUP)], Verdict::Errno(EPERM)),
    ("clone CLONE_NEWTIME", libc::SYS_clone, &[u(CLONE_NEWTIME)], Verdict::Errno(EPERM)),
    ("clone thread + CLONE_NEWNET", libc::SYS_clone, &[u(THREAD | CLONE_NEWNET)], Verdict::Errno(EPERM)),
    ("clone CLONE_NEWUSER, high bits", libc::SYS_clone, &[HIGH | u(CLONE_NEWUSER)], Verdict::Errno(EPERM)),
    ("ioctl TIOCSTI", libc::SYS_ioctl, &[0, ioctl(TIOCSTI), PATH], Verdict::Errno(EPERM)),
    ("ioctl TIOCSTI, high bits", libc::SYS_ioctl, &[0, HIGH | ioctl(TIOCSTI)], Verdict::Errno(EPERM)),
    ("ioctl TIOCLINUX", libc::SYS_ioctl, &[0, ioctl(TIOCLINUX)], Verdict::Errno(EPERM)),
    ("ioctl TIOCCONS", libc::SYS_ioctl, &[0, ioctl(TIOCCONS)], Verdict::Errno(EPERM)),
    ("ioctl TIOCSETD", libc::SYS_ioctl, &[0, ioctl(TIOCSETD)], Verdict::Errno(EPERM)),
    ("socket AF_NETLINK", libc::SYS_socket, &[u(AF_NETLINK), u(SOCK_RAW), 0], Verdict::Errno(EAFNOSUPPORT)),
    ("socket AF_PACKET", libc::SYS_socket, &[u(AF_PACKET), u(SOCK_RAW), 0x300], Verdict::Errno(EAFNOSUPPORT)),
    ("socket AF_VSOCK", libc::SYS_socket, &[u(AF_VSOCK), u(SOCK_STREAM), 0], Verdict::Errno(EAFNOSUPPORT)),
    ("socket AF_ALG", libc::SYS_socket, &[u(AF_ALG), u(SOCK_SEQPACKET), 0], Verdict::Errno(EAFNOSUPPORT)),
    ("socket AF_BLUETOOTH", libc::SYS_socket, &[u(AF_BLUETOOTH), u(SOCK_STREAM), 0], Verdict::Errno(EAFNOSUPPORT)),
    ("socket AF_NETLINK, high bits", libc::SYS_socket, &[HIGH | u(AF_NETLINK), u(SOCK_DGRAM)], Verdict::Errno(EAFNOSUPPORT)),
    ("socketpair AF_NETLINK", libc::SYS_socketpair, &[u(AF_NETLINK), u(SOCK_DGRAM), 0, PATH], Verdict::Errno(EAFNOSUPPORT)),
    ("socket AF_INET SOCK_RAW", libc::SYS_socket, &[u(AF_INET), u(SOCK_RAW), u(IPPROTO_ICMP)], Verdict::Errno(EPERM)),
    ("socket AF_INET6 SOCK_RAW|flags", libc::SYS_socket, &[u(AF_INET6), u(SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC), u(IPPROTO_TCP)], Verdict::Errno(EPERM)),
    ("socket AF_INET SOCK_PACKET", libc::SYS_socket, &[u(AF_INET), 10, 0], Verdict::Errno(EPERM)),
    ("socket AF_INET SOCK_SEQPACKET (SCTP)", libc::SYS_socket, &[u(AF_INET), u(SOCK_SEQPACKET), 0], Verdict::Errno(EPERM)),
    ("socket AF_INET6 SOCK_DCCP", libc::SYS_socket, &[u(AF_INET6), u(SOCK_DCCP | SOCK_CLOEXEC), 0], Verdict::Errno(EPERM)),
    ("socket AF_INET SOCK_RDM", libc::SYS_socket, &[u(AF_INET), u(SOCK_RDM), 0], Verdict::Errno(EPERM)),
    ("socket AF_INET IPPROTO_SCTP", libc::SYS_socket, &[u(AF_INET), u(SOCK_STREAM), u(IPPROTO_SCTP)], Verdict::Errno(EPERM)),
    ("socket AF_INET6 IPPROTO_UDPLITE", libc::SYS_socket, &[u(AF_INET6), u(SOCK_DGRAM), u(IPPROTO_UDPLITE)], Verdict::Errno(EPERM)),
    ("socket AF_INET IPPROTO_L2TP", libc::SYS_socket, &[u(AF_INET), u(SOCK_DGRAM), 115], Verdict::Errno(EPERM)),
    ("socketpair AF_INET SOCK_RAW", libc::SYS_socketpair, &[u(AF_INET), u(SOCK_RAW), 0, PATH], Verdict::Errno(EPERM)),
    ("fchmod u+s", libc::SYS_fchmod, &[3, SUID], Verdict::Errno(EPERM)),
    ("fchmod g+s", libc::SYS_fchmod, &[3, SGID], Verdict::Errno(EPERM)),
    ("fchmod u+s, high bits", libc::SYS_fchmod, &[3, HIGH | 0x1_0000 | 0o4000], Verdict::Errno(EPERM)),
    ("fchmodat u+s", libc::SYS_fchmodat, &[FDCWD, PATH, SUID], Verdict::Errno(EPERM)),
    ("fchmodat2 g+s", 452, &[FDCWD, PATH, SGID, 0], Verdict::Errno(EPERM)),
    ("mknodat regular u+s", libc::SYS_mknodat, &[FDCWD, PATH, S_IFREG as u64 | SUID, 0], Verdict::Errno(EPERM)),
    ("openat O_CREAT u+s", libc::SYS_openat, &[FDCWD, PATH, u(O_CREAT | O_WRONLY | O_CLOEXEC), SUID], Verdict::Errno(EPERM)),
    ("openat O_CREAT g+s", libc::SYS_openat, &[FDCWD, PATH, u(O_CREAT | O_RDWR | O_TRUNC), SGID], Verdict::Errno(EPERM)),
    ("openat O_TMPFILE g+s", libc::SYS_openat, &[FDCWD, PATH, u(O_TMPFILE | O_RDWR), SGID], Verdict::Errno(EPERM)),
    ("openat O_CREAT u+s, high bits", libc::SYS_openat, &[FDCWD, PATH, HIGH | u(O_CREAT), HIGH | SUID], Verdict::Errno(EPERM)),
    #[cfg(target_arch = "x86_64")]
    ("chmod u+s", libc::SYS_chmod, &[PATH, SUID], Verdict::Errno(EPERM)),
    #[cfg(target_arch = "x86_64")]
    ("creat u+s", libc::SYS_creat, &[PATH, SUID], Verdict::Errno(EPERM)),
    #[cfg(target_arch = "x86_64")]
    ("mknod regular g+s", libc::SYS_mknod, &[PATH, S_IFREG as u64 | SGID, 0], Verdict::Errno(EPERM)),
    #[cfg(target_arch = "x86_64")]
    ("open O_CREAT u+s", libc::SYS_open, &[PATH, u(O_CREAT | O_WRONLY), SUID], Verdict::Errno(EPERM)),
    ("personality READ_IMPLIES_EXEC", libc::SYS_personality, &[0x040_0000], Verdict::Errno(EPERM)),
    ("personality ADDR_NO_RANDOMIZE", libc::SYS_personality, &[0x004_0000], Verdict::Errno(EPERM)),
    ("personality MMAP_PAGE_ZERO", libc::SYS_personality, &[0x010_0000], Verdict::Errno(EPERM)),
    ("personality PER_BSD", libc::SYS_personality, &[6], Verdict::Errno(EPERM)),
    ("shmget 64 KiB + 1", libc::SYS_shmget, &[0, (64 << 10) + 1, 0o1600], Verdict::Errno(EINVAL)),
    ("shmget 16 GiB", libc::SYS_shmget, &[0, 16 << 30, 0o1600], Verdict::Errno(EINVAL)),
    ("shmget 4 GiB + 4 KiB (only the upper half above)", libc::SYS_shmget, &[0, (1 << 32) | 4096, 0o1600], Verdict::Errno(EINVAL)),
    #[cfg(target_arch = "x86_64")]
    ("x32 getpid", X32 | libc::SYS_getpid, &[], Verdict::Errno(EPERM)),
    #[cfg(target_arch = "x86_64")]
    ("x32 ptrace", X32 | 521, &[], Verdict::Errno(EPERM)),
    #[cfg(target_arch = "x86_64")]
    ("x32 first number", X32, &[], Verdict::Errno(EPERM)),
    #[cfg(target_arch = "x86_64")]
    ("negative number", -1, &[], Verdict::Errno(EPERM)),
];

/// What ordinary programs do.
#[rustfmt::skip]
const ALLOWED: &[Row] = &[
    ("read", libc::SYS_read, &[0, PATH, 4096], Verdict::Allow),
    ("write", libc::SYS_write, &[1, PATH, 4096], Verdict::Allow),
    ("getpid", libc::SYS_getpid, &[], Verdict::Allow),
    ("execve", libc::SYS_execve, &[PATH, PATH, PATH], Verdict::Allow),
    ("clone thread", libc::SYS_clone, &[u(THREAD)], Verdict::Allow),
    ("clone fork", libc::SYS_clone, &[u(SIGCHLD)], Verdict::Allow),
    ("clone glibc fork", libc::SYS_clone, &[u(CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD)], Verdict::Allow),
    ("clone posix_spawn", libc::SYS_clone, &[u(CLONE_VM | CLONE_VFORK | SIGCHLD)], Verdict::Allow),
    ("clone CLONE_PIDFD", libc::SYS_clone, &[u(CLONE_PIDFD | SIGCHLD)], Verdict::Allow),
    ("wait4", libc::SYS_wait4, &[u64::MAX, PATH, 0, 0], Verdict::Allow),
    ("socket AF_INET SOCK_STREAM|SOCK_CLOEXEC", libc::SYS_socket, &[u(AF_INET), u(SOCK_STREAM | SOCK_CLOEXEC), 0], Verdict::Allow),
    ("socket AF_INET IPPROTO_TCP", libc::SYS_socket, &[u(AF_INET), u(SOCK_STREAM), u(IPPROTO_TCP)], Verdict::Allow),
    ("socket AF_INET IPPROTO_MPTCP", libc::SYS_socket, &[u(AF_INET), u(SOCK_STREAM), u(IPPROTO_MPTCP)], Verdict::Allow),
    ("socket AF_INET6 SOCK_DGRAM|SOCK_NONBLOCK", libc::SYS_socket, &[u(AF_INET6), u(SOCK_DGRAM | SOCK_NONBLOCK), u(IPPROTO_UDP)], Verdict::Allow),
    ("socket AF_INET ping", libc::SYS_socket, &[u(AF_INET), u(SOCK_DGRAM), u(IPPROTO_ICMP)], Verdict::Allow),
    ("socket AF_INET6 ping", libc::SYS_socket, &[u(AF_INET6), u(SOCK_DGRAM), u(IPPROTO_ICMPV6)], Verdict::Allow),
    ("socket AF_INET, high bits", libc::SYS_socket, &[HIGH | u(AF_INET), u(SOCK_STREAM), HIGH], Verdict::Allow),
    ("socket AF_UNIX SOCK_DGRAM", libc::SYS_socket, &[u(AF_UNIX), u(SOCK_DGRAM), 0], Verdict::Allow),
    ("socket AF_UNIX SOCK_SEQPACKET", libc::SYS_socket, &[u(AF_UNIX), u(SOCK_SEQPACKET | SOCK_CLOEXEC), 0], Verdict::Allow),
    ("socket AF_UNIX SOCK_RAW (a datagram socket)", libc::SYS_socket, &[u(AF_UNIX), u(SOCK_RAW), 0], Verdict::Allow),
    ("socketpair AF_UNIX", libc::SYS_socketpair, &[u(AF_UNIX), u(SOCK_STREAM | SOCK_CLOEXEC), 0, PATH], Verdict::Allow),
    ("connect", libc::SYS_connect, &[3, PATH, 16], Verdict::Allow),
    ("ioctl TCGETS", libc::SYS_ioctl, &[0, ioctl(TCGETS), PATH], Verdict::Allow),
    ("ioctl TIOCGWINSZ", libc::SYS_ioctl, &[1, ioctl(TIOCGWINSZ), PATH], Verdict::Allow),
    ("ioctl TIOCSCTTY", libc::SYS_ioctl, &[3, ioctl(TIOCSCTTY), 0], Verdict::Allow),
    ("ioctl FIONREAD", libc::SYS_ioctl, &[3, ioctl(FIONREAD), PATH], Verdict::Allow),
    ("openat O_RDONLY", libc::SYS_openat, &[FDCWD, PATH, u(O_RDONLY | O_CLOEXEC), 0], Verdict::Allow),
    ("openat O_RDONLY, stray u+s mode", libc::SYS_openat, &[FDCWD, PATH, u(O_RDONLY), SUID], Verdict::Allow),
    ("openat O_CREAT 0644", libc::SYS_openat, &[FDCWD, PATH, u(O_CREAT | O_WRONLY | O_TRUNC), 0o644], Verdict::Allow),
    ("openat O_TMPFILE 0600", libc::SYS_openat, &[FDCWD, PATH, u(O_TMPFILE | O_RDWR), 0o600], Verdict::Allow),
    ("fchmod 0755", libc::SYS_fchmod, &[3, 0o755], Verdict::Allow),
    ("fchmodat sticky 01777", libc::SYS_fchmodat, &[FDCWD, PATH, 0o1777], Verdict::Allow),
    ("fchmodat2 0644", 452, &[FDCWD, PATH, 0o644, 0], Verdict::Allow),
    ("mknodat fifo", libc::SYS_mknodat, &[FDCWD, PATH, S_IFIFO as u64 | 0o644, 0], Verdict::Allow),
    ("mkdirat g+s (directories pass their group on)", libc::SYS_mkdirat, &[FDCWD, PATH, 0o2775], Verdict::Allow),
    ("fchownat", libc::SYS_fchownat, &[FDCWD, PATH, 0, 0, 0], Verdict::Allow),
    #[cfg(target_arch = "x86_64")]
    ("chmod 0755", libc::SYS_chmod, &[PATH, 0o755], Verdict::Allow),
    #[cfg(target_arch = "x86_64")]
    ("creat 0644", libc::SYS_creat, &[PATH, 0o644], Verdict::Allow),
    #[cfg(target_arch = "x86_64")]
    ("open O_CREAT 0755", libc::SYS_open, &[PATH, u(O_CREAT | O_WRONLY), 0o755], Verdict::Allow),
    #[cfg(target_arch = "x86_64")]
    ("open O_RDONLY, stray g+s mode", libc::SYS_open, &[PATH, u(O_RDONLY), SGID], Verdict::Allow),
    #[cfg(target_arch = "x86_64")]
    ("mknod fifo", libc::SYS_mknod, &[PATH, S_IFIFO as u64 | 0o600, 0], Verdict::Allow),
    ("personality query", libc::SYS_personality, &[0xffff_ffff], Verdict::Allow),
    ("personality PER_LINUX", libc::SYS_personality, &[0], Verdict::Allow),
    ("personality PER_LINUX32", libc::SYS_personality, &[8], Verdict::Allow),
    ("shmget 64 KiB", libc::SYS_shmget, &[0, 64 << 10, 0o1600], Verdict::Allow),
    ("shmget 56 bytes", libc::SYS_shmget, &[0, 56, 0o1600], Verdict::Allow),
    ("prctl PR_SET_NAME", libc::SYS_prctl, &[u(PR_SET_NAME), PATH], Verdict::Allow),
    ("prctl PR_SET_NO_NEW_PRIVS", libc::SYS_prctl, &[u(PR_SET_NO_NEW_PRIVS), 1], Verdict::Allow),
    ("seccomp", libc::SYS_seccomp, &[1, 0, PATH], Verdict::Allow),
    ("landlock_create_ruleset", libc::SYS_landlock_create_ruleset, &[0, 0, 1], Verdict::Allow),
    ("landlock_restrict_self", libc::SYS_landlock_restrict_self, &[3, 0], Verdict::Allow),
    ("memfd_create", libc::SYS_memfd_create, &[PATH, 1], Verdict::Allow),
    ("splice", libc::SYS_splice, &[3, 0, 4, 0, 65536, 0], Verdict::Allow),
    ("epoll_pwait", libc::SYS_epoll_pwait, &[3, PATH, 16, u64::MAX, 0], Verdict::Allow),
    ("pidfd_open", libc::SYS_pidfd_open, &[2, 0], Verdict::Allow),
    ("pidfd_send_signal", libc::SYS_pidfd_send_signal, &[3, 15, 0, 0], Verdict::Allow),
    ("name_to_handle_at", libc::SYS_name_to_handle_at, &[FDCWD, PATH, PATH, PATH, 0], Verdict::Allow),
    ("get_mempolicy", libc::SYS_get_mempolicy, &[0, 0, 0, 0, 0], Verdict::Allow),
    ("setuid", libc::SYS_setuid, &[1000], Verdict::Allow),
    ("unlisted number", 1000, &[], Verdict::Allow),
];

fn args(args: &[u64]) -> String {
    args.iter()
        .map(|a| format!("{a:#x}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn always_rows() -> Vec<Row> {
    let errnos = [(ALWAYS_EPERM, EPERM), (ALWAYS_ENOSYS, ENOSYS)];
    let mut rows = Vec::new();
    for (calls, errno) in errnos {
        for &(name, nr) in calls {
            // No argument changes the answer.
            for args in [&[][..], &[u64::MAX; 6]] {
                rows.push((name, nr, args, Verdict::Errno(errno)));
            }
        }
    }
    rows
}

// ---------------------------------------------------------------------------
// Tests

#[test]
fn refused_calls_get_their_errno_from_one_program() {
    let programs = programs();
    for (name, nr, call_args, expected) in always_rows().into_iter().chain(REFUSED.iter().copied())
    {
        let answers = answers(&programs, &seccomp_data(nr, NATIVE, call_args));
        assert_eq!(combined(&answers), expected, "{name}({})", args(call_args));
        let refusing = answers
            .iter()
            .filter(|&&a| verdict(a) != Verdict::Allow)
            .count();
        assert_eq!(
            refusing,
            1,
            "{name}({}): answers {answers:x?}",
            args(call_args)
        );
    }
}

#[test]
fn ordinary_calls_pass_every_program() {
    let programs = programs();
    for &(name, nr, call_args, expected) in ALLOWED {
        let answers = answers(&programs, &seccomp_data(nr, NATIVE, call_args));
        let verdicts: Vec<_> = answers.iter().map(|&a| verdict(a)).collect();
        assert!(
            verdicts.iter().all(|&v| v == expected),
            "{name}({}): {verdicts:?}",
            args(call_args)
        );
    }
}

#[test]
fn another_architecture_is_killed() {
    let programs = programs();
    // i386 (`int 0x80` on x86_64), AArch32 (on aarch64), and nonsense.
    for arch in [0x4000_0003, 0x4000_0028, 0] {
        for nr in [libc::SYS_getpid, libc::SYS_ptrace, 0x4000_0027] {
            let answers = answers(&programs, &seccomp_data(nr, arch, &[]));
            assert_eq!(
                combined(&answers),
                Verdict::Kill,
                "arch {arch:#x}, nr {nr:#x}"
            );
        }
    }
}

#[test]
fn every_refused_call_is_specified() {
    let specified: Vec<i64> = always_rows()
        .iter()
        .chain(REFUSED)
        .map(|&(_, nr, _, _)| nr)
        .collect();
    for refusal in POLICY {
        for nr in refusal.calls {
            assert!(
                specified.contains(nr),
                "system call {nr} has no refused row"
            );
        }
    }
}

#[test]
fn one_program_per_answer() {
    let expected = if cfg!(target_arch = "x86_64") { 5 } else { 4 };
    assert_eq!(seccomp_programs().unwrap().len(), expected);
}
