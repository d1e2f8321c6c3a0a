"""Core dumps: whatever the host's kernel.core_pattern, a crashing agent
leaves no core anywhere, and cannot raise RLIMIT_CORE to make one.

--name NAME: the name (comm) of the crashing children, for a core handler
on the host to recognise them.
"""

import ctypes
import os
import resource
import signal

from probe import arg, libc, row

NAME = arg("name").encode()[:15]


def limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    show = lambda v: "unlimited" if v == resource.RLIM_INFINITY else str(v)
    return f"{show(soft)},{show(hard)}"


def crash_in(directory):
    def attempt():
        pid = os.fork()
        if pid == 0:
            os.chdir(directory)
            libc.prctl(15, ctypes.c_char_p(NAME), 0, 0, 0)  # PR_SET_NAME
            os.kill(os.getpid(), signal.SIGSEGV)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        return "core dumped" if os.WCOREDUMP(status) else "no core dump"
    return attempt


def cores():
    found = [os.path.join(d, n) for d in (os.getcwd(), "/tmp") for n in os.listdir(d)
             if n == "core" or (n.startswith("core.") and not n.endswith(".py"))]
    return ",".join(found) or "none"


def raise_limit():
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except ValueError:
        return "EPERM"  # how Python reports the kernel's EPERM here


row("RLIMIT_CORE", limit)
row("raise RLIMIT_CORE to unlimited", raise_limit)
row("raise the soft limit to the hard one", lambda: resource.setrlimit(
    resource.RLIMIT_CORE, (resource.getrlimit(resource.RLIMIT_CORE)[1],) * 2) or limit())
row("crash in the work directory", crash_in(os.getcwd()))
row("crash in /tmp", crash_in("/tmp"))
row("core files inside", cores)
