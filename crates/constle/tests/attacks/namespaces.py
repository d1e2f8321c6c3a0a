"""New namespaces and mounts: the way back to capabilities (a user
namespace of its own) and to changing what the sandbox shows."""

import os
import signal

from probe import in_child, sc, tool, row

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_REMOUNT, MS_BIND = 32, 4096
os.makedirs("/tmp/mnt", exist_ok=True)


def clone(flags):
    def attempt():
        pid = sc("clone", flags | signal.SIGCHLD, 0, 0, 0, 0)
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return attempt


def unshare(flags):
    return lambda: in_child(lambda: sc("unshare", flags))


def setns(path):
    def attempt():
        fd = os.open(path, os.O_RDONLY)
        try:
            in_child(lambda: sc("setns", fd, 0))
        finally:
            os.close(fd)
    return attempt


for flag in ("-U", "-r", "-m", "-n", "-p -f", "-i", "-u", "-C"):
    row(f"unshare(1) {flag}", lambda flag=flag: tool("unshare", *flag.split(), "true"))
for name, flags in (("CLONE_NEWUSER", CLONE_NEWUSER), ("CLONE_NEWNS", CLONE_NEWNS),
                    ("CLONE_NEWNET", CLONE_NEWNET), ("CLONE_NEWPID", CLONE_NEWPID)):
    row(f"unshare {name}", unshare(flags))
    row(f"clone {name}", clone(flags))
row("os.unshare CLONE_NEWUSER",
    lambda: in_child(lambda: os.unshare(CLONE_NEWUSER)) if hasattr(os, "unshare") else "absent")
row("clone3", lambda: sc("clone3", 0, 0))
row("setns into pid 1's mount namespace", setns("/proc/1/ns/mnt"))
row("setns into its own user namespace", setns("/proc/self/ns/user"))
row("mount tmpfs", lambda: sc("mount", b"none", b"/tmp/mnt", b"tmpfs", 0, 0))
row("remount / read-write", lambda: sc("mount", b"none", b"/", 0, MS_REMOUNT, 0))
row("bind /proc/sys writable", lambda: sc("mount", b"/proc/sys", b"/tmp/mnt", 0, MS_BIND, 0))
row("chroot", lambda: sc("chroot", b"/tmp"))
row("pivot_root", lambda: sc("pivot_root", b"/tmp", b"/tmp/mnt"))
row("bwrap inside", lambda: tool("bwrap", "--ro-bind", "/", "/", "true",
                                 messages={"No permissions to create new namespace": "EPERM"}))
