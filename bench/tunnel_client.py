"""The benchmark client of bench/run.sh: one program for both sides.

Inside the sandbox (as the agent, `--via-proxy`) it reaches the simulated
host through the egress proxy named by HTTPS_PROXY with a CONNECT; as the
agent with `--captured`, it looks the host's name up (the sandbox's resolver
answers a placeholder) and connects to that address, which constle turns
into the same CONNECT; on the host (`--direct ADDRESS`) it connects to the
same namespace listener straight, without any proxy. Everything after the connection is the same
code, so the two differ only in the path the bytes take.

The simulated host (constle-testkit's TestHost) writes one banner line,
`constle-testkit <namespace> <address>`, then echoes what it reads.

Subcommands, each printing one line `RESULT <json>` on stdout:

  latency K     K sequential connections (after one untimed warm-up); for
                each, the time from starting the TCP connect until the
                banner line has been read: through the proxy that covers
                connect, CONNECT, the `200` reply and the banner. Prints
                every sample in microseconds.
  throughput M  one connection; after the banner, sends M MiB while a second
                thread reads the echo back, and times from the first byte
                sent until the last echoed byte arrived. Reports M / seconds:
                MiB of payload per second, where each payload byte crossed the
                path twice (up, and back as the echo). Then closes. Also
                reports the machine's CPU time (/proc/stat) over that time.
  probe         one connection, prints the banner.
  lookup K      K lookups of --host (getaddrinfo, after one untimed), then
                at most 40 of a name the resolver refuses (their 80 queries,
                A and AAAA, stay inside the burst past which refusals are
                paced); every sample in microseconds.
  calls K       with `--mcp URL`: K sequential MCP `tools/call` requests
                (after one untimed), each on a connection of its own, as
                Python's urllib makes them; for each, the time from starting
                the TCP connect until the whole answer has been read. URL is
                an MCP gate's (CONSTLE_MCP_<ID>_URL, in the sandbox) or the
                server's own (on the host).

Python standard library only: it runs on the host's python3 in the sandbox.
"""

import argparse
import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

MIB = 1 << 20
TIMEOUT = 30.0  # seconds any single socket operation may take


class Failure(Exception):
    pass


def proxy_address():
    url = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if not url:
        raise Failure("HTTPS_PROXY is not set: this run has no egress proxy")
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or not parts.port:
        raise Failure(f"HTTPS_PROXY={url!r} has no host and port")
    return parts.hostname, parts.port


def read_until(conn, buf, marker):
    """Reads into `buf` (a bytearray) until it holds `marker`."""
    while marker not in buf:
        chunk = conn.recv(4096)
        if not chunk:
            raise Failure(f"the connection closed before {marker!r} (got {bytes(buf[:200])!r})")
        buf += chunk


def open_tunnel(args):
    """Connects, through the proxy or directly, and reads the banner line.
    Returns the socket and the banner."""
    if args.direct or args.captured:
        address = args.direct or args.captured_address
        conn = socket.create_connection((address, args.port), timeout=TIMEOUT)
        buf = bytearray()
    else:
        conn = socket.create_connection(args.proxy, timeout=TIMEOUT)
        target = f"{args.host}:{args.port}"
        conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        buf = bytearray()
        read_until(conn, buf, b"\r\n\r\n")
        head, _, rest = bytes(buf).partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0].decode(errors="replace")
        if status.split(" ")[1:2] != ["200"]:
            conn.close()
            raise Failure(f"the proxy refused CONNECT {target}: {status!r}")
        buf = bytearray(rest)
    read_until(conn, buf, b"\n")
    line, _, extra = bytes(buf).partition(b"\n")
    banner = line.decode(errors="replace")
    if not banner.startswith("constle-testkit "):
        conn.close()
        raise Failure(f"unexpected banner {banner!r}")
    if extra:
        conn.close()
        raise Failure(f"{len(extra)} unexpected bytes after the banner")
    return conn, banner


