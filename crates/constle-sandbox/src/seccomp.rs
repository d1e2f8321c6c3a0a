//! The sandbox's system-call filter: what the agent's kernel interface
//! lacks beyond what namespaces and dropped capabilities already remove.
//!
//! Namespaces and capabilities are the main walls; seccomp narrows the
//! kernel surface behind them. It refuses the calls agents never need and
//! escapes and kernel exploits do use: tracing other processes, new
//! namespaces and mounts, eBPF, `perf_event_open`, `userfaultfd`,
//! `io_uring`, keyrings, unusual socket families and protocols, terminal
//! input injection, and set-id files (see `docs/sandbox.md` for the table).
//! Everything else is allowed: this is a deny list, so a new system call is
//! allowed until it is listed here.
//!
//! # Design
//!
//! - **An errno, never a kill.** A refused call fails the way the kernel
//!   fails it for an unprivileged process (`EPERM`, or `EAFNOSUPPORT` for a
//!   socket family), so programs take their usual fallback instead of
//!   dying with `SIGSYS` in the middle of a run. The one kill is
//!   seccompiler's architecture check: a system call made through another
//!   ABI (`int 0x80` on x86_64, AArch32 on aarch64) has other numbers, so
//!   the policy cannot judge it, and no agent makes one.
//! - **`ENOSYS` where the arguments are out of reach.** A filter sees the
//!   six argument registers, not memory. `clone3` keeps its flags in a
//!   struct and `openat2` its mode, so neither can be checked; refusing
//!   them with `ENOSYS` ("not implemented") makes glibc, Go and the rest
//!   fall back to `clone` and `openat`, whose arguments the filter checks.
//! - **Only the low 32 bits of an argument are compared**, but for sizes.
//!   Every other argument inspected here is an `int`, `unsigned int` or
//!   `umode_t` to the kernel (and `clone` uses the low half of its flags),
//!   which ignores the upper bits. Comparing all 64 bits would let garbage
//!   in the upper half slip past a rule while the kernel still does what
//!   the low half asks. A size (`shmget`'s) is a `size_t`, all 64 bits of
//!   which the kernel uses, so it is compared whole.
//! - **x32.** On x86_64, system calls of the x32 ABI carry the same
//!   architecture (`AUDIT_ARCH_X86_64`) and their number with bit
//!   `0x4000_0000` set: `ptrace` is `0x4000_0209`, not 101. seccompiler's
//!   rules match the x86_64 numbers only, so without more every rule would
//!   be bypassed by setting that bit on a kernel built with x32 support. A
//!   second, hand-written program refuses every number from `0x4000_0000`
//!   on with `EPERM` (above it lie negative numbers, which are no system
//!   call at all).
//! - **One program per answer.** A seccompiler filter has one match action,
//!   so each errno gets its own program, and the x32 program is another.
//!   The kernel runs every program installed and takes the most severe
//!   answer; between two errnos, the later program's would win, so the
//!   programs are written never to refuse the same call (the unit tests
//!   check this), and their order does not matter.
//!
//! bwrap installs the programs (`--add-seccomp-fd`, once per program) in
//! the sandbox's first process (constle's `sandbox-init`) just before
//! executing it, and in its own PID 1, the reaper; every process started
//! from there inherits them and cannot remove them.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use libc::{
    AF_INET, AF_INET6, AF_UNIX, CLONE_NEWCGROUP, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS,
    CLONE_NEWPID, CLONE_NEWTIME, CLONE_NEWUSER, CLONE_NEWUTS, EAFNOSUPPORT, EINVAL, ENOSYS, EPERM,
    IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_MPTCP, IPPROTO_TCP, IPPROTO_UDP, O_CREAT, O_TMPFILE,
    S_ISGID, S_ISUID, SOCK_DCCP, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET, TIOCCONS, TIOCLINUX, TIOCSETD,
    TIOCSTI, UNAME26,
};
use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch, sock_filter,
};

use crate::SandboxError;

/// The sandbox's seccomp filters, each a classic BPF program in the form
/// bwrap's `--add-seccomp-fd` reads (an array of `struct sock_filter`,
/// native endian). All of them are installed; the kernel applies the
/// strictest answer.
///
/// Fails only on an architecture the policy was not written for (anything
/// but x86_64 and aarch64).
pub fn seccomp_programs() -> Result<Vec<Vec<u8>>, SandboxError> {
    let arch = match std::env::consts::ARCH {
        arch @ ("x86_64" | "aarch64") => TargetArch::try_from(arch).map_err(backend)?,
        other => {
            return Err(SandboxError::Seccomp {
                reason: format!(
                    "there is no system-call policy for {other}, only for x86_64 and aarch64"
                ),
            });
        }
    };
    let mut programs = Vec::new();
    for (errno, calls) in by_errno()? {
        let action = SeccompAction::Errno(errno.unsigned_abs());
        let filter =
            SeccompFilter::new(calls, SeccompAction::Allow, action, arch).map_err(backend)?;
        programs.push(BpfProgram::try_from(filter).map_err(backend)?);
    }
    if cfg!(target_arch = "x86_64") {
        programs.push(refuse_x32());
    }
    Ok(programs.iter().map(|program| to_bytes(program)).collect())
}

