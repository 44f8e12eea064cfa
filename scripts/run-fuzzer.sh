#!/usr/bin/env bash
# run-fuzzer.sh FUZZER SECONDS CORPUS_DIR [MAKE_SEEDS SHARED_DIR]
# Runs a libFuzzer binary for SECONDS over the working corpus CORPUS_DIR. With MAKE_SEEDS and an
# existing SHARED_DIR, first writes shrunken copies of the shared GGUF files as seeds. Exits
# non-zero if the fuzzer finds a crash, leak, timeout or sanitizer report; prints the number of
# executions.
set -uo pipefail
fuzzer=$1 seconds=$2 corpus=$3 make_seeds=${4:-} shared=${5:-}
mkdir -p "$corpus"
seeds=()
if [[ -n "$make_seeds" && -d "$shared/reference/models" ]]; then
  "$make_seeds" "$shared/reference/models" "$shared/tokenizer" "$corpus-seeds" || exit 1
  seeds+=("$corpus-seeds")
else
  echo "run-fuzzer: no shared files at '$shared'; fuzzing from the working corpus only" >&2
fi
log="$corpus.log"
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$corpus-" "$corpus" "${seeds[@]}" >"$log" 2>&1
status=$?
grep -E "INITED|DONE|stat::number_of_executed_units|stat::peak_rss|==[0-9]+==|SUMMARY|Test unit written" "$log"
if [[ $status -ne 0 ]]; then
  echo "run-fuzzer: $fuzzer failed with status $status; last lines of $log:" >&2
  tail -n 40 "$log" >&2
fi
exit "$status"
