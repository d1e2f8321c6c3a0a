"""The operator's terminal, attacked from inside (attack 4 of the old
sandbox): constle runs under a real pseudo-terminal (pty_harness.py), and
the agent goes after it through whatever descriptors it was given.

Rows go to the file `rows` of the work directory (the terminal may be in
no state to carry them); the files `ready` and `done` tell the harness
when to type. Modes:

`read`: reads what the operator types, from every descriptor and
/dev/tty, into the file `keystrokes`.
`isig`: turns off ISIG (so Ctrl-C sends no SIGINT), ICANON, ECHO and
IXON, shrinks the window, takes the terminal exclusively, then ignores
SIGINT and sleeps: only constle can end the run.
`escape`: clears the screen, homes the cursor and draws a fake approval
prompt, with more escape and control sequences around it.
`inject`: takes the terminal as its controlling one (TIOCSCTTY), pushes a
command into its input (TIOCSTI) and pastes a console selection
(TIOCLINUX).
`tee`: numbered lines on stdout and stderr, then exit status 3.
"""

import errno
import fcntl
import os
import select
import signal
import struct
import sys
import termios
import time

from probe import errname

mode = sys.argv[1]
rows = open("rows", "w")


def row(name, attempt):
    try:
        got = attempt()
        result = got if isinstance(got, str) else "OK"
    except OSError as e:
        result = errname(e)
    except termios.error as e:  # (errno, message), not an OSError
        result = errno.errorcode.get(e.args[0], str(e.args[0]))
    rows.write(f"{name}: {result}\n")
    rows.flush()


def targets():
    """Every descriptor the agent has, and /dev/tty if it opens."""
    fds = {f"fd {fd}": fd for fd in (0, 1, 2)}
    try:
        fds["/dev/tty"] = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        rows.write(f"open /dev/tty: {errname(e)}\n")
    return fds


def touch(name):
    open(name, "w").close()


def wait_for(name, limit=60):
    deadline = time.monotonic() + limit
    while not os.path.exists(name) and time.monotonic() < deadline:
        time.sleep(0.05)


if mode == "read":
    fds = targets()
    touch("ready")
    got = {name: b"" for name in fds}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for name, fd in fds.items():
            try:
                r, _, _ = select.select([fd], [], [], 0.05)
                if r:
                    chunk = os.read(fd, 4096)
                    got[name] += chunk
            except OSError as e:
                got[name] = errname(e).encode()
    with open("keystrokes", "wb") as f:
        for name, data in got.items():
            f.write(name.encode() + b": " + data + b"\n")
    for name, data in got.items():
        row(f"read {name}", lambda data=data: data.decode(errors="replace").strip() or "nothing")
    touch("done")
elif mode == "isig":
    for name, fd in targets().items():
        def attack(fd=fd):
            attrs = termios.tcgetattr(fd)
            attrs[0] &= ~(termios.IXON | termios.ICRNL)
            attrs[3] &= ~(termios.ISIG | termios.ICANON | termios.ECHO)
            termios.tcsetattr(fd, termios.TCSANOW, attrs)
        row(f"clear ISIG on {name}", attack)
        row(f"resize {name}", lambda fd=fd: fcntl.ioctl(
            fd, termios.TIOCSWINSZ, struct.pack("HHHH", 1, 1, 0, 0)) and None)
        row(f"TIOCEXCL on {name}", lambda fd=fd: fcntl.ioctl(fd, termios.TIOCEXCL) and None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    touch("ready")
    time.sleep(1000)
elif mode == "escape":
    fake = ("\x1b[2J\x1b[H\x1b[1mconstle: approve pay_invoice(amount=99999) ? [y/N] \x1b[0m"
            "\r\x1b[K\x1b]0;constle\x07\x1b]52;c;ZWNobyBwd25lZA==\x07\x1bP+q\x1b\\"
            "\u009b2J\u202eevil\u202c\x08\x7f")
    for stream in (sys.stdout, sys.stderr):
        stream.write(fake + "AGENT-MARKER\n")
        stream.flush()
    row("escapes written", lambda: "yes")
elif mode == "inject":
    for name, fd in targets().items():
        # Made its controlling terminal (the agent leads a session of its
        # own), the terminal would take TIOCSTI from it.
        row(f"TIOCSCTTY on {name}", lambda fd=fd: fcntl.ioctl(fd, termios.TIOCSCTTY, 0) and None)

        def tiocsti(fd=fd):
            for byte in b"INJECTED-echo pwned\n":
                fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
        row(f"TIOCSTI on {name}", tiocsti)
        # TIOCLINUX 2: set the console selection; 3: paste it.
        row(f"TIOCLINUX paste on {name}",
            lambda fd=fd: fcntl.ioctl(fd, 0x541C, b"\x03") and None)
elif mode == "tee":
    for i in range(200):
        print(f"out {i}", flush=True)
        print(f"err {i}", file=sys.stderr, flush=True)
    rows.close()
    sys.exit(3)
rows.close()
