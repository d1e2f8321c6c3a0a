"""The server of constle-testkit's HttpsSite.

Usage: https_site.py ROOT CERT KEY LOG

Serves the files under ROOT over HTTPS on port 443 of every address of the
network namespace it runs in (IPv4 and IPv6), and appends one JSON line per
request it answers to LOG. Prints "ready" once it listens.
"""

import functools
import http.server
import json
import socket
import ssl
import sys
import threading

ROOT, CERT, KEY, LOG = sys.argv[1:]

TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
TLS.load_cert_chain(CERT, KEY)

LOG_LOCK = threading.Lock()


class Handler(http.server.SimpleHTTPRequestHandler):
    # Keep-alive, as package managers and Git expect of a real site.
    protocol_version = "HTTP/1.1"
    # An idle kept-alive connection is dropped instead of holding a thread.
    timeout = 30

    def log_request(self, code="-", size="-"):
        entry = {
            "host": self.headers.get("Host", ""),
            "method": self.command,
            "path": self.path,
            "status": int(code),
        }
        with LOG_LOCK, open(LOG, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")

    def log_message(self, format, *args):
        # Requests go to LOG; standard error is kept for tracebacks.
        pass


class Server(http.server.ThreadingHTTPServer):
    # [::] takes IPv4 too: bindv6only is 0 in a fresh namespace.
    address_family = socket.AF_INET6
    daemon_threads = True

    def finish_request(self, request, client_address):
        # The handshake runs on the connection's own thread, so a client
        # that stalls it holds up no other.
        try:
            tls = TLS.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        with tls:
            super().finish_request(tls, client_address)


server = Server(("::", 443), functools.partial(Handler, directory=ROOT))
print("ready", flush=True)
server.serve_forever()
