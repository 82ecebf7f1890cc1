#!/usr/bin/env bash
# The CPU cost of one request in each component, for docs/capacity.md.
# Starts the pipeline as bench/run.sh does, one process per component (the
# embedded broker `orderpipe kafka`, worker, closer, gateway) on free ports
# with a fresh database and Redis key prefix, and reads each process's
# utime+stime from /proc/<pid>/stat around three phases:
#   idle     IDLE seconds without load (what the components cost doing nothing)
#   accept   N_ACC requests on a sale with N_ACC units: every one accepted (202)
#   refuse   N_REF requests on a sale with REF_STOCK units: all but
#            REF_STOCK answered 409 SOLD_OUT (a sale after sell-out)
# and for the same phases redis-server's own CPU (every redis-server process),
# its INFO commandstats (EVALSHA calls and usec), and every postgres
# process's CPU. Each load phase is the load tool (`orderpipe bench`, c=C, no
# retries or repeats) until the pipeline has drained; its audit queries run
# in connections of their own, which close before the reading and so are
# not counted. Prints per phase, per component: CPU seconds, and CPU
# milliseconds per request (= CPU seconds per 1000 requests), and the
# worker's transactions over the phase (count, mean duration, messages each,
# duration per message, from its orderpipe_worker_batch_* histograms). Where
# the binary has the orders.status relay it runs too, as its own part.
# Then the floors, in the same run: the open phase sends N_OPEN requests at
# a constant OPEN_RATE, first to a trivial net/http handler (`orderpipe bench
# --serve-floor`) and then to the gateway (every one accepted), and
# bench/redis-cost.sh times the bare reserve script under redis-benchmark
# (RB_N calls); the summary sets the gateway's CPU per accepted order beside
# the trivial handler's per request, and Redis's per accepted order beside
# the bare script's per call (OPEN_RATE=0: no floors).
# SHARED=1 counts, for redis and postgres, only the run's redis-server and
# the backends serving the run's database (for a machine other work shares).
#   heavy bash bench/cpu.sh            N_ACC=60000 N_REF=60000 C=100 IDLE=10
# With KAFKA_BROKERS set it uses that cluster instead of starting the
# embedded broker (topics and group named after the run, created with
# `orderpipe topics` and deleted afterwards), and "kafka" is every Apache
# Kafka JVM on this machine (pgrep -f kafka.Kafka), e.g.
#   KAFKA_NODES=3 KAFKA_BASE_PORT=29092 deploy/kafka/kafka.sh start
#   KAFKA_BROKERS=127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094 KAFKA_REPLICATION_FACTOR=3 bench/cpu.sh
# Exit status: 0, or 2 when the pipeline could not run or a phase failed.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/orderpipe-dev}
N_ACC=${N_ACC:-60000}
N_REF=${N_REF:-60000}
REF_STOCK=${REF_STOCK:-100}
C=${C:-100}
IDLE=${IDLE:-10}
OPEN_RATE=${OPEN_RATE:-3000}
N_OPEN=${N_OPEN:-$((OPEN_RATE * 15))}
RB_N=${RB_N:-200000}
OUT=${OUT:-bin/bench}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
REAL_KAFKA=${KAFKA_BROKERS:-}

. bench/lib.sh

fresh_run cpu
export REDIS_ADDR="$REDIS_HOST:$REDIS_PORT"
unset PPROF_ADDR
tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  drop_run cpu
  if [ -n "$REAL_KAFKA" ]; then
    for t in "$KAFKA_TOPIC" "$KAFKA_DLQ_TOPIC"; do
      deploy/kafka/kafka.sh java org.apache.kafka.tools.TopicCommand --bootstrap-server "$REAL_KAFKA" \
        --delete --topic "$t" >/dev/null 2>&1 || echo "cpu: topic $t left on $REAL_KAFKA" >&2
    done
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

"$BIN" migrate >"$log" 2>&1 || { echo "cpu: migrate failed; see $log" >&2; exit 2; }
http_port=$(free_port)
metrics_port=$(free_port)
export HTTP_ADDR="127.0.0.1:$http_port"
if [ -n "$REAL_KAFKA" ]; then
  export KAFKA_TOPIC="orders.requested.cpu$run" KAFKA_GROUP="orderpipe-cpu$run"
  export KAFKA_DLQ_TOPIC="$KAFKA_TOPIC.dlq"
  "$BIN" topics >>"$log" 2>&1 || { echo "cpu: creating topics on $REAL_KAFKA failed; see $log" >&2; exit 2; }
  kafka_pid="(Apache Kafka)"
