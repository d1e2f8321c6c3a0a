"""What every attack probe shares: one `name: result` line per attempt.

A result is `OK` when the attempt succeeded (for an attack: it worked), the
errno's name when it failed, or a short word the probe chose. Lines starting
with `info ` are for people reading a failure, not compared by the test.
The probes run as the agent, inside the sandbox, from its work directory.
"""

import ctypes
import errno
import os
import platform
import signal
import subprocess
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

NR = {
    "x86_64": dict(ptrace=101, process_vm_readv=310, clone=56, unshare=272, setns=308,
                   mount=165, chroot=161, pivot_root=155, pidfd_open=434, pidfd_getfd=438,
                   ioctl=16, clone3=435),
    "aarch64": dict(ptrace=117, process_vm_readv=270, clone=220, unshare=97, setns=268,
                    mount=40, chroot=51, pivot_root=41, pidfd_open=434, pidfd_getfd=438,
                    ioctl=29, clone3=435),
}[platform.machine()]

# strerror texts of the command-line tools, back to errno names.
MESSAGES = {os.strerror(n): name for n, name in errno.errorcode.items()}


def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def checked(ret):
    """Raises OSError for a C call's -1, like the os module."""
    if ret == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return ret


def sc(name, *args):
    """The raw system call `name`."""
    def arg(a):
        return ctypes.c_ulong(a % (1 << 64)) if isinstance(a, int) else a
    return checked(libc.syscall(ctypes.c_long(NR[name]), *map(arg, args)))


def row(name, attempt):
    """Prints `name: result` for `attempt()`: OK, an errno name, or what
    `attempt` returned when that is a string."""
    try:
        got = attempt()
        result = got if isinstance(got, str) else "OK"
    except OSError as e:
        result = errname(e)
    except Exception as e:
        result = f"FAILED {type(e).__name__}: {e}"
    print(f"{name}: {result}", flush=True)


def info(name, text):
    print(f"info {name}: {text}", flush=True)


def tool(*argv, messages=None):
    """Runs a command-line tool: OK when it succeeds, else the errno name
    found in what it said (or a name `messages` gives a text it said), else
    `exit N`."""
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=60)
    except FileNotFoundError:
        return "absent"
    if p.returncode == 0:
        return "OK"
    said = p.stderr + p.stdout
    for message, name in list((messages or {}).items()) + list(MESSAGES.items()):
        if message in said:
            return name
    return f"exit {p.returncode}"


def in_child(attempt):
    """Runs `attempt` in a forked child; its errno comes back as OSError."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            attempt()
        except OSError as e:
            code = e.errno
        except BaseException:
            code = 255
        os._exit(code)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        raise OSError(code, os.strerror(code))


def sleeper():
    """A child that sleeps until killed: its pid."""
    pid = os.fork()
    if pid == 0:
        signal.pause()
        os._exit(0)
    return pid


def reap(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    os.waitpid(pid, 0)


def arg(name):
    """The value of `--name VALUE` on the command line."""
    return sys.argv[sys.argv.index("--" + name) + 1]
