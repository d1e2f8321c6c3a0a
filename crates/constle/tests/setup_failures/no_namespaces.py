"""Runs a command under a seccomp filter that refuses what Docker's default
profile refuses an unprivileged container: making namespaces (`unshare`, and
`clone` with namespace flags, EPERM) and `clone3` (ENOSYS, so that callers
fall back to `clone`). Everything else is allowed.

usage: python3 no_namespaces.py COMMAND [ARG]...
"""

import ctypes
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 \
    | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080

# audit architecture, unshare, clone, clone3
ARCHES = {
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}

LD_W_ABS, JEQ_K, AND_K, RET_K = 0x20, 0x15, 0x54, 0x06


def insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


def program(arch, unshare, clone, clone3):
    return b"".join([
        insn(LD_W_ABS, 0, 0, 4),               # 0: arch
        insn(JEQ_K, 0, 7, arch),               # 1: other arch -> allow (9)
        insn(LD_W_ABS, 0, 0, 0),               # 2: nr
        insn(JEQ_K, 6, 0, unshare),            # 3: -> deny (10)
        insn(JEQ_K, 6, 0, clone3),             # 4: -> enosys (11)
        insn(JEQ_K, 0, 3, clone),              # 5: not clone -> allow (9)
        insn(LD_W_ABS, 0, 0, 16),              # 6: clone's flags (low word)
        insn(AND_K, 0, 0, NAMESPACE_FLAGS),    # 7
        insn(JEQ_K, 0, 1, 0),                  # 8: none -> allow, else deny
        insn(RET_K, 0, 0, SECCOMP_RET_ALLOW),  # 9
        insn(RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM),   # 10
        insn(RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS),  # 11
    ])


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def main():
    filt = program(*ARCHES[platform.machine()])
    buf = ctypes.create_string_buffer(filt, len(filt))
    prog = SockFprog(len(filt) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p,
                           ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        sys.exit(f"no_new_privs: {os.strerror(ctypes.get_errno())}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        sys.exit(f"seccomp: {os.strerror(ctypes.get_errno())}")
    os.execvp(sys.argv[1], sys.argv[1:])


main()
