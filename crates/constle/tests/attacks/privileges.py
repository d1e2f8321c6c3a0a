"""The agent's own privileges, from inside: an unprivileged uid, every
capability dropped, no_new_privs, the seccomp filter, and no way to become
anyone else."""

import ctypes
import os

from probe import checked, libc, row, tool

PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN = 47, 2, 21


def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
    return "absent"


row("uid", lambda: " ".join(map(str, os.getresuid())))
row("gid", lambda: " ".join(map(str, os.getresgid())))
row("groups", lambda: " ".join(map(str, os.getgroups())))
for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
    row(field, lambda field=field: status(field))
row("setuid 0", lambda: os.setuid(0))
row("setgid 0", lambda: os.setgid(0))
row("setgroups 0", lambda: os.setgroups([0]))
row("raise an ambient capability",
    lambda: checked(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0)))
row("su", lambda: tool("su", "-c", "true", "root"))
row("sudo", lambda: tool("sudo", "-n", "true"))
