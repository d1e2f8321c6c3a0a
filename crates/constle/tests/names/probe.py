"""What tests/names.rs runs inside the sandbox, with no proxy: plain
sockets, the resolver /etc/resolv.conf names, and the placeholders it gives.

  probe.py fetch HOST [4|6]   socket.create_connection + ssl (TEST_CA):
                              prints the body of /hello.txt and "via ADDR"
  probe.py dns SUFFIX ADDR... DNS tunnelling attempts under SUFFIX, then
                              direct DNS to each ADDR: one JSON line
  probe.py ports HOST ADDR... HOST's placeholders' other ports, and port
                              443 and 80 of each ADDR (placeholders never
                              given out): a line each
  probe.py stale ADDR...      port 443 of each ADDR, never looked up
  probe.py lookup NAME...     getaddrinfo of each NAME: a line each
  probe.py flood PORT N SECS  N connections to 127.0.0.1:PORT held SECS,
                              then closed: `flood held N`
  probe.py takeover           what the agent tries against the name service
                              itself (binding its ports, a placeholder's
                              privileged port, the proxy's door, the
                              namespace's settings, routes, raw sockets): a
                              line each, `NAME: OK` or `NAME: ERRNO`
"""
import errno
import json
import os
import random
import socket
import ssl
import string
import struct
import sys
import time

def why(e):
    return errno.errorcode.get(e.errno, type(e).__name__) if e.errno else type(e).__name__


def ms(start):
    return int((time.monotonic() - start) * 1000)


def fetch(host, family="any"):
    if family == "any":
        raw = socket.create_connection((host, 443), timeout=10)
    else:
        af = socket.AF_INET6 if family == "6" else socket.AF_INET
        addr = socket.getaddrinfo(host, 443, af, socket.SOCK_STREAM)[0][4][0]
        raw = socket.create_connection((addr, 443), timeout=10)
    context = ssl.create_default_context(cafile=os.environ["TEST_CA"])
    with context.wrap_socket(raw, server_hostname=host) as tls:
        peer = tls.getpeername()[0]
        tls.sendall(f"GET /hello.txt HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        reply = b""
        while chunk := tls.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.0 200") and not head.startswith(b"HTTP/1.1 200"):
        sys.exit(f"not 200: {head[:80]!r}")
    sys.stdout.write(body.decode())
    print(f"via {peer}")


def nameserver():
    with open("/etc/resolv.conf") as f:
        for line in f:
            if line.startswith("nameserver"):
                return line.split()[1]
    sys.exit("no nameserver in /etc/resolv.conf")


def question(labels, qtype):
    name = b"".join(bytes([len(l)]) + l for l in labels) + b"\0"
    ident = random.randrange(65536)
    head = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0)
    return ident, head + name + struct.pack(">HH", qtype, 1)


def ask(server, labels, qtype, tcp):
    """The reply's rcode, or why there was none."""
    ident, message = question(labels, qtype)
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    kind = socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
    with socket.socket(family, kind) as s:
        s.settimeout(5)
        try:
            if tcp:
                s.connect((server, 53))
                s.sendall(struct.pack(">H", len(message)) + message)
                size = struct.unpack(">H", s.recv(2, socket.MSG_WAITALL))[0]
                reply = s.recv(size, socket.MSG_WAITALL)
            else:
                s.sendto(message, (server, 53))
                reply = s.recv(4096)
        except OSError as e:
            return why(e)
    if struct.unpack(">H", reply[:2])[0] != ident:
        return "wrong id"
    return {0: "NOERROR", 1: "FORMERR", 3: "NXDOMAIN"}.get(reply[3] & 15, reply[3] & 15)


def word(n):
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n)).encode()


def tunnelling(suffix, direct):
    server = nameserver()
    tail = [l.encode() for l in suffix.split(".")]
    # Three 63-byte labels and one of 36: 250 bytes on the wire.
    long_name = [word(63), word(63), word(63), word(36)] + tail
    binary = [bytes(range(1, 64)), bytes(range(64, 127)), bytes(range(128, 191))] + tail
    types = {"A": 1, "AAAA": 28, "TXT": 16, "NULL": 10, "ANY": 255}
    asked = [(n, t, tcp) for n in (long_name, binary) for t in types.values() for tcp in (False, True)]
    many = [[word(20)] + tail for _ in range(120)]
    asked += [(n, 1, False) for n in many]
    answers, slowest, start = {}, 0, time.monotonic()
    for labels, qtype, tcp in asked:
        began = time.monotonic()
        rcode = ask(server, labels, qtype, tcp)
        slowest = max(slowest, ms(began))
        answers[rcode] = answers.get(rcode, 0) + 1
    print(json.dumps({
        "asked": len(asked),
        "answers": answers,
        "slowest_ms": slowest,
        "total_ms": ms(start),
        "names": [b".".join(n).decode() for n in many],
        "direct": {a: [ask(a, [word(8)] + tail, 16, tcp) for tcp in (False, True)] for a in direct},
    }))


