"""The measurements of bench/run.sh, and the table it prints.

run.sh builds the binaries, makes the temp directory and starts the
simulated host; this program does the rest, given their paths and the
host's address. Progress goes to stderr, the table to stdout. Any failure
ends it with a message saying what failed and exit status 1.

Every figure is a median (or a percentile) of repeated runs, printed beside
a baseline measured in the same run, interleaved with it where it can be:
the machine is small and shared, so absolute numbers mean little.

The definitions are those of every benchmark (constle_testkit::bench for
the Rust ones, README.md, Benchmarks):
- percentiles are nearest-rank: the p-th percentile of n values is the
  ceil(p/100 * n)-th smallest (the smallest for p = 0); the median is the
  50th percentile (for an even n the lower middle value); with fewer than
  100 values the 99th percentile is the maximum;
- CPU time is the kernel scheduler's run time, user + system, read one way
  per scope: a run's whole process tree from a cgroup v2 group made for it
  (cpu.stat usage_usec; without cgroup v2, getrusage RUSAGE_CHILDREN), each
  process of a tree and the simulated host from /proc/<pid>/stat
  (utime + stime, in clock ticks).
"""

import argparse
import http.server
import json
import math
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time

HOST_NAME = "api.groq.com"
WARMUP_RUNS = 2
CLK_TCK = os.sysconf("SC_CLK_TCK")
# A bare bwrap with the namespaces constle's sandbox has (network, pid, ipc,
# uts, cgroup, mount, user), the same agent command, and a minimal root.
BARE_BWRAP = [
    "bwrap", "--unshare-all", "--die-with-parent",
    "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
    "--proc", "/proc", "--dev", "/dev",
    "true",
]


class Failed(Exception):
    pass


class Interrupted(BaseException):
    """A signal asked us to stop: whatever is running is stopped on the way out."""


def on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def progress(message):
    print(f"bench: {message}", file=sys.stderr, flush=True)


def percentile(values, p):
    """The nearest-rank p-th percentile (see the top of this file)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def median(values):
    """The 50th percentile."""
    return percentile(values, 50)


def tail(text, lines=15):
    return "\n".join(("    " + l) for l in text.strip().splitlines()[-lines:])


def result_line(stdout, what):
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise Failed(f"{what}: the client printed no RESULT line; its stdout was:\n{tail(stdout)}")


# --- CPU accounting from /proc ------------------------------------------------

def read_stat(pid):
    """(ppid, comm, utime + stime in ticks) of a process, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), comm, int(fields[11]) + int(fields[12])


def classify(comm, is_root):
    if comm == "constle" and is_root:
        return "bridge + audit (constle run)"
    if comm == "constle":
        return "init (sandbox-init, in the sandbox)"
    if comm.startswith("squid"):
        return "squid"
    if comm.startswith("python"):
        return "client (python3)"
    return comm


class TreeSampler:
    """Polls the process tree under `root`, keeping the last CPU time seen per
    process. The client lingers a moment after its measurement, so the last
    sample is taken after the transfer."""

    def __init__(self, root, interval=0.05):
        self.root = root
        self.interval = interval
        self.last = {}  # pid -> (class, ticks)

    def sample(self):
        table = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                stat = read_stat(int(name))
                if stat:
                    table[int(name)] = stat
        children = {}
        for pid, (ppid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        todo = [self.root]
        while todo:
            pid = todo.pop()
            if pid in table:
                _, comm, ticks = table[pid]
                self.last[pid] = (classify(comm, pid == self.root), ticks)
            todo.extend(children.get(pid, []))

    def by_class(self):
        totals = {}
        for cls, ticks in self.last.values():
            totals[cls] = totals.get(cls, 0) + ticks / CLK_TCK
        return totals


def run_sampled(cmd, env, cwd, timeout, what):
    """Runs `cmd`, sampling the CPU time of every process under it. Returns
    (stdout, CPU seconds by component)."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = [], []
    readers = [threading.Thread(target=lambda s=s, b=b: b.append(s.read()), daemon=True)
               for s, b in ((proc.stdout, out), (proc.stderr, err))]
    for r in readers:
        r.start()
    sampler = TreeSampler(proc.pid)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            sampler.sample()
            if time.monotonic() > deadline:
                raise Failed(f"{what}: no result after {timeout:.0f} s; stopped it")
            time.sleep(sampler.interval)
    except BaseException:
        stop(proc)
        raise
    for r in readers:
        r.join(10)
    stdout, stderr = "".join(out), "".join(err)
    if proc.returncode != 0:
        raise Failed(f"{what}: exited with status {proc.returncode}; stderr:\n{tail(stderr)}"
                     + (f"\n  stdout:\n{tail(stdout)}" if stdout.strip() else ""))
    return stdout, sampler.by_class()


def stop(proc):
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)  # constle stops the agent and Squid on SIGTERM
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()  # Squid and the sandbox die with it (PDEATHSIG)
        proc.wait()


def children_cpu():
    """CPU seconds (user + system) of every child process reaped so far,
    and of the children they reaped."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cgroup2_mount():
    """Where the cgroup v2 hierarchy is mounted, if it is."""
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return pathlib.Path(fields[1])
    return None


CGROUP2 = cgroup2_mount()


def remove_group(group):
    for _ in range(2000):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.005)
    raise Failed(f"{group} still holds processes of a finished run")


