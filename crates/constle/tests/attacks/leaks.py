"""What the host might leave inside by mistake.

`fds`: descriptors the host had open when it started constle.
`plan`: the launcher's plan and the host's environment, the stage
directory, what the mount table says.
`binary`: the constle binary at /run/constle/constle, which the host runs.
"""

import glob
import os
import sys

from probe import info, row

EXE = "/run/constle/constle"


def extra_fds():
    fds = []
    for fd in range(3, 1024):
        try:
            os.fstat(fd)
        except OSError:
            continue
        fds.append(fd)
        try:
            info(f"fd {fd}", os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return ",".join(map(str, fds)) or "none"


def through_fds(relative):
    # Whatever a leaked directory descriptor would open: the key below it.
    found = []
    for fd in range(3, 1024):
        try:
            fd2 = os.open(relative, os.O_RDONLY, dir_fd=fd)
        except OSError:
            continue
        with os.fdopen(fd2, "rb") as f:
            data = f.read()
        print(f"info through fd {fd}: {data.hex()} {data!r}")
        found.append(str(fd))
    return ",".join(found) or "none"


def env_names():
    # As the process was started (Python adds LC_CTYPE to its own).
    with open("/proc/self/environ", "rb") as f:
        names = [v.split(b"=", 1)[0].decode() for v in f.read().split(b"\0") if v]
    return ",".join(sorted(names)) or "none"


def environ_of(pid):
    def attempt():
        with open(f"/proc/{pid}/environ", "rb") as f:
            return "has the plan" if b"CONSTLE_SANDBOX_PLAN" in f.read() else "no plan"
    return attempt


def write_binary():
    with open(EXE, "r+b") as f:
        f.write(b"\x7fELF")


mode = sys.argv[1]
if mode == "fds":
    row("descriptors above 2", extra_fds)
    row("open keys/agent/test-agent.pem through them", lambda: through_fds("keys/agent/test-agent.pem"))
    row("open test-agent.pem through them", lambda: through_fds("test-agent.pem"))
elif mode == "plan":
    row("environment", env_names)
    row("environment of pid 1", environ_of(1))
    row("environment of its parent", environ_of(os.getppid()))
    row("stage directories in /tmp", lambda: ",".join(glob.glob("/tmp/constle-*")) or "none")
    with open("/proc/self/mountinfo") as f:
        for line in f:
            info("mountinfo", line.strip())
else:
    row("write /run/constle/constle", write_binary)
    row("truncate /run/constle/constle", lambda: os.truncate(EXE, 0))
    row("chmod /run/constle/constle", lambda: os.chmod(EXE, 0o777))
    row("rename /run/constle/constle", lambda: os.rename(EXE, "/run/constle/x"))
    def replace():
        os.symlink("/bin/sh", "/tmp/fake-constle")
        os.rename("/tmp/fake-constle", EXE)
    row("replace /run/constle/constle", replace)
    row("write /proc/1/exe", lambda: open("/proc/1/exe", "r+b").close())
    # Inside, the parent may be the private /tmp's (the test checks the
    # host's): reported, not compared.
    try:
        open(os.path.join(os.path.dirname(os.getcwd()), "parent-pwned"), "w").close()
        info("write the work directory's parent", "OK")
    except OSError as e:
        info("write the work directory's parent", os.strerror(e.errno))
