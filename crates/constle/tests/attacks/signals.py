"""Host processes: none is visible or can be signalled from inside.

--host-pid PID: a process the test started on the host, as the user who
runs constle. --test-pid PID: the test itself (root, when it runs as root).
"""

import os
import signal

from probe import arg, info, reap, row, sc, sleeper

HOST, TEST = int(arg("host-pid")), int(arg("test-pid"))


def pids():
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())


def visible(pid):
    return "yes" if os.path.exists(f"/proc/{pid}") else "no"


def kill_everything():
    # Everything the agent may signal: in its own namespace, its own
    # processes (here a child of its own), never pid 1 or itself. Not tried
    # where host processes show: as root there, it would kill the machine's.
    if visible(HOST) == "yes" or visible(TEST) == "yes" or len(pids()) > 50:
        return "not tried: host processes are visible"
    child = sleeper()
    try:
        os.kill(-1, signal.SIGKILL)
        _, status = os.waitpid(child, 0)
        return "killed its own child" if os.WIFSIGNALED(status) else "child survived"
    except OSError:
        reap(child)
        raise


row("/proc of the host process", lambda: visible(HOST))
row("/proc of the test", lambda: visible(TEST))
row("kill -9 the host process", lambda: os.kill(HOST, signal.SIGKILL))
row("kill -9 the host process's group", lambda: os.kill(-HOST, signal.SIGKILL))
# The test's pid would name the test itself where the host's pids show:
# the row above fails then, and the test must live to say so.
row("kill -9 the test", lambda: os.kill(TEST, signal.SIGKILL) if visible(TEST) == "no"
    else "not tried: visible")
row("kill -HUP the test", lambda: os.kill(TEST, signal.SIGHUP) if visible(TEST) == "no"
    else "not tried: visible")
row("pidfd_open the host process", lambda: os.close(sc("pidfd_open", HOST, 0)))
row("kill -9 -1", kill_everything)
info("pids inside", ",".join(map(str, pids())))
row("pids above 1000", lambda: ",".join(str(p) for p in pids() if p > 1000) or "none")
