#!/usr/bin/env python3
"""The fleet test's driver, run by scripts/container/fleet (read it first).

Several podman containers each run `constle run` for one agent identity
against one Redis (a Unix socket on the host, bind-mounted into each
container, which has no network) and one MCP server (on the host, on a
Unix socket; a relay inside each container gives the gate the loopback
http:// URL an Agentfile's `url` needs). They race priced calls.

Round "race": the day cap holds across the fleet to the cent (Redis's
total, `constle spend show --format json`, is at most the cap, equals the
sum of every log's `spend_charged` and the number of calls the server
served times the price); one signed A2A envelope, posted to every
container's listener at once, is accepted exactly once (replay store in
the same Redis); every log verifies.
Round "redis-dies": the MCP server kills redis-server (SIGKILL) as it
serves the Nth call. Nothing is charged after that, priced calls are
refused (`ledger_unavailable`), the total stays under the cap and every
log verifies.
Round "redis-stalls": the same with SIGSTOP: the calls then waiting on
Redis run out of time (2 s) and are refused (`ledger_unavailable`), as is
every later one. Redis, woken (SIGCONT) after the race, may hold charges
whose answers came too late (counted, never forwarded): its total is at
least what the logs charged, and at most the cap.
Each round prints a table: calls through the one Redis, per container
and in all, and calls per second (`--bench` raises the cap so the race
runs long enough to measure).

The same file is the relay (`relay`), the agent inside each sandbox
(`agent`) and the envelope poster (`post`): one file, mounted or copied.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

AGENT_UID = 10001  # the image's non-root user (scripts/container/flags.sh)
RELAY_PORT = 4180  # the relay's port on each container's own loopback
A2A_PORT = 7400  # each container's A2A listener, on its own loopback
TOOL = "buy"


def fail(message):
    print(f"container/fleet: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def say(message):
    print(f"container/fleet: {message}", file=sys.stderr, flush=True)


# --- the MCP server, on the host ----------------------------------------


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """http.server over a Unix socket (the relays in the containers reach it)."""

    daemon_threads = True

    def get_request(self):
        request, _ = super().get_request()
        return request, ("fleet", 0)


class McpServer:
    """A Streamable HTTP MCP server (JSON answers, no sessions) with one tool.

    Counts the calls it serves; on the `fault_at`th it sends `victim` (the
    Redis) `fault` first (SIGKILL or SIGSTOP), so that Redis dies or stalls
    while the fleet is racing.
    """

    def __init__(self, path):
        self.served = 0
        self.lock = threading.Lock()
        self.fault_at = None
        self.fault = None
        self.victim = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                answer = server.answer(json.loads(body))
                if answer is None:
                    self.send_response(202)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.http = UnixHTTPServer(str(path), Handler)
        os.chmod(path, 0o666)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def answer(self, message):
        if "id" not in message:
            return None
        method, rid = message.get("method"), message["id"]
        if method == "initialize":
            version = message.get("params", {}).get("protocolVersion", "2025-06-18")
            result = {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "fleet-shop", "version": "1"},
            }
        elif method == "tools/list":
            schema = {"type": "object", "properties": {}}
            result = {"tools": [{"name": TOOL, "description": "buys", "inputSchema": schema}]}
        elif method == "tools/call":
            self.serve_call()
            result = {"content": [{"type": "text", "text": "bought"}], "isError": False}
        else:
            return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}}
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    def serve_call(self):
        with self.lock:
            self.served += 1
            if self.served == self.fault_at:
                self.victim.send_signal(self.fault)
                say(f"redis-server sent {self.fault.name} while serving call {self.served}")


# --- the relay, inside each container ------------------------------------


def relay(args):
    """Forwards 127.0.0.1:RELAY_PORT to the MCP server's Unix socket."""

    def pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    listener = socket.create_server(("127.0.0.1", RELAY_PORT))
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(args.socket)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


