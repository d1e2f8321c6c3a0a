"""Sockets: host Unix sockets (abstract and on paths) out of reach, and
no socket family that leads past the sandbox's network namespace.

`unix --abstract NAME --paths P,Q`: sockets the test listens on, on the host.
`families`: netlink, packet, raw, vsock and their command-line users.
"""

import socket
import sys

from probe import arg, row, tool

AF_VSOCK, NETLINK_ROUTE, NETLINK_KOBJECT_UEVENT, NETLINK_AUDIT = 40, 0, 15, 9


def connect(address):
    def attempt():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        try:
            s.connect(address)
        finally:
            s.close()
    return attempt


def sock(family, kind, proto=0):
    return lambda: socket.socket(family, kind, proto).close()


if sys.argv[1] == "unix":
    name = arg("abstract")
    row("connect to the host's abstract socket", connect("\0" + name))
    for path in arg("paths").split(","):
        row(f"connect to {path}", connect(path))
    for path in ("/run/dbus/system_bus_socket", "/var/run/docker.sock", "/run/systemd/private",
                 "/run/systemd/notify", "/dev/log", "/tmp/.X11-unix/X0"):
        row(f"connect to {path}", connect(path))
else:
    row("socket AF_NETLINK NETLINK_ROUTE", sock(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE))
    row("socket AF_NETLINK NETLINK_KOBJECT_UEVENT",
        sock(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT))
    row("socket AF_NETLINK NETLINK_AUDIT", sock(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_AUDIT))
    row("socket AF_PACKET SOCK_RAW", sock(socket.AF_PACKET, socket.SOCK_RAW))
    row("socket AF_PACKET SOCK_DGRAM", sock(socket.AF_PACKET, socket.SOCK_DGRAM))
    row("socket AF_INET SOCK_RAW", sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW))
    row("socket AF_INET6 SOCK_RAW", sock(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW))
    row("socket AF_VSOCK SOCK_STREAM", sock(AF_VSOCK, socket.SOCK_STREAM))
    row("socket AF_VSOCK SOCK_DGRAM", sock(AF_VSOCK, socket.SOCK_DGRAM))
    row("ip link", lambda: tool("ip", "link"))
