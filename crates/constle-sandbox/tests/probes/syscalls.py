"""The seccomp filter, asked from inside the sandbox.

Makes each system call the filter refuses, then the ordinary work that must
keep working, and prints one `name: RESULT` line per row: `OK` when the call
succeeds, the errno's name when it fails, `FAILED ...` when the row broke in
another way. The test compares the lines with its table.

Where the kernel itself would refuse a call for lack of privilege, the row
passes arguments it rejects in another way first (a null pointer, a bad
command), so that `EPERM` can only have come from the filter. Every row that
forks does so before any thread is started.
"""

import ctypes
import errno
import os
import platform
import signal
import socket
import stat
import subprocess
import sys
import termios
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# System call numbers (from 403 on, every architecture shares them).
NR = {
    "x86_64": dict(ptrace=101, process_vm_readv=310, process_vm_writev=311, kcmp=312,
                   bpf=321, perf_event_open=298, userfaultfd=323, keyctl=250, add_key=248,
                   mount=165, umount2=166, pivot_root=155, unshare=272, setns=308, clone=56,
                   ioctl=16, fchmod=91, fchmodat=268, personality=135,
                   chmod=90, creat=85, shmget=29, shmctl=31, x32_getpid=0x40000000 | 39),
    "aarch64": dict(ptrace=117, process_vm_readv=270, process_vm_writev=271, kcmp=272,
                    bpf=280, perf_event_open=241, userfaultfd=282, keyctl=219, add_key=217,
                    mount=40, umount2=39, pivot_root=41, unshare=97, setns=268, clone=220,
                    ioctl=29, fchmod=52, fchmodat=53, personality=92, shmget=194,
                    shmctl=195),
}[platform.machine()]
NR.update(io_uring_setup=425, pidfd_getfd=438, clone3=435, openat2=437, fchmodat2=452)

AT_FDCWD = -100
CLONE_NEWUSER = 0x10000000
TIOCLINUX = 0x541C
PTRACE_TRACEME, PTRACE_ATTACH = 0, 16
UFFD_USER_MODE_ONLY = 1
KEY_SPEC_PROCESS_KEYRING = -2
READ_IMPLIES_EXEC = 0x0400000
AF_VSOCK, AF_ALG = 40, 38


def checked(ret):
    """Raises OSError for a C call's -1, like the os module."""
    if ret == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return ret


def sc(name, *args):
    """The raw system call."""
    def arg(a):
        return ctypes.c_ulong(a % (1 << 64)) if isinstance(a, int) else a
    return checked(libc.syscall(ctypes.c_long(NR[name]), *map(arg, args)))


def row(name, call):
    try:
        call()
        result = "OK"
    except OSError as e:
        result = errno.errorcode.get(e.errno, str(e.errno))
    except Exception as e:
        result = f"FAILED {type(e).__name__}: {e}"
    print(f"{name}: {result}", flush=True)


