# shellcheck shell=bash
# shellcheck disable=SC2034 # the arrays are for the scripts that source this
# What scripts/container/attacks, scripts/container/fleet and
# bench/container.sh give `podman run`, sourced by each so the suite, the
# fleet and the benchmark run constle in the same container. Needs $root,
# the repository's top directory.

# The flags docs/containers.md gives (podman), with runc for this machine's
# hybrid cgroups (crun refuses them): nothing more privileged.
constle_flags=(
  --runtime runc
  --user 10001:10001
  --cap-drop all
  --security-opt no-new-privileges
  --security-opt "seccomp=$root/deploy/container/seccomp.json"
  --security-opt 'unmask=/proc/*'
  --init
)

# Plumbing, no privilege: no network (none needs one).
plumbing=(--rm --network none)

# Rootful podman asks for open-file and process limits above the host's,
# which only a root holding CAP_SYS_RESOURCE may grant; a CI machine that
# is itself a sandbox has none, so there the container keeps this shell's
# open-file limit and podman's own process limit (32768).
if [ $((0x$(awk '/^CapEff/ {print $2}' /proc/self/status) >> 24 & 1)) -eq 0 ]; then
  plumbing+=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=32768:32768)
fi
