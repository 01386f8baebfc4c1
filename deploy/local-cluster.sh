#!/usr/bin/env bash
# A local 3-node Vellum cluster from a built binary, for development.
#
#   deploy/local-cluster.sh [DIR]        # default DIR: ./vellum-local
#
# Starts three `vellum serve` processes (pid files in DIR), waits until each answers /readyz,
# prints the endpoints, and stops exactly the processes it started on Ctrl-C or exit.
# Environment: VELLUM_BIN (default: target/release/vellum), BASE_PORT (default 7100).
# Ports: API BASE+i, Raft BASE+10+i, metrics BASE+20+i (--metrics-addr: what
# deploy/prometheus/prometheus.yml scrapes, no token needed). Everything listens on loopback,
# where plain HTTP is allowed; see docs/OPERATIONS.md, "Security", for TLS and tokens.
set -euo pipefail

dir=${1:-vellum-local}
bin=${VELLUM_BIN:-target/release/vellum}
base=${BASE_PORT:-7100}
[ -x "$bin" ] || { echo "no $bin: run 'cargo build --release -p vellum-node' (or set VELLUM_BIN)" >&2; exit 1; }
mkdir -p "$dir"

initial=""
for i in 1 2 3; do initial="$initial${initial:+,}$i=127.0.0.1:$((base + 10 + i))/127.0.0.1:$((base + i))"; done

pids=()
stop() {
  trap - EXIT INT TERM
  for i in 1 2 3; do
    pidfile="$dir/node$i.pid"
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    # Only a process this script started, and only if it is still ours.
    if kill -0 "$pid" 2>/dev/null && grep -q "serve" "/proc/$pid/cmdline" 2>/dev/null; then
      kill -TERM "$pid"
    fi
  done
  for pid in "${pids[@]+"${pids[@]}"}"; do wait "$pid" 2>/dev/null || true; done
  rm -f "$dir"/node*.pid
  echo "stopped"
}
trap stop EXIT INT TERM

for i in 1 2 3; do
  "$bin" serve --id "$i" \
    --api-addr "127.0.0.1:$((base + i))" --raft-addr "127.0.0.1:$((base + 10 + i))" \
    --metrics-addr "127.0.0.1:$((base + 20 + i))" \
    --volume "$dir/node$i.vlm" --volume-size "${VOLUME_SIZE:-256MiB}" \
    --initial-cluster "$initial" >"$dir/node$i.log" 2>&1 &
  pids+=($!)
  echo $! >"$dir/node$i.pid"
done

for i in 1 2 3; do
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$((base + i))/readyz" >/dev/null; then break; fi
    if ! kill -0 "${pids[$((i - 1))]}" 2>/dev/null; then echo "node $i exited; see $dir/node$i.log" >&2; exit 1; fi
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$((base + i))/readyz" >/dev/null || { echo "node $i not ready; see $dir/node$i.log" >&2; exit 1; }
done

for i in 1 2 3; do
  echo "node $i: api http://127.0.0.1:$((base + i))  metrics http://127.0.0.1:$((base + 20 + i))/metrics"
done
echo "try: $bin kv put --endpoint 127.0.0.1:$((base + 1)) hello world"
if [ "${LOCAL_CLUSTER_NO_WAIT:-}" = 1 ]; then exit 0; fi
echo "Ctrl-C stops the cluster"
wait
