#!/usr/bin/env bash
# Audit log throughput against raw Ed25519 measured in the same run, as a
# table. Verification is also timed by CPU time (all threads), which a busy
# machine moves much less than the clock. Extra arguments go to criterion
# (e.g. --measurement-time 10).
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"
cd "$(dirname "$0")/.."
cargo bench --locked -p constle-audit --bench audit -- "$@" >&2
python3 - <<'PY'
import json, pathlib
root = pathlib.Path("target/criterion")
def rate(group, name):
    d = root / group / name / "new"
    mean_ns = json.loads((d / "estimates.json").read_text())["mean"]["point_estimate"]
    elements = json.loads((d / "benchmark.json").read_text())["throughput"]["Elements"]
    return elements / (mean_ns * 1e-9)
measured = {
    "raw Ed25519 sign (1 core)": rate("raw", "sign"),
    "raw verify_strict (1 core)": rate("raw", "verify_strict"),
    "raw verify_batch (1 core)": rate("raw", "verify_batch"),
    "raw verify_batch (all cores)": rate("raw", "verify_batch_all_cores"),
    "raw verify_batch (all cores, CPU time)": rate("raw", "verify_batch_all_cores_cpu"),
    "log append, group commit + fsync": rate("append", "group_commit"),
    "log verify, 10k-entry day file": rate("verify", "day_file"),
    "log verify (CPU time)": rate("verify", "day_file_cpu"),
}
print(f"{'measurement':<40} {'entries/s':>12}")
for name, value in measured.items():
    print(f"{name:<40} {value:>12,.0f}")
print()
print(f"{'ratio (time per entry)':<62} {'x':>6}  aim")
for ours, base, aim in [
    ("log append, group commit + fsync", "raw Ed25519 sign (1 core)", "<= 2"),
    ("log verify, 10k-entry day file", "raw verify_batch (all cores)", "<= 1.3"),
    ("log verify (CPU time)", "raw verify_batch (all cores, CPU time)", "<= 1.3"),
    ("log verify, 10k-entry day file", "raw verify_batch (1 core)", ""),
]:
    print(f"{ours + ' / ' + base:<62} {measured[base] / measured[ours]:>6.2f}  {aim}")
PY
