#!/usr/bin/env bash
# Human gates with several approvers: the time from the k-th person's
# approval to the gate letting the call through, with real
# `constle approver serve` instances on loopback (own home, key, store and
# login each) and a person's decide POST as a browser sends it. Protocol v2,
# two approvers, threshold 2 (the gate's polls held by `Prefer: wait=20`),
# against protocol v1 with one approver (polled every 0.5 s) in the same
# run: p50, p99 and max from the POST's response, the p50 from before it was
# sent, and the CPU time per approval of the gate and of the endpoints. The
# aim (issue 15): under 50 ms at the default poll settings. A JSON line with
# the same numbers ends the output.
# The source, and what is measured how: crates/constle/benches/approvals.rs.
#
# usage: bench/approvals.sh [-n APPROVALS] [--run]
#   -n APPROVALS  approvals measured per path (default 21)
#   --run         also through the real `constle run` (needs root and
#                 bubblewrap): the agent in the sandbox calls a gated tool
#                 of the testkit's MCP server, and the clock stops when the
#                 call reaches the server (audit appends and forward in)
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h | --help)
    sed -n '/^# usage:/,/^# *call reaches/s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac
exec cargo bench --locked --quiet -p constle --bench approvals -- "$@"
