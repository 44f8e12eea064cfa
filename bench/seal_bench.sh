#!/usr/bin/env bash
# seal_bench.sh TANDEM_BIN MODEL [REPS]: what sealed frames cost. Main node plus 2 workers on
# loopback, tg with workers that have no key (frames in the clear) and with workers that share a
# key (every frame sealed), alternating round by round; prints each round, the medians and their
# ratio (the goal: sealed >= 0.97x). Also the first-use hashing on the main node (the log line of
# a run with an empty digest record folder).
set -euo pipefail
bin=$1 model=$2 reps=${3:-5}
tg=${TG:-64}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

"$bin" keygen -o "$tmp/key" >/dev/null
start_worker() {  # NAME [extra worker flags...] -> sets port_NAME
  local name=$1; shift
  "$bin" worker --port 0 -t "${WT:-2}" -m "$model" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  for _ in $(seq 200); do grep -q "listening on" "$tmp/$name.out" 2>/dev/null && break; sleep 0.05; done
  local port
  port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/$name.out" | head -1)
  eval "port_$name=$port"
}
tg_rate() { python3 -c 'import json,sys; d=json.load(sys.stdin); print([r for r in d if r["test"].startswith("tg")][0]["tokens_per_s"])'; }
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "== machine: $(nproc) cores; model $(basename "$model"); tg$tg; $reps alternating rounds, medians"
start_worker a
start_worker b
start_worker ka --auth-key-file "$tmp/key"
start_worker kb --auth-key-file "$tmp/key"
export TANDEM_CACHE_DIR="$tmp/cache"
sleep 3  # the workers measure their speed as they start: let them finish before the first-use hashing
clear=() sealed=()
for r in $(seq "$reps"); do
  "$bin" bench -m "$model" -p 0 -n "$tg" -r 1 -t 2 --json --plan memory --worker "127.0.0.1:$port_a" --worker "127.0.0.1:$port_b" \
    2>"$tmp/clear.err" >"$tmp/clear.json"
  clear+=("$(tg_rate <"$tmp/clear.json")")
  "$bin" bench -m "$model" -p 0 -n "$tg" -r 1 -t 2 --json --plan memory --worker "127.0.0.1:$port_ka" --worker "127.0.0.1:$port_kb" \
    --auth-key-file "$tmp/key" 2>"$tmp/sealed.err" >"$tmp/sealed.json"
  sealed+=("$(tg_rate <"$tmp/sealed.json")")
  [[ $r -eq 1 ]] && grep -h "hashed the model" "$tmp/clear.err" | sed 's/^/   first use: /'
  echo "   round $r: clear ${clear[-1]} t/s, sealed ${sealed[-1]} t/s"
done
c=$(median "${clear[@]}") s=$(median "${sealed[@]}")
python3 -c 'import sys; c,s=map(float,sys.argv[1:]); print(f"== tg: clear {c:.2f} t/s, sealed {s:.2f} t/s (medians): sealed/clear = {s/c:.3f}")' "$c" "$s"