/// What an argument holds, for a call to be refused. Comparisons look at
/// its low 32 bits only (see the module documentation).
#[derive(Clone, Copy)]
enum Arg {
    /// One of these values.
    OneOf(&'static [u32]),
    /// None of these values.
    NoneOf(&'static [u32]),
    /// Every bit of at least one of these flags.
    AnyFlag(&'static [u32]),
    /// One of these values, once masked with the first field.
    MaskedOneOf(u32, &'static [u32]),
    /// A `size_t` greater than this (all 64 bits compared).
    SizeAbove(u64),
}

/// These system calls fail with `errno` when every condition holds (an
/// argument's index and what it holds); with no condition, always.
struct Refusal {
    errno: i32,
    calls: &'static [i64],
    when: &'static [(u8, Arg)],
}

const fn always(errno: i32, calls: &'static [i64]) -> Refusal {
    Refusal {
        errno,
        calls,
        when: &[],
    }
}

/// `fchmodat2` (Linux 6.6), missing from libc for aarch64: 452 on x86_64 and
/// in the generic table aarch64 uses, like every call numbered since 403.
const SYS_FCHMODAT2: i64 = 452;
/// `open_tree_attr` (Linux 6.15), not in libc yet; 467 on both, as above.
const SYS_OPEN_TREE_ATTR: i64 = 467;

/// `personality` values ordinary programs set: Linux itself, `linux32`
/// (`PER_LINUX32`), the 2.6-style version number (`UNAME26`), both, and the
/// query `0xffffffff` (Docker's list).
const PERSONALITIES: &[u32] = &[0, 8, UNAME26 as u32, UNAME26 as u32 | 8, 0xffff_ffff];

/// The largest System V shared memory segment: 64 KiB. What the kernel
/// answers a segment above its own limit, `EINVAL`, answers a larger one.
const MAX_SYSV_SEGMENT: u64 = 64 << 10;

/// The `clone` flags that create namespaces. `CLONE_NEWTIME` (0x80) falls in
/// the exit-signal byte of `clone`'s flags, where the kernel rejects it as a
/// signal; it is listed all the same, as for `unshare`.
const NEW_NAMESPACES: Arg = Arg::AnyFlag(&[
    CLONE_NEWUSER as u32,
    CLONE_NEWNS as u32,
    CLONE_NEWPID as u32,
    CLONE_NEWNET as u32,
    CLONE_NEWUTS as u32,
    CLONE_NEWIPC as u32,
    CLONE_NEWCGROUP as u32,
    CLONE_NEWTIME as u32,
]);

const SET_ID: Arg = Arg::AnyFlag(&[S_ISUID, S_ISGID]);
/// `open` flags under which the mode is used: a file may be created.
const CREATES: Arg = Arg::AnyFlag(&[O_CREAT as u32, O_TMPFILE as u32]);
const INET: Arg = Arg::OneOf(&[AF_INET as u32, AF_INET6 as u32]);
const SOCKET_CALLS: &[i64] = &[libc::SYS_socket, libc::SYS_socketpair];
/// The obsolete packet-socket type, whose libc constant is deprecated.
const SOCK_PACKET: u32 = 10;
/// `SOCK_TYPE_MASK`: the type without `SOCK_NONBLOCK` and `SOCK_CLOEXEC`.
const SOCKET_TYPE: u32 = 0xf;

/// The policy. Each group's reason is in `docs/sandbox.md`.
const POLICY: &[Refusal] = &[
    // Other processes: tracing them, reading or writing their memory,
    // taking their descriptors, comparing their kernel objects, moving their
    // pages.
    always(
        EPERM,
        &[
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_pidfd_getfd,
            libc::SYS_process_madvise,
            libc::SYS_kcmp,
            libc::SYS_move_pages,
            libc::SYS_migrate_pages,
        ],
    ),
    // Kernel interfaces behind many exploits that agents do not use.
    always(
        EPERM,
        &[
            libc::SYS_bpf,
            libc::SYS_perf_event_open,
            libc::SYS_userfaultfd,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
            libc::SYS_fanotify_init,
            libc::SYS_lookup_dcookie,
            libc::SYS_nfsservctl,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_modify_ldt,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_uselib,
        ],
    ),
    // Keyrings belong to users, not namespaces.
    always(
        EPERM,
        &[libc::SYS_keyctl, libc::SYS_add_key, libc::SYS_request_key],
    ),
    // Namespaces and mounts. clone3 has its own row below.
    always(
        EPERM,
        &[
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_pivot_root,
            libc::SYS_chroot,
            libc::SYS_open_tree,
            SYS_OPEN_TREE_ATTR,
            libc::SYS_move_mount,
            libc::SYS_fsopen,
            libc::SYS_fsconfig,
            libc::SYS_fsmount,
            libc::SYS_fspick,
            libc::SYS_mount_setattr,
        ],
    ),
    Refusal {
        errno: EPERM,
        calls: &[libc::SYS_clone],
        when: &[(0, NEW_NAMESPACES)],
    },
    // Administering the machine: each needs a capability the agent lacks,
    // refused again in case a kernel bug hands one out.
    always(
        EPERM,
        &[
            libc::SYS_kexec_load,
            libc::SYS_kexec_file_load,
            libc::SYS_init_module,
            libc::SYS_finit_module,
            libc::SYS_delete_module,
            libc::SYS_reboot,
            libc::SYS_swapon,
            libc::SYS_swapoff,
            libc::SYS_acct,
            libc::SYS_quotactl,
            libc::SYS_quotactl_fd,
            libc::SYS_syslog,
            libc::SYS_settimeofday,
            libc::SYS_clock_settime,
            libc::SYS_clock_adjtime,
            libc::SYS_adjtimex,
            libc::SYS_vhangup,
            libc::SYS_open_by_handle_at,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_iopl,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_ioperm,
        ],
    ),
    // Terminals: typing into one, pasting a virtual console's selection,
    // taking over console output, changing the line discipline.
    Refusal {
        errno: EPERM,
        calls: &[libc::SYS_ioctl],
        when: &[(
            1,
            Arg::OneOf(&[
                TIOCSTI as u32,
                TIOCLINUX as u32,
                TIOCCONS as u32,
                TIOCSETD as u32,
            ]),
        )],
    },
    // Sockets: Unix, IPv4 and IPv6 only; over IP, TCP, UDP, ping and MPTCP
    // only.
    Refusal {
        errno: EAFNOSUPPORT,
        calls: SOCKET_CALLS,
        when: &[(
            0,
            Arg::NoneOf(&[AF_UNIX as u32, AF_INET as u32, AF_INET6 as u32]),
        )],
    },
    Refusal {
        errno: EPERM,
        calls: SOCKET_CALLS,
        when: &[
            (0, INET),
            (
                1,
                Arg::MaskedOneOf(
                    SOCKET_TYPE,
                    &[
                        SOCK_RAW as u32,
                        SOCK_RDM as u32,
                        SOCK_SEQPACKET as u32,
                        SOCK_DCCP as u32,
                        SOCK_PACKET,
                    ],
                ),
            ),
        ],
    },
    Refusal {
        errno: EPERM,
        calls: SOCKET_CALLS,
        when: &[
            (0, INET),
            (
                2,
                Arg::NoneOf(&[
                    0,
                    IPPROTO_TCP as u32,
                    IPPROTO_UDP as u32,
                    IPPROTO_ICMP as u32,
                    IPPROTO_ICMPV6 as u32,
                    IPPROTO_MPTCP as u32,
                ]),
            ),
        ],
    },
    // Set-id files, by the argument that holds the mode.
    Refusal {
        errno: EPERM,
        calls: &[
            libc::SYS_fchmod,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_chmod,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_creat,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_mknod,
        ],
        when: &[(1, SET_ID)],
    },
    Refusal {
        errno: EPERM,
        calls: &[libc::SYS_fchmodat, SYS_FCHMODAT2, libc::SYS_mknodat],
        when: &[(2, SET_ID)],
    },
    #[cfg(target_arch = "x86_64")]
    Refusal {
        errno: EPERM,
        calls: &[libc::SYS_open],
        when: &[(1, CREATES), (2, SET_ID)],
    },
    Refusal {
        errno: EPERM,
        calls: &[libc::SYS_openat],
        when: &[(2, CREATES), (3, SET_ID)],
    },
    // Execution domains and flags such as READ_IMPLIES_EXEC or
    // ADDR_NO_RANDOMIZE.
    Refusal {
        errno: EPERM,
        calls: &[libc::SYS_personality],
        when: &[(0, Arg::NoneOf(PERSONALITIES))],
    },
    // System V shared memory outlives every process until the sandbox's IPC
    // namespace ends, and no file system bounds it: segments of at most
    // 64 KiB only, which with the namespace's limit of 4096 segments bounds
    // it to 256 MiB. (POSIX shared memory lives in the bounded /dev/shm.)
    Refusal {
        errno: EINVAL,
        calls: &[libc::SYS_shmget],
        when: &[(1, Arg::SizeAbove(MAX_SYSV_SEGMENT))],
    },
    // Arguments out of the filter's reach: the caller falls back.
    always(ENOSYS, &[libc::SYS_clone3, libc::SYS_openat2]),
];

/// seccompiler's input for each errno: the rules of every system call it
/// answers (no rule: every call).
fn by_errno() -> Result<BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>>, SandboxError> {
    let mut programs: BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    for refusal in POLICY {
        let new = rules(refusal.when).map_err(backend)?;
        let calls = programs.entry(refusal.errno).or_default();
        for &nr in refusal.calls {
            match calls.entry(nr) {
                Entry::Vacant(entry) => {
                    entry.insert(new.clone());
                }
                // No rule refuses every call: it cannot be combined with rules.
                Entry::Occupied(entry) if entry.get().is_empty() || new.is_empty() => {
                    return Err(SandboxError::Seccomp {
                        reason: format!("system call {nr} is refused always and on conditions"),
                    });
                }
                Entry::Occupied(mut entry) => entry.get_mut().extend(new.iter().cloned()),
            }
        }
    }
    Ok(programs)
}

/// The seccompiler rules for `when`: one per way of meeting every condition.
fn rules(when: &[(u8, Arg)]) -> Result<Vec<SeccompRule>, BackendError> {
    if when.is_empty() {
        return Ok(Vec::new());
    }
    let mut conjunctions = vec![Vec::new()];
    for &(index, arg) in when {
        let alternatives = arg.alternatives(index)?;
        conjunctions = conjunctions
            .iter()
            .flat_map(|all: &Vec<SeccompCondition>| {
                alternatives
                    .iter()
                    .map(move |alt| [all.as_slice(), alt].concat())
            })
            .collect();
    }
    conjunctions.into_iter().map(SeccompRule::new).collect()
}

impl Arg {
    /// The ways argument `index` can hold this, each a list of conditions
    /// that must all hold.
    fn alternatives(self, index: u8) -> Result<Vec<Vec<SeccompCondition>>, BackendError> {
        let cond = |op, value: u32| {
            SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value.into())
        };
        let each = |values: &[u32], op: &dyn Fn(u32) -> SeccompCmpOp| {
            values.iter().map(|&v| Ok(vec![cond(op(v), v)?])).collect()
        };
        match self {
            Arg::OneOf(values) => each(values, &|_| SeccompCmpOp::Eq),
            Arg::AnyFlag(flags) => each(flags, &|flag| SeccompCmpOp::MaskedEq(flag.into())),
            Arg::MaskedOneOf(mask, values) => {
                each(values, &|_| SeccompCmpOp::MaskedEq(mask.into()))
            }
            Arg::SizeAbove(bytes) => Ok(vec![vec![SeccompCondition::new(
                index,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::Gt,
                bytes,
            )?]]),
            Arg::NoneOf(values) => {
                let all = values.iter().map(|&v| cond(SeccompCmpOp::Ne, v));
                Ok(vec![all.collect::<Result<_, _>>()?])
            }
        }
    }
}

fn backend(err: BackendError) -> SandboxError {
    SandboxError::Seccomp {
        reason: err.to_string(),
    }
}

/// `__X32_SYSCALL_BIT`: set in the number of every x32 system call.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `AUDIT_ARCH_X86_64`: `EM_X86_64` (62), 64-bit, little endian.
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// Offsets of `nr` and `arch` in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

/// The x32 program: on x86_64, every number from [`X32_SYSCALL_BIT`] on
/// fails with `EPERM`. Other architectures pass: the seccompiler programs
/// kill them.
fn refuse_x32() -> BpfProgram {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    vec![
        stmt(BPF_LD | BPF_W | BPF_ABS, ARCH_OFFSET),
        jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 3),
        stmt(BPF_LD | BPF_W | BPF_ABS, NR_OFFSET),
        jump(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, 0, 1),
        stmt(
            BPF_RET | BPF_K,
            libc::SECCOMP_RET_ERRNO | EPERM.unsigned_abs(),
        ),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}

fn stmt(code: u32, k: u32) -> sock_filter {
    jump(code, k, 0, 0)
}

/// A BPF instruction; `jt` and `jf` are how many instructions to skip when
/// the comparison holds or fails. Opcodes fit in 16 bits.
fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// `struct sock_filter` as the kernel reads it: code, jt, jf, k.
fn to_bytes(program: &[sock_filter]) -> Vec<u8> {
    program
        .iter()
        .flat_map(|insn| {
            let code = insn.code.to_ne_bytes();
            let k = insn.k.to_ne_bytes();
            [code[0], code[1], insn.jt, insn.jf, k[0], k[1], k[2], k[3]]
        })
        .collect()
}

#[cfg(test)]
mod tests;