def latency(args):
    conn, banner = open_tunnel(args)  # warm-up, not timed
    conn.close()
    samples = []
    for _ in range(args.count):
        start = time.perf_counter_ns()
        conn, _ = open_tunnel(args)
        samples.append((time.perf_counter_ns() - start) // 1000)
        conn.close()
    return {"banner": banner, "samples_us": samples}


def lookup(args):
    """Lookups as a client makes them: getaddrinfo of a name and port."""
    def timed(name, allowed, count):
        samples = []
        for _ in range(count):
            start = time.perf_counter_ns()
            try:
                socket.getaddrinfo(name, args.port, type=socket.SOCK_STREAM)
                found = True
            except socket.gaierror:
                found = False
            samples.append((time.perf_counter_ns() - start) // 1000)
            if found != allowed:
                raise Failure(f"{name} {'did not resolve' if allowed else 'resolved'}")
        return samples

    socket.getaddrinfo(args.host, args.port)  # warm-up: the name gets its placeholder
    return {"allowed_us": timed(args.host, True, args.count),
            "refused_us": timed("refused.example.net", False, min(args.count, 40))}


CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def machine_cpu():
    """The machine's CPU time counters (ticks), from /proc/stat: not
    namespaced, so the same inside the sandbox as on the host."""
    try:
        with open("/proc/stat") as f:
            values = f.readline().split()[1:1 + len(CPU_FIELDS)]
        return dict(zip(CPU_FIELDS, map(int, values)))
    except (OSError, ValueError):
        return None


def throughput(args):
    total = args.mib * MIB
    conn, banner = open_tunnel(args)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    chunk = (bytes(range(256)) * (MIB // 256))  # 1 MiB, not all zeros
    received = 0
    errors = []

    def send():
        try:
            for _ in range(args.mib):
                conn.sendall(chunk)
        except OSError as err:
            errors.append(f"sending: {err}")

    buf = bytearray(MIB)
    view = memoryview(buf)
    cpu_before = machine_cpu()
    start = time.perf_counter()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        while received < total:
            n = conn.recv_into(view, min(MIB, total - received))
            if n == 0:
                break
            received += n
    except OSError as err:
        errors.append(f"receiving: {err}")
    elapsed = time.perf_counter() - start
    cpu_after = machine_cpu()
    sender.join(TIMEOUT)
    conn.close()
    if errors or received != total:
        raise Failure(
            f"echo incomplete: {received} of {total} bytes back" + "".join(f"; {e}" for e in errors)
        )
    return {
        "banner": banner,
        "mib": args.mib,
        "seconds": elapsed,
        "mib_per_s": args.mib / elapsed,
        "machine_cpu_ticks": cpu_before and cpu_after and {
            k: cpu_after[k] - cpu_before[k] for k in CPU_FIELDS
        },
    }


def calls(args):
    url = urllib.parse.urlsplit(args.mcp)
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "echo", "arguments": {}}}
    body = json.dumps(request).encode()
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}

    def once():
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=TIMEOUT)
        try:
            conn.request("POST", url.path, body, headers)
            answer = conn.getresponse()
            data = answer.read()
        finally:
            conn.close()
        if answer.status != 200:
            raise Failure(f"the call got {answer.status}: {data[:200]!r}")

    once()  # warm-up, not timed
    samples = []
    for _ in range(args.count):
        start = time.perf_counter_ns()
        once()
        samples.append((time.perf_counter_ns() - start) // 1000)
    return {"samples_us": samples}


def probe(args):
    conn, banner = open_tunnel(args)
    conn.close()
    return {"banner": banner}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--via-proxy", action="store_true", help="CONNECT through HTTPS_PROXY")
    where.add_argument("--direct", metavar="ADDRESS", help="connect straight to ADDRESS")
    where.add_argument("--captured", action="store_true",
                       help="look --host up and connect to the placeholder, no proxy")
    where.add_argument("--mcp", metavar="URL", help="MCP calls to URL (`calls` only)")
    parser.add_argument("--host", default="api.groq.com", help="the name to CONNECT to (proxy only)")
    parser.add_argument("--port", type=int, default=443)
    parser.add_argument(
        "--linger", type=float, default=0.0,
        help="seconds to stay alive (idle) after printing, so the host can sample CPU times",
    )
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("probe")
    p = sub.add_parser("latency")
    p.add_argument("count", type=int)
    p = sub.add_parser("lookup")
    p.add_argument("count", type=int)
    p = sub.add_parser("throughput")
    p.add_argument("mib", type=int)
    p = sub.add_parser("calls")
    p.add_argument("count", type=int)
    args = parser.parse_args()
    try:
        if args.via_proxy:
            args.proxy = proxy_address()
        if args.captured:
            args.captured_address = socket.getaddrinfo(
                args.host, args.port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        result = {"probe": probe, "latency": latency, "throughput": throughput,
                  "lookup": lookup, "calls": calls}[args.what](args)
    except (Failure, OSError) as err:
        print(f"tunnel_client: {args.what}: {err}", file=sys.stderr)
        return 1
    print("RESULT " + json.dumps(result), flush=True)
    if args.linger > 0:
        time.sleep(args.linger)
    return 0


if __name__ == "__main__":
    sys.exit(main())
