#!/usr/bin/env bash
# `constle run` benchmarks, each printed beside a baseline measured in the
# same run (the machine is small and shared: read the ratios, not the
# absolute numbers):
#
# 1. run overhead: `constle run` of an agent that runs `true`, with egress
#    none and egress restricted, against a bare `bwrap` of `true` with the
#    same namespaces; median and p90 of start-to-exit wall time, and where
#    constle's time goes (run_finished.phases_us in the audit log);
# 2. tunnel throughput: an agent streaming MiB through the egress proxy
#    (the proxy's door in the sandbox, the host bridge, Squid) to a simulated
#    host that echoes, against the same client connecting to that host
#    directly; with the CPU time each process spent;
# 3. CONNECT setup latency, p50 and p99, against a direct TCP connect:
#    through HTTPS_PROXY, and captured (the agent looks the name up in the
#    sandbox, gets a placeholder and connects to it with no proxy setting);
#    with -b, through HTTPS_PROXY with that build too;
# 4. lookups inside the sandbox (getaddrinfo of an allowed name and of a
#    refused one), p50 and p99;
# 5. the work directory's checks before and after a run, for work
#    directories of 0, 10 000 and 100 000 files: their time (from
#    run_finished.phases_us.workdir) and its share of the run's wall time;
# 6. MCP calls from the sandbox through the gate, a connection each, p50
#    and p99, against the same client calling the server directly; with
#    -b, through that build's gate too.
#
# The simulated host is a network namespace holding a documentation address
# (203.0.113.0/24) with a listener on port 443 (constle-testkit's
# `simulated_host` example); the proxy resolves api.groq.com to it through
# --hosts-file. No traffic goes anywhere but loopback and that namespace.
# Needs root (the namespace), bwrap, squid, python3 and iproute2.
#
# usage: bench/run.sh [-n RUNS] [-m MIB] [-r ROUNDS] [-k CONNECTS] [-b CONSTLE]
#   -n RUNS      runs of each variant for the run overhead (default 21)
#   -m MIB       MiB per throughput transfer (default 1024)
#   -r ROUNDS    throughput transfers of each kind, alternating (default 3)
#   -k CONNECTS  sequential CONNECTs for the latency, and MCP calls
#                (default 200)
#   -b CONSTLE   another constle binary (an earlier commit's build, say)
#                whose run overhead, CONNECT latency and MCP calls are measured
#                beside this one's
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"

usage() { sed -n '/^# usage:/,/^# *beside this one/s/^# \{0,1\}//p' "$0" >&2; }
die() {
  echo "bench/run.sh: $*" >&2
  exit 1
}

runs=21 mib=1024 rounds=3 connects=200 baseline=''
while getopts n:m:r:k:b:h opt; do
  case $opt in
    b) baseline=$OPTARG ;;
    n) runs=$OPTARG ;;
    m) mib=$OPTARG ;;
    r) rounds=$OPTARG ;;
    k) connects=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { usage; exit 2; }
for value in "$runs" "$mib" "$rounds" "$connects"; do
  [[ $value =~ ^[1-9][0-9]{0,6}$ ]] || die "'$value' is not a positive whole number"
done
[ -z "$baseline" ] || [ -x "$baseline" ] || die "-b $baseline is not an executable"
[ "$mib" -ge 1024 ] || echo "bench/run.sh: note: $mib MiB per transfer is under the 1 GiB the benchmark is meant to move" >&2

[ "$(id -u)" -eq 0 ] || die "needs root: the simulated host is a network namespace (try sudo)"
PATH=$PATH:/usr/sbin:/sbin
for tool in bwrap squid ip python3 setpriv; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (./scripts/setup.sh installs what is needed)"
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "bench: building (release)" >&2
cargo build --release --locked --quiet -p constle --bin constle >&2
cargo build --release --locked --quiet -p constle-testkit --example simulated_host >&2

# The temp directory holds CONSTLE_HOME, the agent's work directory, the
# Agentfiles and the hosts file. On the same file system as /tmp: the audit
# log's fsyncs cost what they would for a real run.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/constle-bench.XXXXXX")
host_pid='' host_in='' driver_pid=''
cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  if [ -n "$driver_pid" ]; then
    # Interrupted: the driver stops the run it is in (which takes its
    # sandbox and Squid with it) when told to.
    kill -TERM "$driver_pid" 2>/dev/null || true
    for _ in $(seq 150); do
      kill -0 "$driver_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$driver_pid" 2>/dev/null || true
    wait "$driver_pid" 2>/dev/null || true
  fi
  if [ -n "$host_in" ]; then
    # The simulated host tears its namespace down when its stdin closes.
    exec {host_in}>&-
  fi
  if [ -n "$host_pid" ]; then
    for _ in $(seq 100); do
      kill -0 "$host_pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$host_pid" 2>/dev/null; then
      echo "bench/run.sh: the simulated host did not stop; killing pid $host_pid" >&2
      kill "$host_pid" 2>/dev/null || true
    fi
    wait "$host_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# The simulated api.groq.com: up until we close its stdin.
coproc "$root/target/release/examples/simulated_host"
host_pid=$COPROC_PID
host_in=${COPROC[1]}
address=''
read -r -t 30 address <&"${COPROC[0]}" || true
[[ $address =~ ^203\.0\.113\.[0-9]{1,3}$ ]] ||
  die "the simulated host did not start (it printed '${address}'; see its error above)"
echo "bench: simulated host $address (pid $host_pid)" >&2

# In the background, so that a signal to this script is handled at once
# (bash runs traps only between foreground commands).
python3 "$root/bench/measure.py" \
  --constle "$root/target/release/constle" \
  --client "$root/bench/tunnel_client.py" \
  --address "$address" --host-pid "$host_pid" --dir "$tmp" \
  --runs "$runs" --mib "$mib" --rounds "$rounds" --connects "$connects" \
  ${baseline:+--baseline-constle "$(realpath "$baseline")"} &
driver_pid=$!
status=0
wait "$driver_pid" || status=$?
driver_pid=''
exit "$status"
