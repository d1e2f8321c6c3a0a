"""A DNS server that answers nothing: listens on port 53 (UDP and TCP) of
each address given that it can bind, prints "ready", then a line for every
packet or connection that reaches it, until killed. For tests/names.rs: no
query from the sandbox may ever get here."""
import select
import socket
import sys

sockets = []
for addr in sys.argv[1:]:
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        s = socket.socket(family, kind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            s.bind((addr, 53))
        except OSError as e:
            print(f"cannot bind {addr}: {e}", file=sys.stderr)
            continue
        if kind == socket.SOCK_STREAM:
            s.listen()
        sockets.append((addr, kind, s))
print("ready", flush=True)
while True:
    readable, _, _ = select.select([s for _, _, s in sockets], [], [])
    for addr, kind, s in sockets:
        if s in readable:
            if kind == socket.SOCK_STREAM:
                s.accept()[0].close()
                print(f"tcp {addr}", flush=True)
            else:
                s.recv(65536)
                print(f"udp {addr}", flush=True)
