# Shared by the benchmark scripts: a scratch folder, processes killed on exit, and starters for
# `tandem worker`s and link emulators on loopback. Source it after setting bin, model and linkemu.

tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# start_worker NAME [THREADS [PREFIX...]] -> sets port_NAME. THREADS defaults to 2; PREFIX runs
# the worker under another command (taskset -c 1).
start_worker() {
  local name=$1 threads=${2:-2}
  shift $(( $# < 2 ? $# : 2 ))
  "$@" "$bin" worker --port 0 -t "$threads" -m "$model" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  for _ in $(seq 200); do grep -q "listening on" "$tmp/$name.out" 2>/dev/null && break; sleep 0.05; done
  eval "port_$name=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/$name.out" | head -1)"
}

# start_proxy NAME TARGET_PORT DELAY_MS -> sets proxy_NAME (its stdin held open by a fifo).
start_proxy() {
  local name=$1 target=$2 delay=$3
  mkfifo "$tmp/$name.ctl"
  "$linkemu" --listen 127.0.0.1:0 --target "127.0.0.1:$target" --delay-ms "$delay" <"$tmp/$name.ctl" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  exec {fd}>"$tmp/$name.ctl"
  for _ in $(seq 200); do grep -q "listening on" "$tmp/$name.out" 2>/dev/null && break; sleep 0.05; done
  eval "proxy_$name=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/$name.out" | head -1)"
}
