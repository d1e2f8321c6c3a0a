#!/usr/bin/env bash
# The main job, end to end on the example agent: make its keys, validate its
# Agentfile, write a signed audit log of a simulated run, verify it, show it,
# and show what verification says after one byte of it is changed.
#
# Everything goes under target/quickstart/ (its own CONSTLE_HOME), so running
# it again starts fresh and never touches ~/.constle.
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release --locked --quiet -p constle --bin constle --example simulated_run
constle=target/release/constle
simulated_run=target/release/examples/simulated_run

work=$root/target/quickstart
rm -rf "$work"
mkdir -p "$work"
export CONSTLE_HOME=$work/home
cp -r examples/invoice-processor "$work/"
agentfile=$work/invoice-processor/agent.yaml

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

step constle keygen invoice-processor
agent_did=$($constle keygen invoice-processor)
echo "$agent_did"
step constle webhook-keygen approver
approver_did=$($constle webhook-keygen approver)
echo "$approver_did"
sed -e "s|@AGENT_DID@|$agent_did|" -e "s|@APPROVER_DID@|$approver_did|" \
  "$work/invoice-processor/agent.template.yaml" > "$agentfile"

step constle validate agent.yaml
$constle validate "$agentfile"

step "simulated run (constle run is not built yet): writes a signed audit log"
log=$($simulated_run "$agentfile")
echo "$log"

step constle audit verify --agentfile=agent.yaml "$(basename "$log")"
$constle audit verify --agentfile="$agentfile" "$log"

step constle audit show "$(basename "$log")"
$constle audit show "$log"

step "change one byte of a copy, then verify the copy"
tampered=$work/tampered
mkdir -p "$tampered"
cp "$CONSTLE_HOME"/logs/* "$tampered/"
sed -i '2s/evil.example.com\|api.groq.com/api.gr0q.com/' "$tampered/$(basename "$log")"
if $constle audit verify --agentfile="$agentfile" "$tampered/$(basename "$log")"; then
  echo "quickstart: the edited log verified; that is a bug" >&2
  exit 1
fi
printf '\nquickstart: done (the last check was meant to fail: it shows an edit being caught)\n'
