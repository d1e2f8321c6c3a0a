#!/usr/bin/env bash
# The fleet test's calls per second through one Redis: 4 podman containers
# (scripts/container/fleet), each `constle run` of one agent identity with 2
# threads calling a priced MCP tool until the day cap refuses them, one
# Redis (Unix socket) as the shared ledger. One round of 2000 charged calls
# (cap 20.00 USD at 0.01), release build; prints a table per container and
# in all: calls (charged and refused), the seconds from the first call's
# start to the last one's end, calls per second. The day cap still holds to
# the cent, and is checked.
#
# usage: bench/fleet.sh [-n CONTAINERS]
# Needs root or rootless podman, runc, mmdebstrap and redis-server
# (./scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/container/fleet --bench --release "$@"
