#!/usr/bin/env bash
# A2A: accepted envelopes per second and p50/p99 latency over loopback HTTP,
# embedded and Redis replay stores, one sender and 8 at once, beside
# baselines measured in the same run (raw verify_strict, a bare append +
# fdatasync, a bare Redis SET NX PX), as a table. Pass --quick for a short run.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --locked -p constle-a2a --bench a2a -- "$@"
