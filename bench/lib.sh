# Shared by the benchmark scripts: start `tandem worker`s and link emulators on loopback.
# The caller sets bin, model, linkemu, tmp and pids=() and cleans up its pids on exit.

start_worker() {  # NAME [THREADS] -> sets port_NAME
  local name=$1 threads=${2:-2}
  "$bin" worker --port 0 -t "$threads" -m "$model" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  for _ in $(seq 200); do grep -q "listening on" "$tmp/$name.out" 2>/dev/null && break; sleep 0.05; done
  eval "port_$name=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/$name.out" | head -1)"
}

start_proxy() {  # NAME TARGET_PORT DELAY_MS -> sets proxy_NAME (its stdin held open by a fifo)
  local name=$1 target=$2 delay=$3
  mkfifo "$tmp/$name.ctl"
  "$linkemu" --listen 127.0.0.1:0 --target "127.0.0.1:$target" --delay-ms "$delay" <"$tmp/$name.ctl" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  exec {fd}>"$tmp/$name.ctl"
  for _ in $(seq 200); do grep -q "listening on" "$tmp/$name.out" 2>/dev/null && break; sleep 0.05; done
  eval "proxy_$name=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/$name.out" | head -1)"
}
