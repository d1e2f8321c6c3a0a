#!/usr/bin/env bash
# The MCP gate's added cost, as a table: an ungated tools/call sent by the
# same client at fixed concurrency to a minimal MCP server directly, through
# the gate on TCP and through the gate on a Unix socket (as in production),
# in alternating rounds; requests/s, p50 and p99 per path, and per round
# against the direct round of the same round: throughput %, +p50, +p99,
# with the issue's aims (+0.2 ms p50, +1 ms p99, >= 80% throughput) and
# the CPU time per call of client, gate and server. Loopback only; the
# machine is small and shared, so read the ratios, not the absolute numbers.
# A JSON line with the same numbers ends the output.
# The source, and what is measured how: crates/constle-mcp-gate/benches/gate.rs.
#
# usage: bench/gate.sh [-r ROUNDS] [-d SECONDS] [-c CONCURRENCY] [-w SECONDS]
#                      [--multi-thread] [--relays] [--server-delay-us US]
#   -r ROUNDS        measured rounds of each path (default 5)
#   -d SECONDS       length of one round of one path (default 3)
#   -c CONCURRENCY   calls in flight, one per keep-alive connection (default 8)
#   -w SECONDS       warm-up of each path (default 1)
#   --multi-thread   also a gate on a two-worker multi-thread runtime
#   --relays         also two policy-free relays (axum+reqwest, bare hyper):
#                    what any HTTP hop costs, the floor under the gate
#   --server-delay-us US  the server waits US µs before answering (no CPU)
#
# The pure policy step alone (inspect, filter_server_message,
# filter_tools_list) is a criterion bench:
#   cargo bench --locked -p constle-mcp-gate --bench policy
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h | --help)
    sed -n '/^# usage:/,/^# *--server-delay-us/s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac
exec cargo bench --locked --quiet -p constle-mcp-gate --bench gate -- "$@"
