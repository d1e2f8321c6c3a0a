#!/usr/bin/env bash
# Installs what building and testing Constle needs on Debian 12 or later:
# Debian packages, then a Rust toolchain if there is none. Run as root or as
# a user with sudo. Safe to run again.
set -euo pipefail

packages=(
  bubblewrap        # the sandbox (0.8 or newer)
  build-essential   # cc and c++: libFuzzer for the fuzz targets
  ca-certificates
  curl
  git
  iproute2          # tests and the quickstart simulate outside hosts in network namespaces
  openssl           # tests check that key files are readable by OpenSSL
  procps            # pgrep, in tests that check no process outlives a run
  python3           # the example agent
  redis-server      # tests and benchmarks of the spend ledger's Redis store (spending.ledger)
  squid             # the egress proxy (5.7 or newer)
  util-linux        # setpriv: Squid dies with constle
)

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null

min_rust=1.89
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no Rust toolchain found; installing one with rustup" >&2
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component clippy,rustfmt
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
have=$(rustc --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$min_rust" "$have" | sort -V | head -n1)" != "$min_rust" ]; then
  echo "setup: rustc $have is older than $min_rust; run: rustup update stable" >&2
  exit 1
fi
echo "setup: ready (rustc $have)"
