"""Runs a command under a fresh pseudo-terminal, as an operator's shell
does (the terminal is its controlling terminal and the command's process
group the foreground one), types on it, and reports what happened as one
JSON object on stdout.

  pty_harness.py [--ready FILE] [--type TEXT] [--done FILE] [--ctrl-c]
                 [--stdout-pipe] [--timeout S] -- COMMAND...

--ready FILE: wait for FILE before typing; --type TEXT: type it;
--done FILE: then wait for FILE; --ctrl-c: then type Ctrl-C; the run
must then end within --timeout seconds, or it is killed and reported
hung. --stdout-pipe: the command's stdout is a pipe, as in `COMMAND | tee`
(its stderr stays on the terminal).

The report: the exit code (or signal), whether it hung, every byte the
terminal showed and the pipe got, `stty -a` before and after, whether the
terminal can still be opened afterwards, and the input still waiting on it.
"""

import argparse
import base64
import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import threading
import time
import tty

parser = argparse.ArgumentParser()
parser.add_argument("--ready")
parser.add_argument("--type")
parser.add_argument("--done")
parser.add_argument("--ctrl-c", action="store_true")
parser.add_argument("--stdout-pipe", action="store_true")
parser.add_argument("--timeout", type=float, default=60)
parser.add_argument("command", nargs="+")
args = parser.parse_args()

master, slave = pty.openpty()
name = os.ttyname(slave)
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))


def stty():
    return subprocess.run(["stty", "-a"], stdin=slave, capture_output=True, text=True).stdout


before = stty()
shown, piped, stop = bytearray(), bytearray(), threading.Event()


def read_terminal():
    while not stop.is_set():
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                shown.extend(os.read(master, 65536))
            except OSError:
                return


def take_terminal():
    # A new session's leader: the terminal becomes its controlling one,
    # and its process group the foreground one (Ctrl-C goes to it).
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


proc = subprocess.Popen(args.command, stdin=slave,
                        stdout=subprocess.PIPE if args.stdout_pipe else slave,
                        stderr=slave, start_new_session=True, preexec_fn=take_terminal)
reader = threading.Thread(target=read_terminal)
reader.start()
pipe_reader = None
if args.stdout_pipe:
    pipe_reader = threading.Thread(target=lambda: piped.extend(proc.stdout.read()))
    pipe_reader.start()

deadline = time.monotonic() + args.timeout


def wait_for(path):
    while not os.path.exists(path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return os.path.exists(path)


steps = []
if args.ready:
    steps.append(("ready", wait_for(args.ready)))
if args.type:
    os.write(master, args.type.encode())
if args.done:
    steps.append(("done", wait_for(args.done)))
if args.ctrl_c:
    time.sleep(0.2)
    os.write(master, b"\x03")
    deadline = time.monotonic() + args.timeout
hung = False
try:
    proc.wait(timeout=max(deadline - time.monotonic(), 1))
except subprocess.TimeoutExpired:
    hung = True
    os.killpg(proc.pid, 9)
    proc.wait()
time.sleep(0.5)  # what is still on its way to the terminal
stop.set()
reader.join()
if pipe_reader:
    pipe_reader.join(timeout=10)

after = stty()
try:
    os.close(os.open(name, os.O_RDWR | os.O_NOCTTY))
    reopen = "OK"
except OSError as e:
    reopen = os.strerror(e.errno)
# The input nobody read: switch to raw mode (after `after` was taken) to
# read it all, complete line or not.
saved = termios.tcgetattr(slave)
tty.setraw(slave)
os.set_blocking(slave, False)
pending = b""
try:
    while True:
        pending += os.read(slave, 65536)
except OSError:
    pass
termios.tcsetattr(slave, termios.TCSANOW, saved)

code = proc.returncode
print(json.dumps({
    "exit": code if code >= 0 else None,
    "signal": -code if code < 0 else None,
    "hung": hung,
    "steps": dict(steps),
    "terminal": base64.b64encode(bytes(shown)).decode(),
    "piped": base64.b64encode(bytes(piped)).decode(),
    "before": before,
    "after": after,
    "reopen": reopen,
    "pending": base64.b64encode(pending).decode(),
}))
