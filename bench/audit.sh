#!/usr/bin/env bash
# Audit log throughput against raw Ed25519 measured in the same run, as a
# table. Extra arguments go to criterion (e.g. --measurement-time 10).
set -euo pipefail
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
rows = [
    ("raw Ed25519 sign (1 core)", rate("raw", "sign"), None),
    ("raw verify_strict (1 core)", rate("raw", "verify_strict"), None),
    ("raw verify_batch (1 core)", rate("raw", "verify_batch"), None),
    ("raw verify_batch (all cores)", rate("raw", "verify_batch_all_cores"), None),
    ("log append, group commit + fsync", rate("append", "group_commit"), ("raw Ed25519 sign (1 core)", "slower")),
    ("log verify, 10k-entry day file", rate("verify", "day_file"), ("raw verify_batch (1 core)", "slower")),
]
by_name = {name: value for name, value, _ in rows}
print(f"{'measurement':<36} {'entries/s':>12}  ratio")
for name, value, against in rows:
    ratio = ""
    if against:
        base = by_name[against[0]]
        ratio = f"{base / value:.2f}x the time of {against[0]}"
        if against[0].endswith("(1 core)") and "verify" in name:
            ratio += f"; {by_name['raw verify_batch (all cores)'] / value:.2f}x of all-cores batch"
    print(f"{name:<36} {value:>12,.0f}  {ratio}")
PY