else
  kafka_port=$(free_port)
  export KAFKA_BROKERS="127.0.0.1:$kafka_port"
  KAFKA_BROKERS="" KAFKA_EMBEDDED_PORT="$kafka_port" "$BIN" kafka >"$log.kafka" 2>&1 &
  kafka_pid=$!
  pids+=("$kafka_pid")
  wait_port "$kafka_port" "$kafka_pid" || { echo "cpu: orderpipe kafka did not start; see $log.kafka" >&2; exit 2; }
fi
METRICS_ADDR="127.0.0.1:$metrics_port" "$BIN" worker >"$log.worker" 2>&1 &
worker_pid=$!
METRICS_ADDR="127.0.0.1:0" "$BIN" closer >"$log.closer" 2>&1 &
closer_pid=$!
"$BIN" gateway >"$log" 2>&1 &
gateway_pid=$!
pids+=("$worker_pid" "$closer_pid" "$gateway_pid")
if "$BIN" help 2>&1 | grep -qw relay; then # the orders.status relay, where the binary has one
  METRICS_ADDR="127.0.0.1:0" "$BIN" relay >"$log.relay" 2>&1 &
  relay_pid=$!
  pids+=("$relay_pid")
  names=(gateway worker relay closer kafka redis postgres)
fi
if [ "$OPEN_RATE" -gt 0 ]; then
  floor_port=$(free_port)
  "$BIN" bench --serve-floor "127.0.0.1:$floor_port" >"$log.floor" 2>&1 &
  floor_pid=$!
  pids+=("$floor_pid")
  names+=(floor)
fi
wait_port "$http_port" "${pids[@]}" || { echo "cpu: a component exited before the gateway listened; see $log*" >&2; exit 2; }

snapshot() { # snapshot DIR: every component's per-pid ticks and Redis's EVALSHA counters
  mkdir -p "$1"
  local n
  for n in "${names[@]}"; do
    # shellcheck disable=SC2046
    pid_ticks $(procs "$n") >"$1/$n"
  done
  redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" INFO commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2/p' >"$1/evalsha"
  curl -s "http://127.0.0.1:$metrics_port/metrics" |
    grep -E '^orderpipe_worker_batch_(commit_seconds|size)_(sum|count) ' >"$1/worker.metrics" || true
  date +%s.%N >"$1/at"
}
report() { # report NAME BEFORE AFTER REQUESTS
  local name=$1 b=$2 a=$3 reqs=$4 n cpu secs calls usec
  secs=$(awk -v a="$(cat "$a/at")" -v b="$(cat "$b/at")" 'BEGIN{printf "%.1f", a - b}')
  echo "$name: $reqs requests, ${secs} s"
  for n in "${names[@]}"; do
    cpu=$(ticks_between "$b/$n" "$a/$n")
    if [ "$reqs" -gt 0 ]; then
      printf '  %-9s %7.2f CPU s  %6.3f CPU ms/request\n' "$n" "$cpu" "$(awk -v c="$cpu" -v r="$reqs" 'BEGIN{print c * 1000 / r}')"
    else
      printf '  %-9s %7.2f CPU s  %6.3f CPU s per second\n' "$n" "$cpu" "$(awk -v c="$cpu" -v s="$secs" 'BEGIN{print c / s}')"
    fi
  done
  read -r calls usec < <(paste -d' ' "$b/evalsha" "$a/evalsha" | awk '{print $3 - $1, $4 - $2}')
  if [ "${calls:-0}" -gt 0 ]; then
    printf '  redis EVALSHA: %d calls, %.1f usec/call (INFO commandstats: inside the script only)\n' "$calls" "$(awk -v u="$usec" -v c="$calls" 'BEGIN{print u / c}')"
  fi
  # the worker's transactions (orderpipe_worker_batch_commit_seconds, _batch_size)
  awk 'FNR == 1 { f++ } { v[f, $1] = $2 }
    END {
      n = v[2, "orderpipe_worker_batch_commit_seconds_count"] - v[1, "orderpipe_worker_batch_commit_seconds_count"]
      s = v[2, "orderpipe_worker_batch_commit_seconds_sum"] - v[1, "orderpipe_worker_batch_commit_seconds_sum"]
      m = v[2, "orderpipe_worker_batch_size_sum"] - v[1, "orderpipe_worker_batch_size_sum"]
      if (n > 0 && m > 0) printf "  worker transactions: %d, mean %.1f ms, %.0f messages each, %.1f usec per message\n", n, s * 1000 / n, m / (v[2, "orderpipe_worker_batch_size_count"] - v[1, "orderpipe_worker_batch_size_count"]), s * 1e6 / m
    }' "$b/worker.metrics" "$a/worker.metrics"
}
load() { # load NAME N STOCK [bench flags...]: one load phase; prints its report
  local name=$1 n=$2 stock=$3 acc sold
  shift 3
  snapshot "$tmp/$name.before"
  "$BIN" bench -c "$C" -n "$n" --stock "$stock" --retry-share 0 --repeat-share 0 --wait-ready 60s "$@" \
    --worker-metrics "http://127.0.0.1:$metrics_port/metrics" --json-out "$OUT/cpu-$name-$run.json" \
    >"$OUT/cpu-$name-$run.txt" 2>"$OUT/cpu-$name-$run.err" || { echo "cpu: the $name phase failed; see $OUT/cpu-$name-$run.*" >&2; exit 2; }
  snapshot "$tmp/$name.after"
  acc=$(sed -n 's/^  "accepted": \([0-9]*\).*/\1/p' "$OUT/cpu-$name-$run.json" | head -1)
  sold=$(sed -n 's/^ *"SOLD_OUT": \([0-9]*\).*/\1/p' "$OUT/cpu-$name-$run.json" | head -1)
  report "$name" "$tmp/$name.before" "$tmp/$name.after" "$n"
  echo "  answers: ${acc:-0} accepted, ${sold:-0} sold out; $(grep -E '^  throughput' "$OUT/cpu-$name-$run.txt" | sed 's/^ *//')"
}

