"""The kernel's settings and triggers: /proc/sys, /proc/sysrq-trigger and
the like must be read-only or absent.

Each file is only opened for writing, never written: on a sandbox where the
open succeeds, nothing on the host changes (a write to sysrq-trigger could
reboot the machine). Arguments: the files to try one by one, with O_TRUNC
(which /proc ignores), so that a read-only mount answers EROFS before
permissions are looked at. Then every file of /proc/sys and of /proc's
other kernel directories is tried (plain O_WRONLY) and the ones that open
are listed.
"""

import os

from probe import info, row


def open_for_writing(path):
    if not os.path.lexists(path):
        return "absent"
    os.close(os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK | os.O_NOCTTY))


for path in os.sys.argv[1:]:
    row(f"open {path} for writing", lambda path=path: open_for_writing(path))

# Host-wide pressure statistics accept triggers from anyone, on the host
# too: listed for the reader, not counted.
EVERYONES = {"/proc/pressure/cpu", "/proc/pressure/io", "/proc/pressure/memory",
             "/proc/pressure/irq"}


def sweep():
    candidates = [os.path.join("/proc", name) for name in os.listdir("/proc")
                  if not name.isdigit() and name not in ("self", "thread-self", "net")]
    writable, everyone = [], []
    while candidates:
        path = candidates.pop()
        if os.path.islink(path):
            continue
        if os.path.isdir(path):
            try:
                candidates.extend(os.path.join(path, n) for n in os.listdir(path))
            except OSError:
                pass
            continue
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY))
        except OSError:
            continue
        (everyone if path in EVERYONES else writable).append(path)
    info("writable by anyone, host-wide", ",".join(sorted(everyone)) or "none")
    writable.sort()
    more = f" and {len(writable) - 20} more" if len(writable) > 20 else ""
    return ",".join(writable[:20]) + more or "none"


row("files of /proc open for writing", sweep)
