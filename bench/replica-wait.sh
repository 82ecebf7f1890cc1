#!/usr/bin/env bash
# What REDIS_WAIT_REPLICAS costs: a private Redis primary and its replica
# (two redis-server processes on free ports, nothing on disk), the embedded
# broker, the status relay, and a worker and a gateway restarted for each run with the same
# setting, alternating REDIS_WAIT_REPLICAS=0 and =1 ROUNDS times, each run a
# closed loop of C clients and N requests, every one a new user with stock
# for all (so every answer is a 202, every reserve waits and every claim
# waits). Prints each run's throughput, latency and drain lines from
# `orderpipe bench` (the drain after the last 202 is what the workers'
# claims cost). Knobs:
#   C=50 N=10000 ROUNDS=2 WAIT_TIMEOUT=50ms bench/replica-wait.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/orderpipe-dev} # make build-dev
C=${C:-50}
N=${N:-10000}
ROUNDS=${ROUNDS:-2}
WAIT_TIMEOUT=${WAIT_TIMEOUT:-50ms}
OUT=${OUT:-bin/bench}
PG=${PG:-postgres://postgres@127.0.0.1:5432}

. bench/lib.sh # free_port, wait_port

run="rw$(date +%s)$$"
db="orderpipe_bench_$run"
dir=$(mktemp -d)
mkdir -p "$OUT"
log="$OUT/replica-wait-$run.log"
export DATABASE_URL="$PG/$db?sslmode=disable" ADMIN_TOKEN="bench-$run"
pids=()
gw=""
wk=""
cleanup() {
  local p
  for p in $gw $wk "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in $gw $wk "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

primary=$(free_port)
replica=$(free_port)
for p in "$primary" "$replica"; do
  mkdir -p "$dir/$p"
  args=(--port "$p" --bind 127.0.0.1 --dir "$dir/$p" --save "" --appendonly no --logfile "$dir/$p/redis.log")
  [ "$p" = "$replica" ] && args+=(--replicaof 127.0.0.1 "$primary")
  redis-server "${args[@]}" &
  pids+=($!)
  wait_port "$p" "${pids[@]}"
done
until redis-cli -p "$replica" info replication | grep -q master_link_status:up; do sleep 0.1; done
export REDIS_ADDR="127.0.0.1:$primary"

"$BIN" migrate >"$log" 2>&1
kafka_port=$(free_port)
export KAFKA_BROKERS="127.0.0.1:$kafka_port"
KAFKA_BROKERS="" KAFKA_EMBEDDED_PORT="$kafka_port" "$BIN" kafka >"$log.kafka" 2>&1 &
pids+=($!)
wait_port "$kafka_port" "${pids[@]}"
# The relay publishes orders.status, which the bench's audit checks (I7).
METRICS_ADDR="127.0.0.1:$(free_port)" "$BIN" relay >"$log.relay" 2>&1 &
pids+=($!)

echo "replica-wait: c=$C, n=$N, every request a new user, replica on 127.0.0.1:$replica, REDIS_WAIT_TIMEOUT=$WAIT_TIMEOUT, $(nproc) cores"
for round in $(seq 1 "$ROUNDS"); do
  for w in 0 1; do
    metrics_port=$(free_port)
    METRICS_ADDR="127.0.0.1:$metrics_port" REDIS_WAIT_REPLICAS=$w REDIS_WAIT_TIMEOUT=$WAIT_TIMEOUT \
      "$BIN" worker >>"$log.worker" 2>&1 &
    wk=$!
    wait_port "$metrics_port" "$wk" "${pids[@]}"
    http_port=$(free_port)
    HTTP_ADDR="127.0.0.1:$http_port" REDIS_WAIT_REPLICAS=$w REDIS_WAIT_TIMEOUT=$WAIT_TIMEOUT RATE_LIMIT_USER_RPS=0 \
      "$BIN" gateway >>"$log" 2>&1 &
    gw=$!
    wait_port "$http_port" "$gw" "${pids[@]}"
    echo "round $round, REDIS_WAIT_REPLICAS=$w:"
    "$BIN" bench --url "http://127.0.0.1:$http_port" --worker-metrics "http://127.0.0.1:$metrics_port/metrics" -c "$C" -n "$N" --stock "$N" --retry-share 0 --repeat-share 0 \
      --wait-ready 30s >"$OUT/replica-wait-$run-$round-$w.txt" 2>&1 || true
    grep -E '^  (accepted|rejected by code|throughput|latency|drain|FAIL)' "$OUT/replica-wait-$run-$round-$w.txt" || tail -5 "$OUT/replica-wait-$run-$round-$w.txt"
    kill "$gw" "$wk"
    wait "$gw" "$wk" 2>/dev/null || true
    gw="" wk=""
  done
done
