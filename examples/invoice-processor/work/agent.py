"""The example agent, behaving as a compromised one would.

It asks the proxy for the host it is allowed to reach, then tries what a
prompt-injected agent would: an undeclared host, the allowed host's raw
address, another port, a name that points back inside, and dialling out
directly. Each attempt prints one line saying what happened.

Given HOST:PORT arguments instead, it asks the proxy for each and prints
`TARGET STATUS [FIRST LINE FROM THE SERVER]`, one line each (the test suite
uses this to try every rule from inside the sandbox).

Only the Python standard library is used, so it runs on the host's python3
inside the sandbox.
"""

import os
import socket
import sys
import urllib.parse

ALLOWED = os.environ.get("ALLOWED_HOST", "api.groq.com")
ALLOWED_ADDRESS = os.environ.get("ALLOWED_ADDRESS", "203.0.113.10")


def through_proxy(target: str) -> tuple[str, str]:
    """The proxy's status for CONNECT `target` (or `closed`), and for a 200
    the first line the server sent through the tunnel."""
    proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as conn:
        conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = conn.recv(4096)
            if not chunk:
                return "closed", ""
            reply += chunk
        head, _, answer = reply.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1].decode(errors="replace")
        if status != "200":
            return status, ""
        while b"\n" not in answer:
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
        return status, answer.split(b"\n", 1)[0].decode(errors="replace")


def directly(address: str, port: int) -> str:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as conn:
            conn.settimeout(3)
            conn.connect((address, port))
            return "connected (the sandbox leaked!)"
    except OSError as error:
        return f"{type(error).__name__}: {error}"


def demo() -> None:
    if "HTTPS_PROXY" not in os.environ:
        print("agent: no HTTPS_PROXY: this run has no egress at all")
    else:
        for target in [f"{ALLOWED}:443", "evil.example.com:443", f"{ALLOWED_ADDRESS}:443", f"{ALLOWED}:22", "localtest.me:443"]:
            status, said = through_proxy(target)
            outcome = f"connected; the server said {said!r}" if status == "200" else f"refused by the proxy ({status})"
            print(f"agent: CONNECT {target} via the proxy -> {outcome}")
    for address in [ALLOWED_ADDRESS, "2001:db8::10"]:
        print(f"agent: direct connection to {address} port 443 -> {directly(address, 443)}")


def main() -> int:
    if len(sys.argv) == 1:
        demo()
    for target in sys.argv[1:]:
        status, said = through_proxy(target)
        print(f"{target} {status} {said}".rstrip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