def run_timed(cmd, env, cwd, timeout, what):
    """As run_plain; returns (wall seconds, CPU seconds of the whole tree).

    The tree's CPU comes from a cgroup v2 group made for the run, which
    counts every process of it however it ends and whoever reaps it (a
    sandbox's processes are reaped inside its own PID namespace, and
    getrusage misses some of them). Without cgroup v2, getrusage."""
    if CGROUP2 is None:
        before = children_cpu()
        _, wall = run_plain(cmd, env, cwd, timeout, what)
        return wall, children_cpu() - before
    group = CGROUP2 / f"constle-bench-{os.getpid()}"
    group.mkdir()
    try:
        enter = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(group)]
        _, wall = run_plain(enter + cmd, env, cwd, timeout, what)
        # Processes of the tree may still be on their way out (the
        # sandbox's, killed as its PID namespace ends): wait for them, so
        # that their CPU is counted and the group can go.
        deadline = time.monotonic() + 10
        while (group / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.005)
        stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
        return wall, int(stat["usage_usec"]) / 1e6
    finally:
        remove_group(group)


def run_plain(cmd, env, cwd, timeout, what):
    """Runs `cmd` to completion; returns (stdout, wall seconds). Stopped with
    SIGTERM, not SIGKILL, on a timeout or a signal to us: a killed
    `constle run` cannot remove its temp directories."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        raise Failed(f"{what}: did not finish within {timeout:.0f} s; stopped it") from None
    except BaseException:
        stop(proc)
        raise
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise Failed(f"{what}: exited with status {proc.returncode}; stderr:\n{tail(stderr)}")
    return stdout, wall


def process_ticks(pid):
    stat = read_stat(pid)
    if stat is None:
        raise Failed(f"the simulated host (pid {pid}) is gone")
    return stat[2] / CLK_TCK


# --- the benchmark ------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.dir = pathlib.Path(args.dir)
        self.home = self.dir / "home"
        self.work = self.dir / "work"
        self.work.mkdir()
        shutil.copy(args.client, self.work / "tunnel_client.py")
        self.client_on_host = str(self.work / "tunnel_client.py")
        self.hosts = self.dir / "hosts"
        self.hosts.write_text(f"{args.address} {HOST_NAME}\n")
        self.env = dict(os.environ, CONSTLE_HOME=str(self.home), NO_COLOR="1")
        for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
            self.env.pop(name, None)  # the direct client must not use any

    def agentfile(self, name, command, restricted):
        network = (f"    egress: restricted\n    allowed_hosts: [{HOST_NAME}]\n" if restricted
                   else "    egress: none\n")
        path = self.dir / f"{name}.yaml"
        path.write_text(
            f"name: {name}\nsandbox:\n  command: {json.dumps(command)}\n  workdir: ./work\n"
            f"  network:\n{network}"
        )
        return path

    def constle_cmd(self, agentfile, restricted, constle=None):
        hosts = ["--hosts-file", str(self.hosts)] if restricted else []
        return [constle or self.args.constle, "run", *hosts, str(agentfile)]

    def client_agent(self, name, *client_args, linger=0.0, how="--via-proxy", constle=None):
        command = ["python3", "tunnel_client.py", how, "--host", HOST_NAME]
        if linger:
            command += ["--linger", str(linger)]
        return self.constle_cmd(self.agentfile(name, command + list(client_args), True), True, constle)

    def client_direct(self, *client_args, linger=0.0):
        command = [sys.executable, self.client_on_host, "--direct", self.args.address]
        if linger:
            command += ["--linger", str(linger)]
        return command + list(client_args)

    def run_finished(self, agent):
        events = []
        for path in sorted((self.home / "logs").glob(f"{agent}-*.jsonl")):
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                if entry.get("event") == "run_finished":
                    events.append(entry)
        return events

    # 0. Does the path work at all?
    def preflight(self):
        progress(f"preflight: one connection directly and one through the proxy to {HOST_NAME}")
        out, _ = run_plain(self.client_direct("probe"), self.env, self.dir, 30, "direct probe")
        direct = result_line(out, "direct probe")["banner"]
        out, _ = run_plain(self.client_agent("bench-probe", "probe"), self.env, self.dir, 60,
                           "constle run of the probe agent")
        proxied = result_line(out, "proxied probe")["banner"]
        if direct != proxied:
            raise Failed(f"the proxy reached {proxied!r}, the direct path {direct!r}: not the same host")

    # 1. Run overhead
    def overhead(self):
        n = self.args.runs
        variants = {
            "bwrap": BARE_BWRAP,
            "none": self.constle_cmd(self.agentfile("bench-none", ["true"], False), False),
            "restricted": self.constle_cmd(self.agentfile("bench-restricted", ["true"], True), True),
        }
        if self.args.baseline_constle:
            agentfile = self.agentfile("bench-baseline", ["true"], False)
            variants["baseline"] = [self.args.baseline_constle, "run", str(agentfile)]
            agentfile = self.agentfile("bench-baseline-restricted", ["true"], True)
            variants["baseline_restricted"] = [
                self.args.baseline_constle, "run", "--hosts-file", str(self.hosts), str(agentfile)]
        walls, cpus = self.interleaved(variants, "run overhead", 30)
        phases = {}
        for name, agent in (("none", "bench-none"), ("restricted", "bench-restricted")):
            finished = self.run_finished(agent)
            if len(finished) != WARMUP_RUNS + n:
                raise Failed(f"expected {WARMUP_RUNS + n} run_finished events for {agent}, found {len(finished)}")
            finished = finished[WARMUP_RUNS:]
            bad = [e for e in finished if e.get("exit_status") != 0 or "phases_us" not in e]
            if bad:
                raise Failed(f"{agent}: a run_finished without phases or with a failure: {bad[0]}")
            phases[name] = finished
        return walls, cpus, phases

    def interleaved(self, variants, what, timeout):
        """Each command of `variants` run --runs times after the warm-ups,
        their order rotated so that none always runs right after another:
        the wall and CPU seconds of each run, by variant."""
        names = list(variants)
        walls = {name: [] for name in names}
        cpus = {name: [] for name in names}
        n = self.args.runs
        for i in range(WARMUP_RUNS + n):
            if i == WARMUP_RUNS or (i > WARMUP_RUNS and (i - WARMUP_RUNS) % 5 == 0):
                progress(f"{what}: {i - WARMUP_RUNS}/{n}")
            turn = i % len(names)
            for name in names[turn:] + names[:turn]:
                wall, cpu = run_timed(variants[name], self.env, self.dir, timeout, f"{what}, {name}")
                if i >= WARMUP_RUNS:
                    walls[name].append(wall)
                    cpus[name].append(cpu)
        return walls, cpus

    # 4. The work directory's checks before and after a run
    def workdir_checks(self):
        sizes = [0, 10_000, 100_000]
        agents = {}
        for files in sizes:
            work = self.dir / f"work-{files}"
            progress(f"work directory checks: making {files} files")
            make_tree(work, files)
            path = self.dir / f"bench-work-{files}.yaml"
            path.write_text(f"name: bench-work-{files}\nsandbox:\n  command: [\"true\"]\n"
                            f"  workdir: ./work-{files}\n  network:\n    egress: none\n")
            agents[files] = [self.args.constle, "run", str(path)]
        walls, cpus = self.interleaved(agents, "work directory checks", 120)
        n = self.args.runs
        checks = {}
        for files in sizes:
            finished = self.run_finished(f"bench-work-{files}")[WARMUP_RUNS:]
            bad = [e for e in finished if e.get("exit_status") != 0 or "workdir" not in e.get("phases_us", {})]
            if len(finished) != n or bad:
                raise Failed(f"bench-work-{files}: {len(finished)} runs finished, {len(bad)} without phases")
            checks[files] = [e["phases_us"]["workdir"] / 1e6 for e in finished]
        return walls, cpus, checks

    # 2. Tunnel throughput
    def throughput(self):
        mib, rounds = self.args.mib, self.args.rounds
        timeout = 60 + mib / 5
        rates = {"direct": [], "proxy": []}
        seconds = {"direct": 0.0, "proxy": 0.0}
        cpu = {"direct": {}, "proxy": {}}
        machine = {"direct": {}, "proxy": {}}

        def once(kind):
            echo_before = process_ticks(self.args.host_pid)
            if kind == "direct":
                out, used = run_sampled(self.client_direct("throughput", str(mib), linger=0.3),
                                        self.env, self.dir, timeout, "direct throughput")
            else:
                out, used = run_sampled(self.client_agent("bench-tunnel", "throughput", str(mib), linger=0.3),
                                        self.env, self.dir, timeout, "constle run of the throughput agent")
            used["echo host (simulated_host)"] = process_ticks(self.args.host_pid) - echo_before
            result = result_line(out, f"{kind} throughput")
            rates[kind].append(result["mib_per_s"])
            for field, ticks in (result.get("machine_cpu_ticks") or {}).items():
                machine[kind][field] = machine[kind].get(field, 0) + ticks
            seconds[kind] += result["seconds"]
            for cls, s in used.items():
                cpu[kind][cls] = cpu[kind].get(cls, 0.0) + s

        for r in range(rounds):
            order = ["direct", "proxy"] if r % 2 == 0 else ["proxy", "direct"]
            for kind in order:
                progress(f"throughput round {r + 1}/{rounds}: {mib} MiB {kind}")
                once(kind)
        return rates, seconds, cpu, machine

    # 3. CONNECT setup latency
    def latency(self):
        k = str(self.args.connects)
        timeout = 60 + self.args.connects * 0.5
        progress(f"CONNECT latency: {k} connections directly")
        out, _ = run_plain(self.client_direct("latency", k), self.env, self.dir, timeout, "direct latency")
        direct = result_line(out, "direct latency")["samples_us"]
        builds = {"proxy": None}
        if self.args.baseline_constle:
            builds["baseline"] = self.args.baseline_constle
        proxied = {build: [] for build in builds}
        # Alternating (this build, -b, -b, this build), so that neither
        # always runs on a machine the other has warmed.
        order = list(builds) + list(reversed(builds))
        for build in order:
            progress(f"CONNECT latency: {k} CONNECTs through the proxy ({build})")
            out, _ = run_plain(self.client_agent(f"bench-connect-{build}", "latency", k,
                                                 constle=builds[build]),
                               self.env, self.dir, timeout, f"constle run of the latency agent ({build})")
            proxied[build] += result_line(out, "proxied latency")["samples_us"]
        proxy, baseline = proxied["proxy"], proxied.get("baseline")
        progress(f"CONNECT latency: {k} captured connections (the name's placeholder, no proxy setting)")
        out, _ = run_plain(self.client_agent("bench-captured", "latency", k, how="--captured"), self.env,
                           self.dir, timeout, "constle run of the captured latency agent")
        captured = result_line(out, "captured latency")["samples_us"]
        allowed = sum(1 for agent in ("bench-connect-proxy", "bench-captured")
                      for line in self.home.glob(f"logs/{agent}-*.jsonl")
                      for l in line.read_text().splitlines() if '"network_allowed"' in l)
        return direct, proxy, captured, allowed, baseline

    # 4. Name lookups inside the sandbox
    def lookups(self):
        k = str(self.args.connects)
        progress(f"lookups: {k} of an allowed name, {k} of a refused one, in the sandbox")
        out, _ = run_plain(self.client_agent("bench-lookup", "lookup", k, how="--captured"), self.env,
                           self.dir, 60 + self.args.connects, "constle run of the lookup agent")
        found = result_line(out, "lookups")
        return found["allowed_us"], found["refused_us"]


class McpEcho(http.server.BaseHTTPRequestHandler):
    """An MCP server that does no work: every POST is answered with a
    `tools/call` result, on a kept-alive connection."""
    protocol_version = "HTTP/1.1"
    # Headers and body are two writes: without this, Nagle's algorithm and
    # the gate's delayed ACK would hold every answer back 40 ms.
    disable_nagle_algorithm = True

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        body = json.dumps({"jsonrpc": "2.0", "id": request.get("id"),
                           "result": {"content": [{"type": "text", "text": "ok"}]}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


def gate_agentfile(bench, name, server):
    """An agent making MCP calls through the gate of `server`, with egress none."""
    path = bench.dir / f"{name}.yaml"
    command = ["sh", "-c", f'python3 tunnel_client.py --mcp "$CONSTLE_MCP_BENCH_URL" calls {bench.args.connects}']
    path.write_text(
        f"name: {name}\nsandbox:\n  command: {json.dumps(command)}\n  workdir: ./work\n"
        f"  network:\n    egress: none\nmcp:\n  servers:\n    - id: bench\n"
        f"      url: {server}\n      tools: [echo]\n"
    )
    return path


def gate_calls(bench):
    """6. MCP calls: directly from the host to a server that does no work,
    and from the sandbox through the gate (with -b, that build's too)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), McpEcho)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
    k, timeout = str(bench.args.connects), 60 + bench.args.connects * 0.5
    try:
        progress(f"MCP calls: {k} directly")
        out, _ = run_plain([sys.executable, bench.client_on_host, "--mcp", url, "calls", k],
                           bench.env, bench.dir, timeout, "direct MCP calls")
        samples = {"direct": result_line(out, "direct MCP calls")["samples_us"]}
        builds = {"gate": bench.args.constle}
        if bench.args.baseline_constle:
            builds["baseline"] = bench.args.baseline_constle
        for build in list(builds) + list(reversed(builds)):
            progress(f"MCP calls: {k} through the gate ({build})")
            agentfile = gate_agentfile(bench, f"bench-gate-{build}", url)
            out, _ = run_plain([builds[build], "run", str(agentfile)], bench.env, bench.dir, timeout,
                               f"constle run of the MCP agent ({build})")
            samples.setdefault(build, []).extend(result_line(out, f"MCP calls ({build})")["samples_us"])
    finally:
        server.shutdown()
    return samples


def print_gate_table(args, samples):
    p = print
    p()
    p(f"6. MCP calls: {args.connects} sequential `tools/call` requests after one warm-up, each on a")
    p("   connection of its own (as urllib makes them), to a server that does no work; from")
    p("   starting the connect to the whole answer read. The direct row is context, not a")
    p("   baseline: there the server starts a thread per connection, which the gate's kept-alive")
    p("   connection to it spares the gated rows. Compare the gate with the -b build's.")
    p(f"   {'':44} {'p50':>10} {'p99':>10}")
    rows = (("direct", "direct, host to server"), ("gate", "through the gate, from the sandbox"),
            ("baseline", "the same with the -b build"))
    for build, label in rows:
        if build in samples:
            x50, x99 = percentile(samples[build], 50) / 1e6, percentile(samples[build], 99) / 1e6
            p(f"   {label:<44} {ms(x50, 3)} {ms(x99, 3)}")
    if "baseline" in samples:
        g50, b50 = (percentile(samples[b], 50) / 1e6 for b in ("gate", "baseline"))
        p(f"   this build's p50 is {g50 / b50:.2f}x the -b build's ({(g50 - b50) * 1000:+.2f} ms)")


def make_tree(root, files):
    """`files` small files, a hundred to a directory, as a project has."""
    root.mkdir()
    for i in range(files):
        directory = root / f"d{i // 100:04}"
        if i % 100 == 0:
            directory.mkdir()
        (directory / f"f{i % 100:02}.txt").write_text("x\n")


# --- the table ------------------------------------------------------------------

def ms(seconds, digits=1):
    return f"{seconds * 1000:7.{digits}f} ms"


def print_workdir_table(args, walls, cpus, checks):
    p = print
    p()
    p(f"5. The work directory's checks: agent `true`, egress none, a work directory of N small files")
    p(f"   ({args.runs} runs each, interleaved, after {WARMUP_RUNS} warm-ups). checks = run_finished.phases_us.workdir")
    p("   (the walk before the sandbox starts and the one after it is gone, in constle's own clock);")
    p("   share = checks / the run's wall time; CPU as in 1.")
    p(f"   {'':28} {'wall':>10} {'CPU':>10} {'checks':>10} {'share':>7}   wall vs empty")
    base = median(walls[0])
    base_cpu = median(cpus[0])
    for files in sorted(walls):
        wall, cpu = median(walls[files]), median(cpus[files])
        check = median(checks[files])
        aim = ""
        if files == 10_000:
            aim = f"   aim < 5 %: {'met' if check / wall < 0.05 else 'NOT MET'}"
        p(f"   {f'{files} files':<28} {ms(wall)} {ms(cpu)} {ms(check)} {check / wall * 100:6.1f}%"
          f"   {wall / base:4.2f}x, CPU {cpu / base_cpu:4.2f}x{aim}")


def print_table(args, walls, cpus, phases, rates, seconds, cpu, machine, latencies, lookups):
    direct_lat, proxy_lat, captured_lat, allowed, baseline_lat = latencies
    p = print
    p()
    p(f"Constle benchmarks: {os.cpu_count()} CPUs, shared. Medians and percentiles of repeated runs;")
    p("ratios are against baselines measured in this same run.")
    p()
    p(f"1. Run overhead: agent `true`, wall time from start to exit "
      f"({args.runs} runs each, interleaved, after {WARMUP_RUNS} warm-ups)")
    p("   CPU = user + system seconds of the whole process tree (constle, launcher, bwrap, the")
    p(f"   sandbox, Squid), from {'a cgroup v2 group per run' if CGROUP2 else 'getrusage'}; "
      "the clock and the CPU are medians of the same runs.")
    base = median(walls["bwrap"])
    p(f"   {'':44} {'median':>10} {'p90':>10} {'CPU':>10}   vs bare bwrap (median)")
    rows = [("bare bwrap, same namespaces (baseline)", "bwrap"),
            ("constle run, egress none", "none"),
            ("constle run, egress restricted (1 host)", "restricted")]
    if "baseline" in walls:
        name = pathlib.Path(args.baseline_constle).name
        rows.append((f"baseline constle ({name}), egress none", "baseline"))
        rows.append((f"baseline constle ({name}), restricted", "baseline_restricted"))
    for label, key in rows:
        med, p90 = median(walls[key]), percentile(walls[key], 90)
        extra = ""
        if key != "bwrap":
            extra = f"   {med / base:5.1f}x, +{(med - base) * 1000:.1f} ms"
            extra += f"   aim < 100 ms: {'met' if med < 0.1 else 'NOT MET'}"
        p(f"   {label:<44} {ms(med)} {ms(p90)} {ms(median(cpus[key]))}{extra}")
    if "baseline" in walls:
        old, new = median(walls["baseline"]), median(walls["none"])
        old_cpu, new_cpu = median(cpus["baseline"]), median(cpus["none"])
        p(f"   this build against the baseline, egress none: {new / old:4.2f}x by the clock "
          f"({(new - old) * 1000:+.1f} ms), {new_cpu / old_cpu:4.2f}x by CPU ({(new_cpu - old_cpu) * 1000:+.1f} ms)")
    builds = [("this build", "restricted", "none")]
    if "baseline" in walls:
        builds.append(("the baseline", "baseline_restricted", "baseline"))
    for label, egress, none in builds:
        ratio = median(walls[egress]) / median(walls[none])
        cpu_ratio = median(cpus[egress]) / median(cpus[none])
        p(f"   {label}, egress restricted against none: {ratio:4.2f}x by the clock, "
          f"{cpu_ratio:4.2f}x by CPU   aim <= 1.3x by the clock: {'met' if ratio <= 1.3 else 'NOT MET'}")
    p()
    p("   Where constle's time goes, medians: the phases of run_finished.phases_us (audit log); the")
    p("   proxy starts beside the others, so proxy_start overlaps them and is not part of the sum;")
    p("   log+setup = duration_ms - the other phases (audit log start, the run_started record, the")
    p("   gates, the stdio servers and the A2A link started); process = wall -")
    p("   duration_ms (exec, Agentfile, summary, the run_finished record, exit). duration_ms is in whole")
    p("   ms, so these two are good to about 1 ms.")
    p(f"   {'':44} {'proxy_start':>11} {'workdir':>10} {'sandbox':>10} {'teardown':>10} {'log+setup':>10} {'process':>10}")
    phase_names = ("proxy_start", "workdir", "sandbox", "teardown")
    for label, key in rows[1:3]:
        events = phases[key]
        med = {ph: median(e["phases_us"][ph] for e in events) / 1e6 for ph in phase_names}
        in_run = median(
            e["duration_ms"] / 1e3 - sum(e["phases_us"][ph] for ph in phase_names[1:]) / 1e6 for e in events)
        process = median(w - e["duration_ms"] / 1e3 for w, e in zip(walls[key], events))
        p(f"   {label:<44} {ms(med['proxy_start']):>11} {ms(med['workdir'])} {ms(med['sandbox'])} "
          f"{ms(med['teardown'])} {ms(in_run)} {ms(process)}")
    p()
    p(f"2. Tunnel throughput: {args.mib} MiB sent up and echoed back over one connection, "
      f"median of {args.rounds} rounds (alternating).")
    p("   MiB/s = MiB of payload / seconds from the first byte sent to the last echoed byte read;")
    p("   each payload byte crosses the path twice (up and back), so the path carries 2x that.")
    d, x = median(rates["direct"]), median(rates["proxy"])
    fmt = lambda vs: ", ".join(f"{v:.0f}" for v in vs)
    p(f"   {'direct: host -> namespace listener (baseline)':<52} {d:7.0f} MiB/s   rounds: {fmt(rates['direct'])}")
    p(f"   {'proxied: sandbox -> door -> bridge -> Squid -> host':<52} {x:7.0f} MiB/s   rounds: {fmt(rates['proxy'])}")
    p(f"   {'proxied / direct':<52} {x / d * 100:7.0f} %       aim >= 80 %: {'met' if x / d >= 0.8 else 'NOT MET'}")
    p()
    gib = args.mib * args.rounds / 1024
    p(f"   CPU seconds per GiB of payload, by process (from /proc, 10 ms ticks; % = of one core")
    p("   during the transfers; kernel time is charged to whichever process was running):")
    classes = ["client (python3)", "init (sandbox-init, in the sandbox)", "bridge + audit (constle run)",
               "squid", "echo host (simulated_host)"]
    classes += sorted((set(cpu["direct"]) | set(cpu["proxy"])) - set(classes))
    p(f"   {'':44} {'direct':>16} {'proxied':>16}")
    for cls in classes + ["total"]:
        cells = []
        for kind in ("direct", "proxy"):
            used = sum(cpu[kind].values()) if cls == "total" else cpu[kind].get(cls)
            if used is None:
                cells.append(f"{'-':>16}")
            else:
                cells.append(f"{used / gib:6.2f} s {used / seconds[kind] * 100:5.0f}%")
        p(f"   {cls:<44} {cells[0]:>16} {cells[1]:>16}")
    if machine["direct"] and machine["proxy"]:
        p()
        p(f"   The whole machine during the transfers (/proc/stat), share of all {os.cpu_count()} CPUs:")
        groups = (("user", ("user", "nice")), ("system", ("system",)), ("irq+softirq", ("irq", "softirq")),
                  ("steal", ("steal",)), ("idle", ("idle", "iowait")))
        p("   " + " " * 44 + "".join(f"{g:>12}" for g, _ in groups) + "  not ours")
        for label, kind in (("direct", "direct"), ("proxied", "proxy")):
            total = sum(machine[kind].values()) or 1
            cells = "".join(f"{sum(machine[kind][f] for f in fields) / total * 100:11.0f}%"
                            for _, fields in groups)
            # user + system time beyond what the processes above used: other
            # load on the machine (and this driver's sampling, about 1%).
            process_ticks_all = (machine[kind]["user"] + machine[kind]["nice"] + machine[kind]["system"])
            others = max(0.0, process_ticks_all / CLK_TCK - sum(cpu[kind].values()))
            p(f"   {label:<44}{cells}{others * CLK_TCK / total * 100:9.0f}%")
        p("   (not ours: user+system time no process of the benchmark used; if it is more than a few %,")
        p("   something else was running and the absolute figures above are low, the ratios less so.)")
    p()
    p(f"3. CONNECT setup latency: {args.connects} sequential connections after one warm-up, from starting "
      f"the TCP connect")
    p("   to the banner line read (through the proxy: CONNECT and its 200 reply included)")
    p(f"   {'':44} {'p50':>10} {'p99':>10}   vs direct (p50, p99)")
    dp50, dp99 = percentile(direct_lat, 50) / 1e6, percentile(direct_lat, 99) / 1e6
    xp50, xp99 = percentile(proxy_lat, 50) / 1e6, percentile(proxy_lat, 99) / 1e6
    p(f"   {'direct TCP connect + banner (baseline)':<44} {ms(dp50, 3)} {ms(dp99, 3)}")
    p(f"   {'CONNECT through the proxy, from the sandbox':<44} {ms(xp50, 3)} {ms(xp99, 3)}"
      f"   {xp50 / dp50:5.1f}x, {xp99 / dp99:5.1f}x  (+{(xp50 - dp50) * 1000:.2f} ms at p50)")
    cp50, cp99 = percentile(captured_lat, 50) / 1e6, percentile(captured_lat, 99) / 1e6
    p(f"   {'captured: the placeholder, no proxy setting':<44} {ms(cp50, 3)} {ms(cp99, 3)}"
      f"   {cp50 / dp50:5.1f}x, {cp99 / dp99:5.1f}x  (+{(cp50 - dp50) * 1000:.2f} ms at p50;"
      f" {cp50 / xp50:.2f}x the proxied p50)")
    if baseline_lat:
        bp50, bp99 = percentile(baseline_lat, 50) / 1e6, percentile(baseline_lat, 99) / 1e6
        p(f"   {'the same with the -b build':<44} {ms(bp50, 3)} {ms(bp99, 3)}"
          f"   {bp50 / dp50:5.1f}x, {bp99 / dp99:5.1f}x  (this build's p50 is {xp50 / bp50:.2f}x its,"
          f" {(xp50 - bp50) * 1000:+.2f} ms)")
    p(f"   audit log: {allowed} network_allowed events for {3 * (args.connects + 1)} CONNECTs")
    p()
    found, refused = lookups
    p(f"4. lookups in the sandbox (getaddrinfo, sequential: {len(found)} of an allowed name, {len(refused)}"
      " of a refused one, whose A and AAAA queries stay inside the refusals' burst)")
    p(f"   {'':44} {'p50':>10} {'p99':>10}")
    for label, samples in (("allowed name (its placeholder)", found), ("refused name (NXDOMAIN)", refused)):
        p(f"   {label:<44} {ms(percentile(samples, 50) / 1e6, 3)} {ms(percentile(samples, 99) / 1e6, 3)}")


def main():
    parser = argparse.ArgumentParser(description="the measurements of bench/run.sh")
    parser.add_argument("--constle", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--address", required=True, help="the simulated host's IPv4 address")
    parser.add_argument("--host-pid", type=int, required=True, help="the simulated host's pid")
    parser.add_argument("--dir", required=True, help="an empty temp directory to work in")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connects", type=int, default=200)
    parser.add_argument("--baseline-constle", help="another constle binary (say, an earlier commit's) "
                        "whose run overhead and CONNECT latency are measured beside this one's")
    args = parser.parse_args()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    bench = Bench(args)
    try:
        bench.preflight()
        walls, cpus, phases = bench.overhead()
        workdir = bench.workdir_checks()
        latencies = bench.latency()
        lookups = bench.lookups()
        gate = gate_calls(bench)
        rates, seconds, cpu, machine = bench.throughput()
    except Failed as err:
        print(f"bench: FAILED: {err}", file=sys.stderr)
        return 1
    except Interrupted as signame:
        print(f"bench: stopped by {signame}", file=sys.stderr)
        return 130
    print_table(args, walls, cpus, phases, rates, seconds, cpu, machine, latencies, lookups)
    print_workdir_table(args, *workdir)
    print_gate_table(args, gate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