# --- the agent, inside each sandbox --------------------------------------


def rpc(url, session, message):
    request = urllib.request.Request(
        url,
        data=json.dumps(message).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **({"Mcp-Session-Id": session[0]} if session[0] else {}),
        },
    )
    try:
        response = urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as error:
        response = error
    with response:
        session[0] = response.headers.get("Mcp-Session-Id") or session[0]
        body = response.read().decode()
    if response.headers.get("Content-Type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in body.splitlines() if line.startswith("data:")]
        body = next((d for d in data if d), "")
    return json.loads(body) if body else None


def agent(args):
    """Calls the tool until refused twice (or `calls` times), on `threads`
    threads; waits for `go` first, writes `result.json`, then reads the
    A2A inbox into `inbox.json` until `stop` appears."""
    url = os.environ["CONSTLE_MCP_SHOP_URL"]
    session = [None]
    rpc(url, session, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "fleet-agent", "version": "1"}}})
    rpc(url, session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    Path("ready").touch()
    while not Path("go").exists():
        time.sleep(0.02)
    calls, lock = [], threading.Lock()

    def loop(thread):
        refused, n = 0, 0
        while refused < 2 and not 0 < args.calls <= n:
            n += 1
            start = time.time()
            answer = rpc(url, session, {"jsonrpc": "2.0", "id": f"{thread}-{n}",
                                        "method": "tools/call",
                                        "params": {"name": TOOL, "arguments": {}}})
            outcome = "ok" if "result" in answer else answer["error"]["message"]
            refused += outcome != "ok"
            with lock:
                calls.append({"start": start, "end": time.time(), "outcome": outcome})

    threads = [threading.Thread(target=loop, args=(t,)) for t in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    Path("result.json.tmp").write_text(json.dumps(calls))
    os.rename("result.json.tmp", "result.json")
    inbox, a2a = [], os.environ.get("CONSTLE_A2A_URL")
    # One more look after `stop`: a message the listener accepted (202)
    # before the driver wrote `stop` is in the inbox by then.
    while True:
        stop = Path("stop").exists()
        while args.inbox:
            with urllib.request.urlopen(a2a + "/inbox/next", timeout=10) as response:
                if response.status != 200:
                    break
                inbox.append(json.loads(response.read()))
        if stop:
            break
        time.sleep(0.05)
    Path("inbox.json").write_text(json.dumps(inbox))


# --- posting an envelope, inside a container ------------------------------


def post(args):
    """POSTs the envelope to this container's listener; prints the status."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{A2A_PORT}/a2a/v1/messages",
        data=Path(args.envelope).read_bytes(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            print(response.status, response.read().decode())
    except urllib.error.HTTPError as error:
        print(error.code, error.read().decode())


# --- the driver, on the host ---------------------------------------------


class Fleet:
    def __init__(self, args):
        self.args = args
        self.constle = args.constle
        self.tmp = Path(tempfile.mkdtemp(prefix="constle-fleet."))
        self.tmp.chmod(0o755)
        self.host_home = self.tmp / "host-home"
        self.did = self.keygen("fleet")
        self.sender_did = self.keygen("sender")
        # The agent's key store, for every container (read-only there).
        self.keys = self.tmp / "keys"
        shutil.copytree(self.host_home / "keys", self.keys)
        chown_tree(self.keys)
        self.mcp = McpServer(self.tmp / "mcp.sock")
        self.redis_dir = self.tmp / "redis"
        self.redis_dir.mkdir(mode=0o755)
        self.redis = None

    def constle_cmd(self, *argv, check=True):
        env = {**os.environ, "CONSTLE_HOME": str(self.host_home), "NO_COLOR": "1"}
        out = subprocess.run([self.constle, *argv], env=env, capture_output=True, text=True)
        if check and out.returncode != 0:
            fail(f"constle {' '.join(argv)} exited {out.returncode}: {out.stdout}{out.stderr}")
        return out

    def keygen(self, name):
        out = self.constle_cmd("keygen", name).stdout
        return next(w for w in out.split() if w.startswith("did:key:"))

    def start_redis(self):
        sock = self.redis_dir / "redis.sock"
        self.redis = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", str(sock),
             "--unixsocketperm", "777", "--save", "", "--appendonly", "no",
             "--dir", str(self.redis_dir)],
            stdout=subprocess.DEVNULL)
        for _ in range(200):
            if sock.exists():
                return f"redis+unix://{sock}"
            time.sleep(0.05)
        fail("redis-server did not make its socket")

    def agentfile(self, ledger, cap, price, listen, calls=0):
        """The fleet's Agentfile; `price` None: the tool is free (no Redis)."""
        inbox = ', "--inbox"' if listen else ""
        pricing = ["      pricing:", f'        tools: {{{TOOL}: "{price}"}}'] if price else []
        lines = [
            "name: fleet",
            "identity:",
            f"  did: {self.did}",
            "sandbox:",
            '  command: ["python3", "fleet.py", "agent", "--threads", '
            f'"{self.args.threads}", "--calls", "{calls}"{inbox}]',
            "  workdir: ./work",
            "  network:",
            "    egress: none",
            "mcp:",
            "  servers:",
            "    - id: shop",
            f"      url: http://127.0.0.1:{RELAY_PORT}/mcp",
            f"      tools: [{TOOL}]",
            *pricing,
            "spending:",
            f'  max_per_day_usd: "{cap}"',
            f"  ledger: {ledger}",
            "a2a:",
            *([f"  listen: 127.0.0.1:{A2A_PORT}"] if listen else []),
            "  peers:",
            f"    - did: {self.sender_did}",
            f"  replay: {ledger}",
        ]
        return "\n".join(lines) + "\n"

    def container_dir(self, round_name, n, agentfile):
        where = self.tmp / round_name / f"c{n}"
        (where / "work").mkdir(parents=True)
        (where / "home").mkdir(mode=0o700)
        (where / "home" / "keys").mkdir(mode=0o700)
        (where / "agent.yaml").write_text(agentfile)
        shutil.copy(__file__, where / "work" / "fleet.py")
        chown_tree(where)
        return where

    def start_container(self, where, name):
        home = where / "home"
        command = (
            f'python3 {self.args.driver} relay --socket {self.tmp}/mcp.sock & '
            f'CONSTLE_HOME={home} NO_COLOR=1 exec {self.constle} run {where}/agent.yaml'
        )
        argv = ["podman", "run", "--name", name, *self.args.podman,
                "--volume", f"{self.tmp}:{self.tmp}",
                "--volume", f"{self.keys}:{home}/keys:ro",
                self.args.image, "sh", "-c", command]
        log = open(where / "container.log", "w")
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def round(self, round_name, cap, price, fault_at=None, fault=None):
        """One race: a priced tool, the caps in a fresh Redis (which fails
        at the `fault_at`th call when `fault` is a signal)."""
        ledger = self.start_redis()
        listen = fault is None
        self.mcp.served, self.mcp.victim = 0, self.redis
        self.mcp.fault_at, self.mcp.fault = fault_at, fault
        results, logs = self.race(round_name, self.agentfile(ledger, cap, price, listen), listen)
        if fault is None:
            self.check_cap(round_name, ledger, cap, price, results, logs)
        else:
            self.check_redis_fault(round_name, ledger, cap, price, logs)
        self.stop_redis()
        return rate(sum(results, []))

    def baseline(self, calls):
        """The same fleet calling the tool unpriced, `calls` calls in all:
        the gates and the server without the Redis."""
        ledger = self.start_redis()
        self.mcp.served, self.mcp.fault_at = 0, None
        per_thread = -(-calls // (self.args.containers * self.args.threads))
        text = self.agentfile(ledger, "1.00", None, False, per_thread)
        results, logs = self.race("baseline", text, False)
        made = sum(len(r) for r in results)
        spent = [e for log in logs for e in log if e.get("event", "").startswith("spend_")]
        if spent or self.mcp.served != made or any(c["outcome"] != "ok" for r in results for c in r):
            fail(f"baseline: {made} free calls, {self.mcp.served} served, spend entries {spent}")
        self.stop_redis()
        return rate(sum(results, []))

    def stop_redis(self):
        if self.redis.poll() is None:
            self.redis.send_signal(signal.SIGCONT)
            self.redis.terminate()
            self.redis.wait()

    def race(self, round_name, text, listen):
        """Starts the containers, has them call at once, posts the envelope
        (`listen`), ends them; prints the table; returns what each agent
        recorded and each log's entries (verified)."""
        dirs = [self.container_dir(round_name, n, text) for n in range(self.args.containers)]
        names = [f"constle-fleet-{os.getpid()}-{round_name}-{n}" for n in range(len(dirs))]
        procs = [self.start_container(d, name) for d, name in zip(dirs, names)]
        try:
            self.wait_for(dirs, procs, "ready", 120)
            say(f"{round_name}: {len(dirs)} containers ready; go")
            for d in dirs:
                (d / "work" / "go").touch()
            self.wait_for(dirs, procs, "result.json", 150)
            if listen:
                self.a2a_once(names)
            for d in dirs:
                (d / "work" / "stop").touch()
            for p, d in zip(procs, dirs):
                if p.wait(timeout=60) != 0:
                    fail(f"{d.name}: constle run exited {p.returncode}: "
                         f"{(d / 'container.log').read_text()}")
        finally:
            for p, name in zip(procs, names):
                if p.poll() is None:
                    subprocess.run(["podman", "rm", "-f", name], capture_output=True)
        results = [json.loads((d / "work" / "result.json").read_text()) for d in dirs]
        logs = [self.verify_log(d) for d in dirs]
        self.table(round_name, results)
        return results, logs

    def wait_for(self, dirs, procs, name, seconds):
        deadline = time.time() + seconds
        while not all((d / "work" / name).exists() for d in dirs):
            for p, d in zip(procs, dirs):
                if p.poll() is not None:
                    fail(f"{d.name} ended (status {p.returncode}) before '{name}': "
                         f"{(d / 'container.log').read_text()}")
            if time.time() > deadline:
                fail(f"no '{name}' from every container within {seconds} s")
            time.sleep(0.05)

    def verify_log(self, where):
        files = sorted(str(f) for f in (where / "home" / "logs").glob("*.jsonl"))
        if not files:
            fail(f"{where.name}: no audit log")
        out = self.constle_cmd("audit", "verify", f"--agentfile={where}/agent.yaml", *files,
                               check=False)
        if out.returncode != 0:
            fail(f"{where.name}: its audit log does not verify: {out.stdout}{out.stderr}")
        return [json.loads(line) for f in files for line in Path(f).read_text().splitlines()]

    def a2a_once(self, names):
        envelope = self.capture_envelope()
        statuses = [None] * len(names)

        def one(i):
            out = subprocess.run(
                ["podman", "exec", names[i], "python3", self.args.driver, "post", str(envelope)],
                capture_output=True, text=True)
            statuses[i] = out.stdout.split(" ", 1)[0] if out.returncode == 0 else out.stderr
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(names))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        accepted = statuses.count("202")
        if accepted != 1 or any(s not in ("202", "409", "503") for s in statuses):
            fail(f"one envelope posted to every listener: answers {statuses} (wanted one 202)")
        self.envelope_answers = statuses

    def capture_envelope(self):
        """Has `constle a2a send` sign one envelope and captures it: the
        sender's peer is a loopback server here that keeps the body."""
        got = {}

        class Capture(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                got["body"] = self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

        server = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        sender = self.tmp / "sender.yaml"
        sender.write_text("\n".join([
            "name: sender", "identity:", f"  did: {self.sender_did}",
            "sandbox:", '  command: ["true"]', "  workdir: ./work",
            "  network:", "    egress: none",
            "a2a:", "  peers:", f"    - did: {self.did}",
            f"      url: http://127.0.0.1:{server.server_address[1]}",
        ]) + "\n")
        (self.tmp / "work").mkdir(exist_ok=True)
        self.constle_cmd("a2a", "send", f"--agentfile={sender}", "--to", self.did,
                         '{"text": "once across the fleet"}', check=False)
        server.shutdown()
        if "body" not in got:
            fail("constle a2a send sent no envelope")
        envelope = self.tmp / "envelope.json"
        envelope.write_bytes(got["body"])
        envelope.chmod(0o644)
        return envelope

    def table(self, round_name, results):
        print(f"\n{round_name}: calls per container and in all")
        print(f"{'container':<12}{'served':>9}{'refused':>9}{'calls':>7}{'seconds':>9}{'calls/s':>9}")
        everything = []
        for n, calls in enumerate(results):
            everything += calls
            print(row(f"c{n}", calls))
        print(row("all", everything))

    def check_cap(self, round_name, ledger, cap, price, results, logs):
        charged = [sum(Decimal(e["amount_usd"]) for e in log if e.get("event") == "spend_charged")
                   for log in logs]
        said = sum(1 for calls in results for c in calls if c["outcome"] == "ok")
        total = self.redis_total(round_name, ledger, cap, price)
        cap, price = Decimal(cap), Decimal(price)
        if total > cap:
            fail(f"Redis's day total {total} is past the cap {cap}")
        if total != sum(charged) or total != said * price or total != self.mcp.served * price:
            fail(f"Redis says {total}, the logs {sum(charged)} ({charged}), the agents "
                 f"{said} calls, the server {self.mcp.served} calls, at {price}")
        if cap - total >= price:
            fail(f"the race stopped at {total}, {price} or more short of the cap {cap}")
        refused = [e for log in logs for e in log if e.get("event") == "spend_refused"]
        if any(e.get("reason") != "cap" for e in refused):
            fail(f"a refusal not for the cap: {refused}")
        accepted = sum(1 for log in logs for e in log if e.get("event") == "a2a_accepted")
        inboxes = sum(len(json.loads((self.tmp / round_name / f"c{n}" / "work" / "inbox.json")
                                     .read_text())) for n in range(len(logs)))
        if accepted != 1 or inboxes != 1:
            fail(f"the envelope was accepted {accepted} times by the logs, "
                 f"{inboxes} by the inboxes (wanted once)")
        say(f"{round_name}: the day total {total} USD of {cap}, equal to the "
            f"{said} charged calls the logs record ({' + '.join(map(str, charged))}); "
            f"the envelope accepted once (answers {self.envelope_answers}); "
            f"{len(logs)} logs verify")

    def redis_total(self, round_name, ledger, cap, price):
        """Today's total in Redis, as `constle spend show --format json`
        on the host reads it."""
        host_file = self.tmp / round_name / "agent.yaml"
        host_file.write_text(self.agentfile(ledger, cap, price, False))
        shown = self.constle_cmd("spend", "show", "--format", "json", str(host_file)).stdout
        day = next(o for o in map(json.loads, shown.splitlines())
                   if o.get("type") == "total" and o.get("scope") == "all"
                   and o.get("period") == "day")
        return Decimal(day["usd"])

    def check_redis_fault(self, round_name, ledger, cap, price, logs):
        charged = [sum(Decimal(e["amount_usd"]) for e in log if e.get("event") == "spend_charged")
                   for log in logs]
        total = sum(charged)
        if total != self.mcp.served * Decimal(price) or total > Decimal(cap):
            fail(f"the logs charged {total} ({charged}), the server served "
                 f"{self.mcp.served} at {price}, cap {cap}")
        if self.mcp.served < self.mcp.fault_at:
            fail(f"the race ended at {self.mcp.served} calls, before Redis failed")
        woken = ""
        if self.redis.poll() is None:
            self.redis.send_signal(signal.SIGCONT)
            in_redis = self.redis_total(round_name, ledger, cap, price)
            if not total <= in_redis <= Decimal(cap):
                fail(f"Redis, woken, holds {in_redis}: wanted between the logs' {total} and {cap}")
            woken = f"; Redis, woken, holds {in_redis} USD"
        for n, log in enumerate(logs):
            refused = [e for e in log if e.get("event") == "spend_refused"]
            if not refused or any(e.get("reason") != "ledger_unavailable" for e in refused):
                fail(f"c{n}: wanted refusals for ledger_unavailable only, got {refused}")
        say(f"{round_name}: Redis sent {self.mcp.fault.name} at call {self.mcp.fault_at}: "
            f"{self.mcp.served} calls served and charged ({total} USD of {cap}), every later "
            f"priced call refused (ledger_unavailable){woken}; {len(logs)} logs verify")

    def close(self):
        if self.redis is not None and self.redis.poll() is None:
            self.redis.send_signal(signal.SIGCONT)
            self.redis.terminate()
        self.mcp.http.shutdown()
        shutil.rmtree(self.tmp, ignore_errors=True)


def span(calls):
    """Seconds from the first call's start to the last one's end."""
    return max(c["end"] for c in calls) - min(c["start"] for c in calls) if calls else 0


def rate(calls):
    return len(calls) / span(calls) if span(calls) else 0


def row(label, calls):
    served = sum(1 for c in calls if c["outcome"] == "ok")
    return (f"{label:<12}{served:>9}{len(calls) - served:>9}{len(calls):>7}"
            f"{span(calls):>9.2f}{rate(calls):>9.1f}")


def chown_tree(path):
    for where, dirs, files in os.walk(path):
        for name in [where, *(os.path.join(where, f) for f in dirs + files)]:
            os.chown(name, AGENT_UID, AGENT_UID)


def drive(args):
    fleet = Fleet(args)
    try:
        if args.bench:
            free = fleet.baseline(2000)
            priced = fleet.round("bench", "20.00", "0.01")
            print(f"\n{'calls per second, ' + str(args.containers) + ' containers':<40}{'calls/s':>9}")
            print(f"{'the tool free (no Redis): baseline':<40}{free:>9.1f}")
            print(f"{'priced, the caps in one Redis':<40}{priced:>9.1f}  "
                  f"{free / priced if priced else 0:.2f}x the baseline's time")
        else:
            fleet.round("race", "1.00", "0.07")
            fleet.round("redis-dies", "1.00", "0.07", 4, signal.SIGKILL)
            fleet.round("redis-stalls", "1.00", "0.07", 4, signal.SIGSTOP)
    finally:
        fleet.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    d = sub.add_parser("drive")
    d.add_argument("--constle", required=True)
    d.add_argument("--image", required=True)
    d.add_argument("--containers", type=int, default=4)
    d.add_argument("--threads", type=int, default=2)
    d.add_argument("--bench", action="store_true")
    d.add_argument("podman", nargs=argparse.REMAINDER, help="after --: podman run's flags")
    r = sub.add_parser("relay")
    r.add_argument("--socket", required=True)
    a = sub.add_parser("agent")
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--inbox", action="store_true")
    a.add_argument("--calls", type=int, default=0, help="per thread; 0: until refused")
    p = sub.add_parser("post")
    p.add_argument("envelope")
    args = parser.parse_args()
    if args.mode == "drive":
        args.driver = os.path.abspath(__file__)
        args.podman = [a for a in args.podman if a != "--"]
        drive(args)
    else:
        {"relay": relay, "agent": agent, "post": post}[args.mode](args)


if __name__ == "__main__":
    main()
