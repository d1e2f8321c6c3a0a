"""Other processes of the sandbox: tracing pid 1 (constle's init) or its own
child, and reading pid 1's memory, environment and descriptors.

Attack 5 of the old sandbox was the first row: PTRACE_ATTACH stops pid 1,
and when the tracer exits, pid 1 stays stopped, so the run never ended.
The probe exits with pid 1 attached if it could attach; the test checks
the run ends anyway.

`attach`: that attack alone. `all`: every row.
"""

import ctypes
import os
import signal
import sys
import time

from probe import reap, row, sc, sleeper

PTRACE_TRACEME, PTRACE_ATTACH, PTRACE_SEIZE = 0, 16, 0x4206


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def vm_readv(pid):
    def attempt():
        buf = ctypes.create_string_buffer(64)
        local = IoVec(ctypes.cast(buf, ctypes.c_void_p), 64)
        remote = IoVec(0x400000, 64)
        sc("process_vm_readv", pid, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
    return attempt


def trace_child():
    pid = sleeper()
    try:
        sc("ptrace", PTRACE_ATTACH, pid, 0, 0)
    finally:
        reap(pid)


def traceme():
    pid = os.fork()
    if pid == 0:
        try:
            sc("ptrace", PTRACE_TRACEME, 0, 0, 0)
            os._exit(0)
        except OSError as e:
            os._exit(e.errno)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        raise OSError(code, os.strerror(code))


def read(path):
    def attempt():
        with open(path, "rb") as f:
            f.read(4096)
    return attempt


def pidfd_getfd():
    pidfd = sc("pidfd_open", 1, 0)
    try:
        os.close(sc("pidfd_getfd", pidfd, 0, 0))
    finally:
        os.close(pidfd)


def state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return "stopped" if f.read().rsplit(")", 1)[1].split()[0] in "Tt" else "running"


if sys.argv[1:] == ["attach"]:
    # Attack 5 exactly: attach, and exit with pid 1 still attached.
    row("PTRACE_ATTACH pid 1", lambda: sc("ptrace", PTRACE_ATTACH, 1, 0, 0))
    sys.exit(0)

row("PTRACE_ATTACH pid 1", lambda: sc("ptrace", PTRACE_ATTACH, 1, 0, 0))
row("PTRACE_SEIZE pid 1", lambda: sc("ptrace", PTRACE_SEIZE, 1, 0, 0))
row("PTRACE_ATTACH its own child", trace_child)
row("PTRACE_TRACEME", traceme)
row("process_vm_readv pid 1", vm_readv(1))
row("open /proc/1/mem", read("/proc/1/mem"))
row("read /proc/1/environ", read("/proc/1/environ"))
row("list /proc/1/fd", lambda: os.listdir("/proc/1/fd") and None)
row("readlink /proc/1/exe", lambda: os.readlink("/proc/1/exe") and None)
row("list /proc/1/root", lambda: os.listdir("/proc/1/root") and None)
row("open /proc/1/ns/user", lambda: os.close(os.open("/proc/1/ns/user", os.O_RDONLY)))
row("pidfd_getfd from pid 1", pidfd_getfd)
# From inside its namespace, pid 1 gets only the signals it handles.
row("SIGSTOP to pid 1", lambda: os.kill(1, signal.SIGSTOP))
row("SIGKILL to pid 1", lambda: os.kill(1, signal.SIGKILL))
time.sleep(0.5)
row("pid 1 state", lambda: state(1))
