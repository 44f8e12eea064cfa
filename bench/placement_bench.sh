#!/usr/bin/env bash
# placement_bench.sh TANDEM_BIN MODEL LINKEMU_BIN: placement by measured speed (--plan auto)
# against the memory plan, side by side in one run, main node plus 2 workers on loopback:
#   A. the second worker limited to 1 thread (the main node and the first worker: 2 threads)
#   B. the second worker behind the link emulator adding 20 ms each way
# For each: the two plans as printed (predicted ms per stage), then tg (REPS rounds alternating
# the plans, medians), then each plan's bench breakdown: measured ms per stage beside predicted.
# The summary lines start with "==".
set -euo pipefail
bin=$1 model=$2 linkemu=$3
source "$(dirname "$0")/lib.sh"
tg=${TG:-32} reps=${REPS:-5}

tg_rate() { python3 -c 'import json,sys; d=json.load(sys.stdin); print([r for r in d if r["test"].startswith("tg")][0]["tokens_per_s"])'; }
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

compare() {  # LABEL WORKER_FLAGS...
  local label=$1; shift
  echo "== $label"
  for plan in memory auto; do
    echo "-- --plan $plan:"
    "$bin" run -m "$model" -t 2 --dry-run --plan "$plan" "$@" | grep -v "^worker " | sed 's/^/   /'
  done
  local mem=() auto=()
  for r in $(seq "$reps"); do
    "$bin" bench -m "$model" -p 0 -n "$tg" -r 1 -t 2 --json --plan memory "$@" 2>/dev/null >"$tmp/m.json"
    mem+=("$(tg_rate <"$tmp/m.json")")
    "$bin" bench -m "$model" -p 0 -n "$tg" -r 1 -t 2 --json --plan auto "$@" 2>/dev/null >"$tmp/a.json"
    auto+=("$(tg_rate <"$tmp/a.json")")
    echo "   round $r: memory ${mem[-1]} t/s, auto ${auto[-1]} t/s"
  done
  local m a
  m=$(median "${mem[@]}") a=$(median "${auto[@]}")
  python3 -c 'import sys; m,a=map(float,sys.argv[1:3]); print(f"== {sys.argv[3]}: tg{sys.argv[4]} memory plan {m:.2f} t/s, auto plan {a:.2f} t/s, auto/memory {a/m:.2f}x")' "$m" "$a" "$label" "$tg"
  for plan in memory auto; do
    echo "-- measured against predicted, --plan $plan:"
    "$bin" bench -m "$model" -p 0 -n "$tg" -r 1 -t 2 --plan "$plan" "$@" 2>/dev/null | grep -E "stage|network|tg" | sed 's/^/   /'
  done
}

start_worker a 2
start_worker b 2
start_worker slow 1
start_proxy far "$port_b" 20
echo "== machine: $(nproc) cores; model $(basename "$model"); $reps alternating rounds, medians"
compare "A: second worker on 1 thread" --worker "127.0.0.1:$port_a" --worker "127.0.0.1:$port_slow"
compare "B: second worker behind a 20 ms link" --worker "127.0.0.1:$port_a" --worker "127.0.0.1:$proxy_far"