def in_child(call):
    """Runs `call` in a forked child (it changes the process that makes it)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            call()
        except OSError as e:
            code = e.errno
        except BaseException:
            code = 255
        os._exit(code)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        raise OSError(code, os.strerror(code))


def wait_ok(pid):
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        raise RuntimeError(f"exit status {code}")


# ---------------------------------------------------------------------------
# Other processes

def ptrace_attach():
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    try:
        sc("ptrace", PTRACE_ATTACH, pid, 0, 0)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def pidfd_getfd():
    pidfd = os.pidfd_open(os.getpid())
    try:
        os.close(sc("pidfd_getfd", pidfd, 0, 0))
    finally:
        os.close(pidfd)


row("ptrace PTRACE_TRACEME", lambda: in_child(lambda: sc("ptrace", PTRACE_TRACEME, 0, 0, 0)))
row("ptrace PTRACE_ATTACH", ptrace_attach)
# No iovec at all: the kernel returns 0 before it looks at the target.
row("process_vm_readv", lambda: sc("process_vm_readv", os.getpid(), 0, 0, 0, 0, 0))
row("process_vm_writev", lambda: sc("process_vm_writev", os.getpid(), 0, 0, 0, 0, 0))
row("pidfd_getfd", pidfd_getfd)
row("kcmp", lambda: sc("kcmp", os.getpid(), os.getpid(), 0, 0, 0))

# ---------------------------------------------------------------------------
# Kernel interfaces

row("bpf", lambda: sc("bpf", 0x7fff, 0, 0))  # no such command: EINVAL
row("perf_event_open", lambda: sc("perf_event_open", 0, 0, -1, -1, 0))  # EFAULT
row("userfaultfd", lambda: os.close(sc("userfaultfd", UFFD_USER_MODE_ONLY)))
row("io_uring_setup", lambda: sc("io_uring_setup", 1, 0))  # EFAULT
row("keyctl", lambda: sc("keyctl", 0x7fff, 0, 0, 0, 0))  # EOPNOTSUPP
row("add_key", lambda: sc("add_key", b"user", b"constle", b"x", 1, KEY_SPEC_PROCESS_KEYRING))

# ---------------------------------------------------------------------------
# Namespaces and mounts


def clone_newuser():
    pid = sc("clone", CLONE_NEWUSER | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


row("mount", lambda: sc("mount", 0, 0, 1, 0, 0))  # type at address 1: EFAULT
row("umount2", lambda: sc("umount2", 0, 0))  # EFAULT
row("pivot_root", lambda: sc("pivot_root", b"/tmp", b"/tmp"))
row("unshare CLONE_NEWUSER", lambda: sc("unshare", CLONE_NEWUSER))  # ENOSPC (--disable-userns)
row("setns", lambda: sc("setns", -1, 0))  # EBADF
row("clone CLONE_NEWUSER", clone_newuser)
row("clone3", lambda: sc("clone3", 0, 0))  # EINVAL
row("openat2", lambda: sc("openat2", AT_FDCWD, b"/", 0, 0))  # EINVAL

# ---------------------------------------------------------------------------
# Terminals: a pseudo-terminal of the probe's own, made the controlling
# terminal of a child in a new session (TIOCSTI needs that).

master, slave = os.openpty()


def tiocsti(request):
    def child():
        os.setsid()
        tty = os.open(os.ttyname(slave), os.O_RDWR)
        sc("ioctl", tty, request, b"x")
    in_child(child)


row("ioctl TIOCSTI", lambda: tiocsti(termios.TIOCSTI))
row("ioctl TIOCSTI, high bits", lambda: tiocsti(termios.TIOCSTI | 0xDEAD << 32))
row("ioctl TIOCLINUX", lambda: sc("ioctl", slave, TIOCLINUX, b"\x02"))  # ENOTTY (no console)

# ---------------------------------------------------------------------------
# Sockets


def sock(family, kind, proto=0):
    socket.socket(family, kind, proto).close()


row("socket AF_NETLINK", lambda: sock(socket.AF_NETLINK, socket.SOCK_RAW))
row("socket AF_PACKET", lambda: sock(socket.AF_PACKET, socket.SOCK_RAW))
row("socket AF_VSOCK", lambda: sock(AF_VSOCK, socket.SOCK_STREAM))
row("socket AF_ALG", lambda: sock(AF_ALG, socket.SOCK_SEQPACKET))
row("socket AF_INET SOCK_RAW", lambda: sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
row("socket AF_INET SOCK_SEQPACKET", lambda: sock(socket.AF_INET, socket.SOCK_SEQPACKET))
row("socket AF_INET IPPROTO_SCTP",
    lambda: sock(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_SCTP))

# ---------------------------------------------------------------------------
# Set-id files (the work directory here is the sandbox's /tmp)

open("plain", "w").close()


def fchmod_setuid():
    fd = os.open("plain", os.O_RDONLY)
    try:
        sc("fchmod", fd, 0o4755)
    finally:
        os.close(fd)


if "chmod" in NR:
    row("chmod u+s", lambda: sc("chmod", b"plain", 0o4755))
    row("creat u+s", lambda: os.close(sc("creat", b"creat-setuid", 0o4755)))
row("fchmod u+s", fchmod_setuid)
row("fchmodat g+s", lambda: sc("fchmodat", AT_FDCWD, b"plain", 0o2755))
row("fchmodat2 u+s", lambda: sc("fchmodat2", AT_FDCWD, b"plain", 0o4755, 0))
row("os.chmod u+s", lambda: os.chmod("plain", 0o4755))
row("os.open O_CREAT u+s", lambda: os.close(os.open("open-setuid", os.O_CREAT | os.O_WRONLY, 0o4755)))
row("os.open O_TMPFILE g+s", lambda: os.close(os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o2755)))
row("os.mknod regular u+s", lambda: os.mknod("mknod-setuid", stat.S_IFREG | 0o4755))


def set_id_files():
    found = [n for n in os.listdir(".") if os.lstat(n).st_mode & (stat.S_ISUID | stat.S_ISGID)]
    if found:
        raise RuntimeError(f"set-id files: {found}")


row("no set-id file exists", set_id_files)

# ---------------------------------------------------------------------------
# Odd ABIs and personalities


def read_implies_exec():
    sc("personality", READ_IMPLIES_EXEC)
    sc("personality", 0)


row("personality READ_IMPLIES_EXEC", read_implies_exec)

# ---------------------------------------------------------------------------
# System V shared memory, which no file system bounds

IPC_PRIVATE, IPC_CREAT, IPC_RMID = 0, 0o1000, 0


def shm_segment(size):
    segment = sc("shmget", IPC_PRIVATE, size, IPC_CREAT | 0o600)
    sc("shmctl", segment, IPC_RMID, 0)


row("shmget 1 MiB", lambda: shm_segment(1 << 20))
if "x32_getpid" in NR:
    row("x32 getpid", lambda: sc("x32_getpid"))  # ENOSYS on kernels without x32

# ---------------------------------------------------------------------------
# Ordinary work


def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    wait_ok(pid)


def run(*argv):
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)


def thread():
    ran = []
    t = threading.Thread(target=lambda: ran.append(True))
    t.start()
    t.join()
    if not ran:
        raise RuntimeError("the thread did not run")


def tcp():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname(), timeout=10)
    conn, _ = server.accept()
    client.sendall(b"ping")
    if conn.recv(4) != b"ping":
        raise RuntimeError("nothing came through")
    for s in (client, conn, server):
        s.close()


def splice():
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    os.write(w1, b"data")
    if os.splice(r1, w2, 4) != 4:
        raise RuntimeError("short splice")
    for fd in (r1, w1, r2, w2):
        os.close(fd)


def epoll():
    import select
    ep = select.epoll()
    r, w = os.pipe()
    ep.register(r, select.EPOLLIN)
    os.write(w, b"x")
    if not ep.poll(1):
        raise RuntimeError("no event")
    for fd in (r, w):
        os.close(fd)
    ep.close()


row("fork", fork)
row("posix_spawn", lambda: wait_ok(os.posix_spawn("/bin/true", ["true"], {})))
row("subprocess", lambda: run("/bin/sh", "-c", "exit 0"))
row("python3 -c 'import ssl, json'", lambda: run(sys.executable, "-c", "import ssl, json"))
row("thread", thread)
row("tcp over loopback", tcp)
row("socket AF_INET6 SOCK_DGRAM", lambda: sock(socket.AF_INET6, socket.SOCK_DGRAM))
row("socketpair AF_UNIX", lambda: [s.close() for s in socket.socketpair()])
row("os.chmod 0755", lambda: os.chmod("plain", 0o755))
row("os.open O_CREAT 0644", lambda: os.close(os.open("open-plain", os.O_CREAT | os.O_WRONLY, 0o644)))
row("os.mkfifo", lambda: os.mkfifo("fifo"))
row("tcgetattr", lambda: termios.tcgetattr(slave))
row("personality query", lambda: sc("personality", 0xFFFFFFFF))
row("memfd_create", lambda: os.close(os.memfd_create("probe")))
row("shmget 4 KiB", lambda: shm_segment(4096))
row("prctl PR_SET_NAME", lambda: checked(libc.prctl(15, b"probe", 0, 0, 0)))
row("epoll", epoll)
row("splice", splice)
