#!/usr/bin/env bash
# The main job, end to end on the example agent: make its keys, validate its
# Agentfile, run it in the sandbox against a simulated outside world, show
# what its model provider received and what the model gate recorded, verify
# the signed audit log of the run, show it, and show what verification says
# after one byte of it is changed.
#
# The model provider is examples/simulated_anthropic.py on loopback: the
# agent reaches it only through the model gate, which holds the key the
# quickstart makes up here.
#
# The "outside world" is a network namespace holding a documentation address
# (203.0.113.0/24) with a listener on port 443; the proxy resolves the
# agent's allowed host to it through --hosts-file, so nothing leaves this
# machine. Making the namespace needs root: it runs under sudo unless you are
# root. Everything else goes under target/quickstart/, with its own
# CONSTLE_HOME, so running it again starts fresh and never touches
# ~/.constle.
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release --locked --quiet -p constle --bin constle
cargo build --release --locked --quiet -p constle-testkit \
  --example simulated_host --example mcp_server --example simulated_approver
constle=$root/target/release/constle
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)

work=$root/target/quickstart
rm -rf "$work"
mkdir -p "$work"
export CONSTLE_HOME=$work/home
cp -r examples/invoice-processor "$work/"
agentdir=$work/invoice-processor
agentfile=$agentdir/agent.yaml

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

# serve VAR CMD...: starts CMD in the background and puts the first line it
# prints in VAR. CMD serves until its stdin closes, which stop_serving does
# (or the end of this script).
serving_pids=() serving_fds=()
serve() {
  local var=$1 fifo=$work/$1.fifo fd
  shift
  mkfifo "$fifo"
  exec {fd}> >(exec "$@" > "$fifo")
  serving_pids+=("$!") serving_fds+=("$fd")
  read -r "${var?}" < "$fifo"
}
stop_serving() {
  local fd
  for fd in "${serving_fds[@]}"; do exec {fd}>&-; done
  wait "${serving_pids[@]}" || true
}

step constle keygen invoice-processor
agent_did=$($constle keygen invoice-processor)
echo "$agent_did"
step constle webhook-keygen approver
approver_did=$($constle webhook-keygen approver)
echo "$approver_did"

# The accounting MCP server (host side), and the approver's decision
# endpoint, which signs an approval for every gated call with the key
# webhook-keygen just made.
serve mcp_url "$root/target/release/examples/mcp_server"
serve webhook_url "$root/target/release/examples/simulated_approver" \
  "$CONSTLE_HOME/keys/approver/approver.pem"
export HUMAN_GATE_WEBHOOK_URL=$webhook_url

# The model provider (host side), and the key only the model gate holds:
# the agent gets a placeholder, and the provider writes down every key it
# receives.
model_record=$work/model-provider.log
serve llm_url python3 "$root/examples/simulated_anthropic.py" "$model_record"
model_key=sk-ant-quickstart-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
export SIMULATED_ANTHROPIC_KEY=$model_key

sed -e "s|@AGENT_DID@|$agent_did|" -e "s|@APPROVER_DID@|$approver_did|" -e "s|@MCP_URL@|$mcp_url|" \
  -e "s|@LLM_URL@|$llm_url|" "$agentdir/agent.template.yaml" > "$agentfile"

step constle validate agent.yaml
$constle validate "$agentfile"

# The simulated api.groq.com.
serve address "${sudo[@]}" "$root/target/release/examples/simulated_host"
printf '%s api.groq.com\n127.0.0.1 localtest.me\n' "$address" > "$work/hosts"
sed -i "s|ALLOWED_ADDRESS: \".*\"|ALLOWED_ADDRESS: \"$address\"|" "$agentfile"

step constle run --hosts-file hosts agent.yaml
status=0
$constle run --hosts-file "$work/hosts" "$agentfile" || status=$?
stop_serving
if [ "$status" -ne 0 ]; then
  echo "quickstart: constle run exited with $status" >&2
  exit 1
fi

step "what the model provider received (the gate held SIMULATED_ANTHROPIC_KEY=$model_key)"
cat "$model_record"
if ! grep -q "x-api-key=$model_key\$" "$model_record" || grep -qv "x-api-key=$model_key\$" "$model_record"; then
  echo "quickstart: the provider did not receive the gate's key on every call" >&2
  exit 1
fi
if grep -q claude-opus "$model_record"; then
  echo "quickstart: the undeclared model reached the provider" >&2
  exit 1
fi

step constle spend show agent.yaml
$constle spend show "$agentfile"

log=$CONSTLE_HOME/logs/invoice-processor-$(date -u +%F).jsonl
step "constle audit show $(basename "$log") | grep llm_"
$constle audit show "$log" | grep -E ' llm_(reserved|call|refused) '
if ! grep -q '"reason":"llm_model_not_declared"' "$log"; then
  echo "quickstart: no refusal of the undeclared model in the log" >&2
  exit 1
fi
step constle audit verify --agentfile=agent.yaml "$(basename "$log")"
$constle audit verify --agentfile="$agentfile" "$log"

step constle audit show "$(basename "$log")"
$constle audit show "$log"

step "change one byte of a copy, then verify the copy"
tampered=$work/tampered
mkdir -p "$tampered"
cp "$CONSTLE_HOME"/logs/* "$tampered/"
sed -i '0,/"host":"api.groq.com"/s//"host":"api.gr0q.com"/' "$tampered/$(basename "$log")"
if $constle audit verify --agentfile="$agentfile" "$tampered/$(basename "$log")"; then
  echo "quickstart: the edited log verified; that is a bug" >&2
  exit 1
fi
printf '\nquickstart: done (the last check was meant to fail: it shows an edit being caught)\n'
