#!/usr/bin/env bash
# The model gate's added cost, as tables: the same model call sent by the
# same client to a simulated provider directly (TCP on 127.0.0.1) and
# through the gate (its Unix socket, as constle run serves it) with no
# meter, with the run's spend ledger (a durable hold before the call
# leaves, a durable settlement after), and with the ledger and the run's
# audit writes (a signed, fsynced entry before the call leaves and one
# after), in alternating rounds; Anthropic Messages and OpenAI Responses,
# JSON and streamed (SSE, each event its own chunk). Per path: time to
# first token and to the last byte, p50 and p99, and their increase over
# direct; a stream's tokens per second and its ratio to direct; CPU time
# per call of the whole process and of the gate's threads; with the
# issue's aims (+1 ms to the first token at p50, >= 0.95 of direct
# tokens/s). Loopback only; the machine is small and shared, so read the
# differences and ratios, not the absolute numbers. A JSON line with the
# same numbers ends the output.
# The source, and what is measured how: crates/constle-llm-gate/benches/gate/main.rs.
#
# usage: bench/llm-gate.sh [-r ROUNDS] [-d SECONDS] [-w SECONDS] [-c CONCURRENCY] [-t TOKENS]
#                          [-i MICROSECONDS] [-f MILLISECONDS] [-p MILLISECONDS]
#   -r ROUNDS        measured rounds of each path (default 5)
#   -d SECONDS       length of one round of one path (default 2)
#   -w SECONDS       warm-up of each path (default 1)
#   -c CONCURRENCY   calls in flight, one per connection (default 1)
#   -t TOKENS        output tokens of each answer, one SSE event each (default 200)
#   -i MICROSECONDS  the provider waits this long before each token but the
#                    first, as a model paces its output (default: none)
#   -f MILLISECONDS  the provider waits this long before the first token (a
#                    JSON answer), as a model takes to start (default: none)
#   -p MILLISECONDS  each connection waits this long between its calls, as
#                    an agent between model turns (default: none)
set -euo pipefail
command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h | --help)
    sed -n '/^# usage:/,/^set -euo/{/^set/d;s/^# \{0,1\}//p}' "$0"
    exit 0
    ;;
esac
exec cargo bench --locked --quiet -p constle-llm-gate --bench gate -- "$@"