def connect(addr, port):
    """What a connection to addr:port met, and how fast."""
    start = time.monotonic()
    try:
        s = socket.create_connection((addr, port), timeout=5)
    except OSError as e:
        return f"{why(e)} {ms(start)} ms"
    with s:
        try:
            s.sendall(b"\x16\x03\x01\x00\x00")
            got = s.recv(1)
        except OSError as e:
            return f"{why(e)} after connecting {ms(start)} ms"
    return f"closed {ms(start)} ms" if got == b"" else f"answered {got!r}"


def ports(host, unassigned):
    v4 = socket.getaddrinfo(host, 443, socket.AF_INET)[0][4][0]
    v6 = socket.getaddrinfo(host, 443, socket.AF_INET6)[0][4][0]
    print(f"placeholders {v4} {v6}")
    for addr, port in [(v4, 80), (v4, 8443), (v6, 8443)] + [(a, p) for a in unassigned for p in (443, 80)]:
        print(f"{addr} {port} {connect(addr, port)}")


def stale(addrs):
    for addr in addrs:
        print(f"{addr} 443 {connect(addr, 443)}")


def flood(port, count, seconds):
    """`count` connections to the sandbox's 127.0.0.1:`port` (a door),
    held `seconds`, then closed: how many connected."""
    held = []
    for _ in range(count):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        except OSError as e:
            print(f"flood stopped: {why(e)}")
            s.close()
            break
        held.append(s)
    time.sleep(seconds)
    print(f"flood held {len(held)}")
    for s in held:
        s.close()


def lookup(names):
    for name in names:
        start = time.monotonic()
        try:
            found = socket.getaddrinfo(name, 443)
            print(f"{name} resolved {found[0][4][0]}")
        except OSError as e:
            print(f"{name} unresolved {ms(start)} ms {e}")


def attempt(name, action):
    try:
        action()
        print(f"{name}: OK")
    except OSError as e:
        print(f"{name}: {why(e)}")


def bound(family, kind, addr, reuse=False):
    def action():
        with socket.socket(family, kind) as s:
            if reuse:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind(addr)
            if kind == socket.SOCK_STREAM:
                s.listen()
    return action


def write(path, text):
    def action():
        with open(path, "w") as f:
            f.write(text)
    return action


def takeover():
    inet, inet6 = socket.AF_INET, socket.AF_INET6
    attempt("bind udp 127.0.0.1:53", bound(inet, socket.SOCK_DGRAM, ("127.0.0.1", 53)))
    attempt("bind tcp 0.0.0.0:443", bound(inet, socket.SOCK_STREAM, ("0.0.0.0", 443)))
    attempt("bind tcp [::]:443", bound(inet6, socket.SOCK_STREAM, ("::", 443)))
    attempt("bind tcp 198.18.0.9:80", bound(inet, socket.SOCK_STREAM, ("198.18.0.9", 80)))
    stream = socket.SOCK_STREAM
    attempt("bind the proxy's door", bound(inet, stream, ("127.0.0.1", 3128), reuse=True))
    attempt("bind beside the door", bound(inet, stream, ("0.0.0.0", 3128), reuse=True))
    attempt("lower the privileged ports",
            write("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0"))
    attempt("netlink route socket", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
    attempt("raw tcp socket", lambda: socket.socket(inet, socket.SOCK_RAW, socket.IPPROTO_TCP).close())
    attempt("raw tcp6 socket", lambda: socket.socket(inet6, socket.SOCK_RAW, socket.IPPROTO_TCP).close())


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "fetch":
        fetch(*args)
    elif command == "dns":
        tunnelling(args[0], args[1:])
    elif command == "ports":
        ports(args[0], args[1:])
    elif command == "stale":
        stale(args)
    elif command == "lookup":
        lookup(args)
    elif command == "flood":
        flood(int(args[0]), int(args[1]), float(args[2]))
    elif command == "takeover":
        takeover()
    else:
        sys.exit(f"unknown command {command}")
