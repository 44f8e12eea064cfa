#!/usr/bin/env bash
# dist_bench.sh TANDEM_BIN MODEL LINKEMU_BIN: the distributed acceptance figures, side by side in
# one run on this machine (all nodes on loopback):
#   1. tg: one node vs main + 2 workers (2 threads each)
#   2. tg with the link emulator adding one-way delay d on every hop (d = 1 ms, 5 ms)
#   3. pp512: one node pinned to one core vs two stages pinned to different cores (1 thread each)
#   4. a restarted worker with a local model: weight bytes received (the counter)
# Prints the bench tables and the per-token breakdowns; the summary lines start with "==".
set -euo pipefail
bin=$1 model=$2 linkemu=$3
source "$(dirname "$0")/lib.sh"
tg=${TG:-64} reps=${REPS:-5}
tg_rate() { python3 -c 'import json,sys; d=json.load(sys.stdin); print([r for r in d if r["test"].startswith(sys.argv[1])][0]["tokens_per_s"])' "$1"; }

echo "== machine: $(nproc) cores; model $(basename "$model"); tg$tg; $reps alternating rounds, medians"
start_worker a
start_worker b
for d in 1 5; do
  start_proxy "pa$d" "$port_a" "$d"
  start_proxy "pb$d" "$port_b" "$d"
done
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
single=() two=() d1=() d5=()
for r in $(seq "$reps"); do
  "$bin" bench -m "$model" -p 0 -n "$tg" -r 1 -t 2 --json >"$tmp/single.json"
  single+=("$(tg_rate tg <"$tmp/single.json")")
  "$bin" bench -m "$model" -p 0 -n "$tg" -r 1 -t 2 --json --plan memory --worker "127.0.0.1:$port_a" --worker "127.0.0.1:$port_b" 2>"$tmp/two.err" >"$tmp/two.json"
  two+=("$(tg_rate tg <"$tmp/two.json")")
  "$bin" bench -m "$model" -p 0 -n "$tg" -r 1 -t 2 --json --plan memory --worker "127.0.0.1:$proxy_pa1" --worker "127.0.0.1:$proxy_pb1" 2>/dev/null >"$tmp/d1.json"
  d1+=("$(tg_rate tg <"$tmp/d1.json")")
  "$bin" bench -m "$model" -p 0 -n "$tg" -r 1 -t 2 --json --plan memory --worker "127.0.0.1:$proxy_pa5" --worker "127.0.0.1:$proxy_pb5" 2>/dev/null >"$tmp/d5.json"
  d5+=("$(tg_rate tg <"$tmp/d5.json")")
  echo "   round $r: single ${single[-1]} t/s, 2 workers ${two[-1]}, d=1 ${d1[-1]}, d=5 ${d5[-1]}"
done
python3 - "$(median "${single[@]}")" "$(median "${two[@]}")" "$(median "${d1[@]}")" "$(median "${d5[@]}")" <<'PY'
import sys
s, t, a, b = map(float, sys.argv[1:])
print(f"== tg single node {s:.2f} t/s ({1000/s:.2f} ms/token); main + 2 workers {t:.2f} t/s ({1000/t:.2f} ms/token); ratio {t/s:.3f}")
for d, r in ((1, a), (5, b)):
    base, got = 1000/s, 1000/r
    bound = base + 3*d + 2
    print(f"== delay {d} ms per hop (3 hops): {got:.2f} ms/token; bound single + 3d + 2 = {bound:.2f} ms; added {got-base:.2f} ms -> {'PASS' if got <= bound else 'FAIL'}")
PY
for f in two d1 d5; do
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("   last", sys.argv[2], "breakdown:", json.dumps(d[0].get("per_token")))' "$tmp/$f.json" "$f"
done
grep -h "weight bytes received" "$tmp/two.err" | sed 's/^/   /'

# Pipelined prompt: pinned cores, one thread per stage.
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
# Alternating rounds, as above, so that a slow spell of this shared machine hits both sides.
start_worker c 1 taskset -c 1
pp1=() pp2=()
for r in $(seq "$reps"); do
  taskset -c 0 "$bin" bench -m "$model" -p 512 -n 0 -r 1 -t 1 --json >"$tmp/pp1.json"
  pp1+=("$(tg_rate pp <"$tmp/pp1.json")")
  taskset -c 0 "$bin" bench -m "$model" -p 512 -n 0 -r 1 -t 1 --json --ubatch-size "${UB:-32}" --plan memory --worker "127.0.0.1:$port_c" 2>/dev/null >"$tmp/pp2.json"
  pp2+=("$(tg_rate pp <"$tmp/pp2.json")")
  echo "   round $r: pp512 one core ${pp1[-1]} t/s, two stages ${pp2[-1]} t/s"
done
python3 - "$(median "${pp1[@]}")" "$(median "${pp2[@]}")" <<'PY'
import sys
a, b = map(float, sys.argv[1:])
print(f"== pp512 one node on one core {a:.2f} t/s; two stages on two cores {b:.2f} t/s (medians); speed-up {b/a:.2f}x")
PY

# A worker without the file: the first start receives its layers, a restarted one reads its cache.
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
for run in first restarted; do
  start_worker "cache_$run"
  kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'
  "$bin" worker --port "$(eval echo \$port_cache_$run)" -t 2 --cache-dir "$tmp/cache" --no-main-path >"$tmp/cw.out" 2>"$tmp/cw.err" &
  pids+=($!)
  sleep 1.5
  "$bin" bench -m "$model" -p 0 -n 4 -r 1 -t 2 --plan memory --worker "127.0.0.1:$(eval echo \$port_cache_$run)" 2>"$tmp/c_$run.err" >/dev/null
  echo "== $run worker with --cache-dir: $(grep -h 'weight bytes received' "$tmp/c_$run.err" | sed 's/.*(\(.*\))/\1/')"
  kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'
done
