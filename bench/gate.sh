#!/usr/bin/env bash
# The MCP gate's added cost, as tables: an ungated tools/call sent by the
# same client at fixed concurrency to a minimal MCP server directly, through
# the gate on TCP, through the gate on a Unix socket, and through the
# sandbox's relay and the gate's Unix socket (the path an agent's call
# takes), in alternating rounds; requests/s, p50 and p99 per path, and per
# round against the direct round of the same round: throughput %, +p50,
# +p99, with the issue's aims (+0.2 ms p50, +1 ms p99, >= 80% throughput)
# and the CPU time per call of client, relay, gate and server. One table
# with keep-alive connections, one with a connection per request (the
# client's, and a server that closes each, as Python's urllib against an
# HTTP/1.0 server), and on request one with the client's connection per
# request only (a server that keeps its own alive, as urllib against an
# HTTP/1.1 server), each against its own direct path. Loopback only; the
# machine is small and shared, so read the ratios, not the absolute
# numbers. A JSON line with the same numbers ends the output.
# The source, and what is measured how: crates/constle-mcp-gate/benches/gate.rs.
#
# usage: bench/gate.sh [-r ROUNDS] [-d SECONDS] [-c CONCURRENCY] [-w SECONDS]
#                      [--multi-thread] [--relays] [--server-delay-us US] [--by-name]
#                      [--mode keep-alive|per-request|client-per-request|both|all]
#        bench/gate.sh --stdio [-r ROUNDS] [-d SECONDS] [-w SECONDS]
#   -r ROUNDS        measured rounds of each path (default 5)
#   -d SECONDS       length of one round of one path (default 3)
#   -c CONCURRENCY   calls in flight, one per connection (default 8)
#   -w SECONDS       warm-up of each path (default 1)
#   --multi-thread   also a gate on a two-worker multi-thread runtime
#   --relays         also two policy-free relays (axum+reqwest, bare hyper):
#                    what any HTTP hop costs, the floor under the gate
#   --server-delay-us US  the server waits US µs before answering (no CPU)
#   --by-name        the gate knows the server as localhost, not 127.0.0.1
#   --mode MODE      keep-alive, per-request (a connection per call, closed
#                    by the server too), client-per-request (the server
#                    keeps its connections alive), all (the three), or
#                    both tables of the first two (default)
#   --stdio          instead: the stdio bridge, a minimal stdio server spoken
#                    to directly over its pipes and through a gate over the
#                    bridge, one call at a time: added p50, p99 and CPU per
#                    call (crates/constle-mcp-stdio/benches/bridge.rs)
#
# The pure policy step alone (inspect, filter_server_message,
# filter_tools_list) is a criterion bench:
#   cargo bench --locked -p constle-mcp-gate --bench policy
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h | --help)
    sed -n '/^# usage:/,/^# *call (crates/s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  --stdio)
    shift
    exec cargo bench --locked --quiet -p constle-mcp-stdio --bench bridge -- "$@"
    ;;
esac
exec cargo bench --locked --quiet -p constle-mcp-gate --bench gate -- "$@"
