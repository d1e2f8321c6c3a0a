#!/usr/bin/env bash
# A checkpoint round with two witnesses on loopback, against the same round
# without witnesses, in the same run: p50, p99 and max wall time per round
# and the process's CPU time per round, for logs of 1 000 and 100 000
# entries (the first round reads the log, each later one only what was
# appended since: the p50 is a later round, the max the first); then `audit
# verify`'s work on the 100 000-entry log with and without the witnesses'
# cosignatures checked, clock and CPU time, median of 5.
# The source, and what is measured how: crates/constle-checkpoints/benches/round.rs.
#
# usage: bench/checkpoints.sh [ROUNDS]   (default 101 rounds per row)
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"
cd "$(dirname "$0")/.."
# The witnesses' own lines (`witness: 200 …`, one per request) are left out.
ROUNDS="${1:-101}" cargo bench --locked --quiet -p constle-checkpoints --bench round \
  2> >(grep -v "^witness: " >&2)
