#!/usr/bin/env bash
# The whole test suite: formatting, import circles (scripts/modgraph),
# lints, unit/integration/property tests, the CLI through the built binary,
# benchmarks and fuzz targets compiled, the quickstart, and the attack suite
# again inside a podman container (scripts/container/attacks), and a fleet of
# containers racing priced calls through one Redis (scripts/container/fleet). Set CONSTLE_E2E=require to make tests that would skip for
# lack of a system tool fail instead (CI does).
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"
cd "$(dirname "$0")/.."

section() { printf '\n== %s\n' "$*"; }

section "format"
cargo fmt --all -- --check

section "no import circles"
scripts/modgraph >/dev/null || { scripts/modgraph | grep -B1 circle: >&2; exit 1; }

section "lints"
cargo clippy --workspace --all-targets --locked --quiet -- -D warnings

section "fuzz targets compile"
cargo build --manifest-path fuzz/Cargo.toml --quiet

section "benchmarks compile"
cargo bench --workspace --locked --no-run --quiet

section "quickstart"
./examples/quickstart.sh >/dev/null

section "tests"
cargo test --workspace --locked

section "attack suite in a container"
if [ "${CONSTLE_E2E:-}" = require ] || { command -v podman && command -v mmdebstrap; } >/dev/null 2>&1; then
  scripts/container/attacks
else
  echo "skipped: the attack suite in a container: needs podman and mmdebstrap (./scripts/setup.sh)"
fi

section "a fleet of containers on one Redis"
if [ "${CONSTLE_E2E:-}" = require ] || { command -v podman && command -v mmdebstrap && command -v redis-server; } >/dev/null 2>&1; then
  scripts/container/fleet
else
  echo "skipped: the fleet test: needs podman, mmdebstrap and redis-server (./scripts/setup.sh)"
fi

section "the rendered pod under podman kube play"
if [ "${CONSTLE_E2E:-}" = require ] || { [ "$(id -u)" -eq 0 ] && command -v podman && command -v mmdebstrap; } >/dev/null 2>&1; then
  scripts/container/kube-play
else
  echo "skipped: the rendered pod under podman kube play: needs root, podman and mmdebstrap (./scripts/setup.sh)"
fi
