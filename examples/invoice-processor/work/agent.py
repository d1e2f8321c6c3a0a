"""The example agent, behaving as a compromised one would.

It asks the proxy for the host it is allowed to reach, then tries what a
prompt-injected agent would: an undeclared host, the allowed host's raw
address, another port, a name that points back inside, and dialling out
directly. Each attempt prints one line saying what happened.

Only the Python standard library is used, so it runs on the host's python3
inside the sandbox.
"""

import os
import socket
import sys
import urllib.parse

ALLOWED = os.environ.get("ALLOWED_HOST", "api.groq.com")
ALLOWED_ADDRESS = os.environ.get("ALLOWED_ADDRESS", "203.0.113.10")


def through_proxy(host: str, port: int) -> str:
    proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as conn:
        conn.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = conn.recv(4096)
            if not chunk:
                return "the proxy closed the connection"
            reply += chunk
        head, _, answer = reply.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0].decode(errors="replace")
        if " 200 " not in status + " ":
            return f"refused by the proxy ({status})"
        while b"\n" not in answer:
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
        first_line = answer.split(b"\n", 1)[0].decode(errors="replace")
        return f"connected; the server said {first_line!r}"


def directly(address: str, port: int) -> str:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as conn:
            conn.settimeout(3)
            conn.connect((address, port))
            return "connected (the sandbox leaked!)"
    except OSError as error:
        return f"{type(error).__name__}: {error}"


def main() -> int:
    if "HTTPS_PROXY" not in os.environ:
        print("agent: no HTTPS_PROXY: this run has no egress at all")
    else:
        for host, port in [
            (ALLOWED, 443),
            ("evil.example.com", 443),
            (ALLOWED_ADDRESS, 443),
            (ALLOWED, 22),
            ("localtest.me", 443),
        ]:
            print(f"agent: CONNECT {host}:{port} via the proxy -> {through_proxy(host, port)}")
    for address in [ALLOWED_ADDRESS, "2001:db8::10"]:
        print(f"agent: direct connection to {address} port 443 -> {directly(address, 443)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
