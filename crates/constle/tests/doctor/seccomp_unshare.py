"""Runs ARGV under a seccomp filter that refuses unshare(2) with EPERM and
allows everything else, as a container's profile refuses it (Docker's
default refuses unshare to a process without CAP_SYS_ADMIN).

usage: seccomp_unshare.py PROGRAM [ARG...]
"""
import ctypes
import os
import platform
import struct
import sys

# unshare's number, and the audit architecture the filter checks first.
ARCHES = {
    "x86_64": (272, 0xC000003E),
    "aarch64": (97, 0xC00000B7),
}
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EPERM = 1
# BPF opcodes: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K.
LD, JEQ, RET = 0x20, 0x15, 0x06


def insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


def main():
    nr, arch = ARCHES[platform.machine()]
    program = b"".join([
        insn(LD, 0, 0, 4),  # seccomp_data.arch
        insn(JEQ, 1, 0, arch),
        insn(RET, 0, 0, RET_ALLOW),  # another architecture: not ours to judge
        insn(LD, 0, 0, 0),  # seccomp_data.nr
        insn(JEQ, 0, 1, nr),
        insn(RET, 0, 0, RET_ERRNO | EPERM),
        insn(RET, 0, 0, RET_ALLOW),
    ])
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        sys.exit(f"no_new_privs: errno {ctypes.get_errno()}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_buffer, 0, 0) != 0:
        sys.exit(f"seccomp: errno {ctypes.get_errno()}")
    os.execvp(sys.argv[1], sys.argv[1:])


main()
