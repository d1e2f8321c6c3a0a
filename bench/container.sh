#!/usr/bin/env bash
# `constle run` of an agent that runs /bin/true, in a podman container (the
# image scripts/container/build-rootfs builds, the flags docs/containers.md
# gives) against on the host: same machine, same run, measured with
# hyperfine (mean, standard deviation, median of start-to-exit wall time,
# over every round).
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
# usage: bench/container.sh [-n RUNS] [-r ROUNDS] [-b CONSTLE]
#   -n RUNS     runs of each row per round (default 20)
#   -r ROUNDS   rounds, the rows taking turns (default 3)
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

runs=20 rounds=3 constle=''
while getopts n:r:b:h opt; do
  case $opt in
    n) runs=$OPTARG ;;
    r) rounds=$OPTARG ;;
    b) constle=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { usage; exit 2; }
for value in "$runs" "$rounds"; do
  [[ $value =~ ^[1-9][0-9]{0,4}$ ]] || die "'$value' is not a positive whole number"
done
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

# Each row's runs in rounds, the rows taking turns, so that a burst of load
# on a shared machine falls on all of them alike; hyperfine writes each
# round's times to ROW/ROUND.json.
host_user() {
  "${measure[@]}" --export-json "$tmp/host-user/$1.json" \
    "setpriv --reuid 10001 --regid 10001 --clear-groups $(run_in host-user)" >/dev/null
}
in_container() {
  podman run "${plumbing[@]}" "${constle_flags[@]}" \
    --volume "$constle:$constle:ro" --volume "$(command -v hyperfine):/usr/local/bin/hyperfine:ro" \
    --volume "$tmp:$tmp" "$image" \
    "${measure[@]}" --export-json "$tmp/container/$1.json" "$(run_in container)" >/dev/null
}
host_root() {
  "${measure[@]}" --export-json "$tmp/host-root/$1.json" "$(run_in host-root)" >/dev/null
}
podman_run() {
  "${measure[@]}" --export-json "$tmp/podman-run/$1.json" \
    "podman run ${plumbing[*]} ${constle_flags[*]} --volume $constle:$constle:ro --volume $tmp:$tmp $image $(run_in podman-run)" >/dev/null
}
for round in $(seq "$rounds"); do
  echo "bench: round $round of $rounds (image $image)" >&2
  host_user "$round"
  in_container "$round"
  host_root "$round"
  podman_run "$round"
done

python3 - "$tmp" <<'EOF'
import json
import statistics
import sys
from pathlib import Path

tmp = sys.argv[1]
rows = [
    ("host, as uid 10001", "host-user"),
    ("container, uid 10001", "container"),
    ("host, as root", "host-root"),
    ("podman run, per run", "podman-run"),
]
base = None
print(f"{'where':<24}{'runs':>6}{'mean ms':>10}{'± sd':>8}{'median':>9}{'ratio':>8}")
for label, name in rows:
    times = [
        t * 1000
        for path in sorted(Path(tmp, name).glob("*.json"))
        for t in json.loads(path.read_text())["results"][0]["times"]
    ]
    mean, median = statistics.mean(times), statistics.median(times)
    sd = statistics.stdev(times) if len(times) > 1 else 0.0
    base = base or mean
    print(f"{label:<24}{len(times):>6}{mean:>10.1f}{sd:>8.1f}{median:>9.1f}{mean / base:>7.2f}x")
print("ratio: mean against the host's run as uid 10001; aim for the container's: <= 1.10x")
EOF