echo "cpu: gateway $gateway_pid, worker $worker_pid, closer $closer_pid, kafka $kafka_pid on $HTTP_ADDR (database $db); $(nproc) cores"
sleep 2 # the worker joins its group
snapshot "$tmp/idle.before"
sleep "$IDLE"
snapshot "$tmp/idle.after"
report idle "$tmp/idle.before" "$tmp/idle.after" 0
load accept "$N_ACC" "$N_ACC"
load refuse "$N_REF" "$REF_STOCK"
[ "$OPEN_RATE" -gt 0 ] || exit 0

# The floors. The open phase's components idle through the trivial
# handler's half of it; their idle cost (the idle phase's rate) over that
# half is taken off.
load open "$N_OPEN" "$N_OPEN" --rate "$OPEN_RATE" --floor-url "http://127.0.0.1:$floor_port"
rb=$(REDIS_HOST="$REDIS_HOST" REDIS_PORT="$REDIS_PORT" N="$RB_N" BIN="$BIN" bench/redis-cost.sh)
echo "$rb" | sed 's/^/  /'
per() { # per NAME PHASE N: CPU µs of NAME per request in PHASE, less its idle rate over IDLE_S seconds
  awk -v c="$(ticks_between "$tmp/$2.before/$1" "$tmp/$2.after/$1")" -v i="$(ticks_between "$tmp/idle.before/$1" "$tmp/idle.after/$1")" \
    -v idle="$IDLE" -v s="${IDLE_S:-0}" -v n="$3" 'BEGIN{printf "%.1f", (c - i / idle * s) * 1e6 / n}'
}
half=$(awk -v n="$N_OPEN" -v r="$OPEN_RATE" 'BEGIN{printf "%.1f", n / r}')
gw=$(IDLE_S=$half per gateway open "$N_OPEN")
fl=$(per floor open "$N_OPEN")
rd=$(IDLE_S=$half per redis open "$N_OPEN")
bare=$(echo "$rb" | awk '$1 == "reserve-accept" {for (i = 1; i <= NF; i++) if ($i == "us/call") print $(i - 2)}')
wk=$(IDLE_S=$half per worker open "$N_OPEN")
pg=$(IDLE_S=$half per postgres open "$N_OPEN")
echo "floors, at $OPEN_RATE req/s (CPU µs per request; the components' idle cost taken off):"
printf '  gateway per accepted order %6.1f   trivial handler per request %6.1f   ×%s (goal ≤ 1.5)\n' "$gw" "$fl" "$(awk -v a="$gw" -v b="$fl" 'BEGIN{printf "%.2f", a / b}')"
printf '  redis per accepted order   %6.1f   bare reserve script per call %5.1f   ×%s (goal ≤ 1.5)\n' "$rd" "${bare:-0}" "$(awk -v a="$rd" -v b="${bare:-0}" 'BEGIN{if (b > 0) printf "%.2f", a / b; else print "?"}')"
printf '  worker + postgres per order %5.1f + %.1f (the open phase'"'"'s worker transactions above)\n' "$wk" "$pg"
