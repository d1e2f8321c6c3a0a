#!/usr/bin/env bash
# Spend ledger reservations per second, embedded and Redis, one run and 8
# runs at once, against a bare baseline measured in the same run, as a
# table. Extra arguments go to criterion (e.g. --measurement-time 10).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --locked -p constle-spend --bench spend -- "$@" >&2
python3 - <<'PY'
import json, pathlib
root = pathlib.Path("target/criterion")
def rate(group, name):
    d = root / group / name / "new"
    if not d.exists():
        return None
    mean_ns = json.loads((d / "estimates.json").read_text())["mean"]["point_estimate"]
    elements = json.loads((d / "benchmark.json").read_text())["throughput"]["Elements"]
    return elements / (mean_ns * 1e-9)
rows = [
    ("embedded", "baseline", "bare write + fsync + rename + fsync dir"),
    ("embedded", "one_run", "embedded, one run"),
    ("embedded", "8_runs", "embedded, 8 runs at once (8 threads)"),
    ("redis", "baseline", "bare Redis INCRBY round trip"),
    ("redis", "one_run", "Redis, one run"),
    ("redis", "8_runs", "Redis, 8 runs at once (8 connections)"),
]
print(f"{'measurement':<42} {'reservations/s':>14}  ratio")
for group, name, label in rows:
    value = rate(group, name)
    if value is None:
        print(f"{label:<42} {'skipped':>14}")
        continue
    base = rate(group, "baseline")
    ratio = "baseline" if name == "baseline" else f"{base / value:.2f}x the time of the {group} baseline"
    print(f"{label:<42} {value:>14,.0f}  {ratio}")
PY
