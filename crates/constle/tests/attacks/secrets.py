"""Keys and logs: the agent looks for the agent key and the audit log
everywhere it might be, and prints whatever it finds (the test looks for
the key's bytes in everything the run printed and left).

--home PATH: $CONSTLE_HOME on the host (an agent can guess it: the
default is ~/.constle, and the work directory's path gives the rest).
"""

import os

from probe import arg, row

HOME = arg("home")
# /proc, /sys and /dev are the kernel's; /usr is the host's read-only
# system directory (whose packages may ship test keys of their own), and
# /bin, /lib... are links into it.
SKIP = {"/proc", "/sys", "/dev", "/usr"}


def listing(path):
    def attempt():
        names = os.listdir(path)
        print(f"info listing {path}: {names}")
    return attempt


def names(path):
    return lambda: ",".join(sorted(os.listdir(path)))


def dump(path):
    def attempt():
        with open(path, "rb") as f:
            data = f.read(1 << 20)
        print(f"info read {path}: {data.hex()} {data!r}")
    return attempt


def search():
    """Every private key and everything of constle's home visible inside."""
    found = []
    for top in sorted(set(os.listdir("/")) - {p[1:] for p in SKIP}):
        if os.path.islink("/" + top):
            continue
        for root, dirs, files in os.walk("/" + top, onerror=lambda e: None):
            for name in files:
                path = os.path.join(root, name)
                if not (name.endswith((".pem", ".key", ".jsonl", ".head"))
                        or ".constle" in path or "/keys/" in path):
                    continue
                try:
                    with open(path, "rb") as f:
                        data = f.read(1 << 16)
                except OSError:
                    continue
                if b"PRIVATE KEY" in data or name.endswith((".jsonl", ".head")) \
                        or ".constle" in path or "/keys/" in path:
                    found.append(path)
                    print(f"info found {path}: {data.hex()} {data!r}")
    return ",".join(found) or "none"


def forge():
    logs = os.path.join(HOME, "logs")
    with open(os.path.join(logs, "attack.jsonl"), "a") as f:
        f.write('{"event":"run_finished","exit_status":0,"forged":true}\n')


row("list $CONSTLE_HOME", listing(HOME))
row("list $CONSTLE_HOME/keys/agent", listing(os.path.join(HOME, "keys/agent")))
row("read the agent key by its path", dump(os.path.join(HOME, "keys/agent/test-agent.pem")))
row("list $CONSTLE_HOME/logs", listing(os.path.join(HOME, "logs")))
row("append a forged audit entry", forge)
row("list /root/.constle", listing("/root/.constle"))
row("list /root", listing("/root"))
# The sandbox's own /home: the agent's empty home, nothing of the host's.
row("list /home", names("/home"))
row("read /etc/shadow", dump("/etc/shadow"))
row("keys and logs found anywhere", search)
