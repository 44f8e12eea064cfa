#!/usr/bin/env bash
# spec_bench.sh TANDEM_BIN MODEL LINKEMU_BIN [DRAFT_FAIL_MODEL]: speculative decoding, side by
# side in one run (REPS rounds alternating the variants, medians of tokens/s as `tandem run`
# prints them):
#   A. main node + 2 workers (2 threads each, loopback), the link emulator adding 5 ms one way on
#      every hop; greedy; plain decoding, --lookup, and -md MODEL (the model as its own draft:
#      every guess accepted, the draft's cost paid on the main node). The texts must be equal.
#   B. one node, no links, a prompt where guesses fail: sampled at temperature 1.5 (seeded),
#      plain against --lookup; and greedy, plain against -md DRAFT_FAIL_MODEL (a model of the same
#      vocabulary with other weights: its guesses are rejected), when given.
# The prompt: random-weight models continue any prompt greedily into short loops that repeat
# (checked: the plain text is printed), the kind of text prompt lookup guesses; PROMPT overrides.
# Summary lines start with "==".
set -euo pipefail
bin=$1 model=$2 linkemu=$3 fail_draft=${4:-}
source "$(dirname "$0")/lib.sh"
n=${N:-128} reps=${REPS:-3}
prompt=${PROMPT:-"Once upon a time"}

rate() { sed -n 's/.*generation: [0-9]* tokens, \([0-9.]*\) tokens\/s.*/\1/p' "$1"; }
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

# run LABEL ARGS...: one `tandem run`; appends its rate to the array rates_LABEL, keeps its text.
run() {
  local label=$1; shift
  "$bin" run -m "$model" -t 2 -n "$n" -p "$prompt" "$@" >"$tmp/$label.txt" 2>"$tmp/$label.err" || { cat "$tmp/$label.err"; exit 1; }
  eval "rates_$label+=($(rate "$tmp/$label.err"))"
  grep -h "^speculation" "$tmp/$label.err" >"$tmp/$label.spec" || true
}

start_worker a
start_worker b
start_proxy pa "$port_a" 5
start_proxy pb "$port_b" 5
workers=(--plan memory --worker "127.0.0.1:$proxy_pa" --worker "127.0.0.1:$proxy_pb")

echo "== A. main + 2 workers, 5 ms per hop, greedy, $n tokens, prompt \"$prompt\""
rates_plain=() rates_lookup=() rates_self=()
for r in $(seq "$reps"); do
  run plain --temp 0 "${workers[@]}"
  run lookup --temp 0 --lookup "${workers[@]}"
  run self --temp 0 -md "$model" "${workers[@]}"
  echo "   round $r: plain ${rates_plain[-1]} t/s, --lookup ${rates_lookup[-1]}, -md self ${rates_self[-1]}"
  cmp -s "$tmp/plain.txt" "$tmp/lookup.txt" || { echo "== FAIL: --lookup changed the greedy text"; exit 1; }
  cmp -s "$tmp/plain.txt" "$tmp/self.txt" || { echo "== FAIL: -md changed the greedy text"; exit 1; }
done
echo "   text (plain): $(head -c 160 "$tmp/plain.txt")..."
echo "   --lookup: $(cat "$tmp/lookup.spec")"
echo "   -md self: $(cat "$tmp/self.spec")"
p=$(median "${rates_plain[@]}") l=$(median "${rates_lookup[@]}") s=$(median "${rates_self[@]}")
# What the last run's speculated rounds alone yield (tokens per round over a round's drafting and
# forward): the rate once the length has settled, without the first rounds and the plain steps.
for label in lookup self; do
  python3 - "$label" "$p" "$tmp/$label.spec" <<'PY'
import re, sys
label, plain, text = sys.argv[1], float(sys.argv[2]), open(sys.argv[3]).read()
m = re.search(r"([0-9.]+) tokens per round.*drafting ([0-9.]+) ms, its forward ([0-9.]+) ms", text)
if m:
    rate = float(m.group(1)) / (float(m.group(2)) + float(m.group(3))) * 1000
    print(f"   {label}: its speculated rounds alone {rate:.2f} t/s ({rate / plain:.2f}x the plain median)")
PY
done
python3 -c 'import sys; p,l,s=map(float,sys.argv[1:]); print(f"== A: plain {p:.2f} t/s, --lookup {l:.2f} t/s ({l/p:.2f}x), -md self {s:.2f} t/s ({s/p:.2f}x); texts identical")' "$p" "$l" "$s"

echo "== B. one node, no links, guesses that fail"
workers=()
rates_splain=() rates_slookup=() rates_gplain=() rates_gdraft=()
sampled=(--temp 1.5 --top-k 0 --top-p 1 --min-p 0 -s 7)
for r in $(seq "$reps"); do
  run splain "${sampled[@]}"
  run slookup "${sampled[@]}" --lookup
  line="   round $r: sampled plain ${rates_splain[-1]} t/s, --lookup ${rates_slookup[-1]}"
  if [ -n "$fail_draft" ]; then
    run gplain --temp 0
    run gdraft --temp 0 -md "$fail_draft"
    line="$line; greedy plain ${rates_gplain[-1]}, -md other ${rates_gdraft[-1]}"
    cmp -s "$tmp/gplain.txt" "$tmp/gdraft.txt" || { echo "== FAIL: -md changed the greedy text"; exit 1; }
  fi
  echo "$line"
done
echo "   --lookup: $(cat "$tmp/slookup.spec")"
p=$(median "${rates_splain[@]}") l=$(median "${rates_slookup[@]}")
python3 -c 'import sys; p,l=map(float,sys.argv[1:]); print(f"== B: sampled plain {p:.2f} t/s, --lookup {l:.2f} t/s ({l/p:.2f}x)")' "$p" "$l"
if [ -n "$fail_draft" ]; then
  echo "   -md other: $(cat "$tmp/gdraft.spec")"
  p=$(median "${rates_gplain[@]}") d=$(median "${rates_gdraft[@]}")
  python3 -c 'import sys; p,d=map(float,sys.argv[1:]); print(f"== B: greedy plain {p:.2f} t/s, -md other model {d:.2f} t/s ({d/p:.2f}x)")' "$p" "$d"
fi
