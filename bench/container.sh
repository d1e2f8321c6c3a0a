#!/usr/bin/env bash
# `constle run` of an agent that runs /bin/true, in a podman container (the
# image scripts/container/build-rootfs builds, the flags docs/containers.md
# gives) against on the host: same machine, same run, measured with
# hyperfine (mean, standard deviation, median of start-to-exit wall time).
# The aim: the container's run at most 1.1x the host's.
#
# Rows:
#   host, as uid 10001      constle started by an unprivileged user, the path
#                           a container's non-root user takes (the baseline)
#   container, uid 10001    the same run inside a running container, the
#                           container's start not counted (hyperfine runs
#                           inside it, the host's binary mounted read-only)
#   host, as root           root's path (run ids, idmapped mounts), for
#                           comparison; only when this script runs as root
#   podman run, per run     a container started for each run, as a Job per
#                           run would; for the record, no aim
#
# usage: bench/container.sh [-n RUNS] [-b CONSTLE]
#   -n RUNS     runs of each row (default 30)
#   -b CONSTLE  the constle binary (default: a release build of this tree)
# Needs root (to run as uid 10001 and for rootful podman), hyperfine,
# podman, runc and mmdebstrap (./scripts/setup.sh installs them).
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"

usage() { sed -n '/^# usage:/,/^#   -b/s/^# \{0,1\}//p' "$0" >&2; }
die() {
  echo "bench/container.sh: $*" >&2
  exit 1
}

runs=30 constle=''
while getopts n:b:h opt; do
  case $opt in
    n) runs=$OPTARG ;;
    b) constle=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { usage; exit 2; }
[[ $runs =~ ^[1-9][0-9]{0,4}$ ]] || die "'$runs' is not a positive whole number"
[ "$(id -u)" -eq 0 ] || die "needs root: the host's rows run constle as uid 10001 (try sudo)"
for tool in hyperfine podman setpriv; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (./scripts/setup.sh installs what is needed)"
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ -z "$constle" ]; then
  echo "bench: building (release)" >&2
  cargo build --release --locked --quiet -p constle --bin constle >&2
  constle=$root/target/release/constle
fi
constle=$(realpath "$constle")
[ -x "$constle" ] || die "$constle is not an executable"
image=$(scripts/container/build-rootfs)
# shellcheck source=scripts/container/flags.sh
. scripts/container/flags.sh

# One agent per row, each in a directory of its own that uid 10001 owns
# (the container's at the same path): its Agentfile, work directory and
# CONSTLE_HOME.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/constle-bench-container.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp"
agent() {
  mkdir -p "$tmp/$1/work"
  printf '%s\n' 'name: bench' 'sandbox:' '  command: ["/bin/true"]' '  workdir: ./work' \
    '  network:' '    egress: none' >"$tmp/$1/agent.yaml"
  chown -R 10001:10001 "$tmp/$1"
}
for row in host-user container host-root podman-run; do agent "$row"; done
chown -R root:root "$tmp/host-root"

measure=(hyperfine --shell=none --style=none --warmup 3 --runs "$runs")
run_in() { printf '%s' "env CONSTLE_HOME=$tmp/$1/home NO_COLOR=1 $constle run $tmp/$1/agent.yaml"; }

echo "bench: host, as uid 10001" >&2
"${measure[@]}" --export-json "$tmp/host-user/hyperfine.json" \
  "setpriv --reuid 10001 --regid 10001 --clear-groups $(run_in host-user)" >/dev/null

echo "bench: in a container ($image), as uid 10001" >&2
podman run "${plumbing[@]}" "${constle_flags[@]}" \
  --volume "$constle:$constle:ro" --volume "$(command -v hyperfine):/usr/local/bin/hyperfine:ro" \
  --volume "$tmp:$tmp" "$image" \
  "${measure[@]}" --export-json "$tmp/container/hyperfine.json" "$(run_in container)" >/dev/null

echo "bench: host, as root" >&2
"${measure[@]}" --export-json "$tmp/host-root/hyperfine.json" "$(run_in host-root)" >/dev/null

echo "bench: podman run per run" >&2
"${measure[@]}" --export-json "$tmp/podman-run/hyperfine.json" \
  "podman run ${plumbing[*]} ${constle_flags[*]} --volume $constle:$constle:ro --volume $tmp:$tmp $image $(run_in podman-run)" >/dev/null

python3 - "$tmp" <<'EOF'
import json
import sys

tmp = sys.argv[1]
rows = [
    ("host, as uid 10001", "host-user"),
    ("container, uid 10001", "container"),
    ("host, as root", "host-root"),
    ("podman run, per run", "podman-run"),
]
base = None
print(f"{'where':<24}{'mean ms':>10}{'± sd':>8}{'median':>9}{'ratio':>8}")
for label, name in rows:
    result = json.load(open(f"{tmp}/{name}/hyperfine.json"))["results"][0]
    mean, sd, median = (result[k] * 1000 for k in ("mean", "stddev", "median"))
    base = base or mean
    print(f"{label:<24}{mean:>10.1f}{sd:>8.1f}{median:>9.1f}{mean / base:>7.2f}x")
print("aim: container / host as uid 10001 <= 1.10x")
EOF
