#!/usr/bin/env bash
# `make bench`: start the pipeline (kafka, worker, closer, relay and gateway as
# separate processes) on free ports with a fresh database and Redis key
# prefix, run the standard scenario (c=500, one hot item, 100000 requests for
# 25000 units, 10% retries, 5% repeats), run redis-benchmark on the same
# reserve script with EVALSHA at the same concurrency, request count and
# stock (three runs, median), then the open loop: the closed-loop maximum of
# a workload where every request is accepted, and at half of it (or RATE) a
# constant arrival rate against the gateway and a trivial Go handler (the
# floor) side by side; race the Redis strategies, then stop the pipeline and
# remove what the run created.
# Every knob below can be overridden from the environment, e.g.
#   C=200 N=20000 STOCK=5000 make bench     KEEP=1 make bench (keep DB and keys)
#   RATE=3000 make bench (the open loop at 3000 req/s)   OPEN=0 make bench (no open loop)
#   WORKER_NICE=19 make bench (worker and closer at nice 19)
# With KAFKA_BROKERS set the pipeline uses that cluster instead of starting
# the embedded broker: a real Apache Kafka, e.g.
#   KAFKA_NODES=3 deploy/kafka/kafka.sh start   # prints 127.0.0.1:9092,...
#   KAFKA_BROKERS=127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 KAFKA_REPLICATION_FACTOR=3 make bench
# The run then creates its own topics and consumer group (named after the
# run) with `orderpipe topics`, and deletes the topics afterwards.
# Exit status: the load run's (0 every invariant held, 1 one failed, 2 could
# not run), else the open loop's, else the strategies run's.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/orderpipe-dev}  # make build-dev: `orderpipe kafka` is only in -tags dev builds
C=${C:-500}
N=${N:-100000}
STOCK=${STOCK:-25000}
ITEMS=${ITEMS:-1}
RETRY=${RETRY:-0.10}
REPEAT=${REPEAT:-0.05}
RB_N=${RB_N:-$N}              # redis-benchmark requests (stock scaled to keep N:STOCK)
STRAT_N=${STRAT_N:-20000}     # the strategies race (BenchmarkStrategies, for N/4 units at c=500): the lock strategy is slow, so a smaller run
OPEN=${OPEN:-1}               # 0: skip the open loop
MAX_N=${MAX_N:-30000}         # the closed-loop maximum of the all-accepted workload (every request a new user, stock for all)
RATE=${RATE:-}                # open-loop req/s; empty: half the maximum just measured
OPEN_SECONDS=${OPEN_SECONDS:-10}
OUT=${OUT:-bin/bench}         # logs and JSON reports
PG=${PG:-postgres://postgres@127.0.0.1:5432}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
KEEP=${KEEP:-}
PPROF=${PPROF:-}              # e.g. 127.0.0.1:6060: the gateway serves its profiles there
unset PPROF_ADDR              # one listener per process: only the gateway's, from PPROF
REAL_KAFKA=${KAFKA_BROKERS:-} # a real cluster to use instead of the embedded broker
WORKER_NICE=${WORKER_NICE:-0} # e.g. 19: the worker and the closer yield the cores to the request path (as on machines of their own)

. bench/lib.sh  # free_port

# phase N TEXT: a progress line as each phase starts, with the time so far.
bench_start=$(date +%s)
phases=5
[ "$OPEN" != 0 ] && phases=6
phase() { echo "bench: [$1/$phases] $2 ($(($(date +%s) - bench_start))s so far)"; }

run="$(date +%s)$$"
db="orderpipe_bench_$run"
export DATABASE_URL="$PG/$db?sslmode=disable"
export REDIS_ADDR="$REDIS_HOST:$REDIS_PORT"
export REDIS_KEY_PREFIX="bench$run:"
export ADMIN_TOKEN="${ADMIN_TOKEN:-bench-$run}"
rbprefix="benchrb$run:"
rb_dirty=""
pid=""
mkdir -p "$OUT"
log="$OUT/pipeline-$run.log"

unlink_prefix() { # SCAN COUNT 1000 + UNLINK: fast even when Redis holds millions of other keys
  REDIS_KEY_PREFIX="$1" "$BIN" bench --purge-keys || true
}
cleanup() {
  stop_all
  rm -f "${times_file:-}"
  if [ -n "$rb_dirty" ]; then
    unlink_prefix "$rbprefix"
  fi
  if [ -n "$KEEP" ]; then
    echo "bench: kept database $db and Redis keys under $REDIS_KEY_PREFIX"
    return
  fi
  unlink_prefix "$REDIS_KEY_PREFIX"
  if [ -n "$REAL_KAFKA" ]; then
    for t in "$KAFKA_TOPIC" "$KAFKA_DLQ_TOPIC"; do
      deploy/kafka/kafka.sh java org.apache.kafka.tools.TopicCommand --bootstrap-server "$REAL_KAFKA" \
        --delete --topic "$t" >/dev/null 2>&1 || echo "bench: topic $t left on $REAL_KAFKA" >&2
    done
  fi
  if command -v psql >/dev/null; then
    psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || true
  else
    echo "bench: psql missing, database $db left behind" >&2
  fi
}
trap cleanup EXIT

# Start the pipeline as production runs it, one process per component: the
# embedded broker (`orderpipe kafka`), the worker, the closer, the relay and
# the gateway, so the gateway's own CPU and memory are what is measured. If a
# process dies before the gateway listens (a port taken meanwhile), try again
# on other ports.
pids=()
kafka_pid="" worker_pid="" closer_pid=""
stop_all() {
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  pids=()
}
alive() {
  local p
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || return 1
  done
}
"$BIN" migrate >"$log" 2>&1 || { echo "bench: migrate failed; see $log" >&2; exit 2; }
if [ -n "$REAL_KAFKA" ]; then
  export KAFKA_TOPIC="orders.requested.bench$run" KAFKA_GROUP="orderpipe-bench$run"
  export KAFKA_DLQ_TOPIC="$KAFKA_TOPIC.dlq"
  "$BIN" topics >>"$log" 2>&1 || { echo "bench: creating topics on $REAL_KAFKA failed; see $log" >&2; exit 2; }
fi
for attempt in 1 2 3; do
  http_port=$(free_port)
  metrics_port=$(free_port)
  export HTTP_ADDR="127.0.0.1:$http_port"
  if [ -n "$REAL_KAFKA" ]; then
    export KAFKA_BROKERS="$REAL_KAFKA"
    echo "bench: starting worker, closer, relay and gateway on $HTTP_ADDR (database $db, key prefix $REDIS_KEY_PREFIX, kafka $KAFKA_BROKERS, topic $KAFKA_TOPIC); logs $log*"
  else
    kafka_port=$(free_port)
    export KAFKA_BROKERS="127.0.0.1:$kafka_port"
    echo "bench: starting orderpipe kafka, worker, closer, relay and gateway on $HTTP_ADDR (database $db, key prefix $REDIS_KEY_PREFIX, kafka $KAFKA_BROKERS); logs $log*"
    KAFKA_BROKERS="" KAFKA_EMBEDDED_PORT="$kafka_port" "$BIN" kafka >"$log.kafka" 2>&1 &
    kafka_pid=$!
    pids+=("$kafka_pid")
    for _ in $(seq 1 100); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$kafka_port") 2>/dev/null || ! kill -0 "$kafka_pid" 2>/dev/null; then
        break
      fi
      sleep 0.1
    done
  fi
  # The lag gauge at the bench's sampling period (100 ms), not the 2 s default.
  METRICS_ADDR="127.0.0.1:$metrics_port" WORKER_LAG_INTERVAL=100ms nice -n "$WORKER_NICE" "$BIN" worker >"$log.worker" 2>&1 &
  worker_pid=$!
  pids+=("$worker_pid")
  METRICS_ADDR="127.0.0.1:0" nice -n "$WORKER_NICE" "$BIN" closer >"$log.closer" 2>&1 &
  closer_pid=$!
  pids+=("$closer_pid")
  # The relay publishes orders.status, which the audit holds to I7.
  METRICS_ADDR="127.0.0.1:0" nice -n "$WORKER_NICE" "$BIN" relay >"$log.relay" 2>&1 &
  pids+=("$!")
  PPROF_ADDR="$PPROF" "$BIN" gateway >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 600); do
    if ! alive || (exec 3<>"/dev/tcp/127.0.0.1/$http_port") 2>/dev/null; then
      break
    fi
    sleep 0.1
  done
  if alive; then
    break
  fi
  echo "bench: a component exited before the gateway listened (attempt $attempt): $(tail -q -n1 "$log" "$log.kafka" "$log.worker" "$log.closer" "$log.relay" 2>/dev/null | tr '\n' ' ')" >&2
  stop_all
  if [ "$attempt" -eq 3 ]; then
    exit 2
  fi
done

# CPU time of every process on this machine that takes part, read from
# /proc before and after the load run (it includes the sale's creation, the
# drain and the audit): where the two cores went.
cpu_ticks() { # utime+stime of the given pids, summed
  local p t=0
  for p in "$@"; do
    if [ -r "/proc/$p/stat" ]; then
      t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    fi
  done
  echo "$t"
}
gateway_pid=$pid # for procs (bench/lib.sh)
hz=$(getconf CLK_TCK)
# cpu_snapshot NAME: the parts' ticks now, into the associative array NAME.
cpu_snapshot() {
  local -n into=$1
  local n
  for n in "${names[@]}"; do
    # shellcheck disable=SC2046
    into[$n]=$(cpu_ticks $(procs "$n"))
  done
}
# cpu_since NAME: " part seconds" for every part since the snapshot NAME.
cpu_since() {
  local -n from=$1
  local n after out=""
  for n in "${names[@]}"; do
    # shellcheck disable=SC2046
    after=$(cpu_ticks $(procs "$n"))
    out+=" $n $(awk -v t=$((after - ${from[$n]})) -v hz="$hz" 'BEGIN{printf "%.2f", t / hz}')"
  done
  echo "$out"
}
# The load client's CPU: `times` in this shell (not in a subshell, which
# would report its own) gives the user+sys of the children it waited for.
times_file="$OUT/times-$run"
children_cpu() { tail -1 "$times_file" | awk '{gsub(/[ms]/, " "); print ($1 * 60 + $2) + ($3 * 60 + $4)}'; }
declare -A before
cpu_snapshot before
times >"$times_file"
client_before=$(children_cpu)

status=0
phase 1 "the standard scenario: c=$C, $N requests for $STOCK units on $ITEMS item(s), ${RETRY} retries, ${REPEAT} repeats"
"$BIN" bench -c "$C" -n "$N" --stock "$STOCK" --items "$ITEMS" --retry-share "$RETRY" --repeat-share "$REPEAT" \
  --worker-metrics "http://127.0.0.1:$metrics_port/metrics" --wait-ready 60s --json-out "$OUT/load-$run.json" --html-out "$OUT/load-$run.html" >"$OUT/load-$run.txt" || status=$?
# The whole report is in the file; here the lines that say how it went.
grep -E '^  (accepted|rejected by code|no answer|oversold|duplicates|lost|throughput|latency|drain)|FAIL' "$OUT/load-$run.txt" || cat "$OUT/load-$run.txt"
if [ -s "$OUT/load-$run.html" ]; then echo "  the report with its charts: $OUT/load-$run.html"; fi
times >"$times_file"
client_after=$(children_cpu)

cpu_line="  CPU seconds during the load run:$(cpu_since before)"
cpu_line+=" load-client $(awk -v a="$client_after" -v b="$client_before" 'BEGIN{printf "%.2f", a - b}')"
if ! alive; then
  echo "bench: a component exited; last lines of $log*:" >&2
  tail -n 20 "$log" "$log.kafka" "$log.worker" "$log.closer" "$log.relay" >&2
  exit 2
fi
if [ ! -f "$OUT/load-$run.json" ]; then
  exit "$status"
fi
rss_kb=$(ps -o rss= -p "$pid" | tr -d ' ')
gw_rps=$(sed -n 's/^  "reqPerSec": \([0-9.]*\).*/\1/p' "$OUT/load-$run.json" | head -1)
gw_rps=${gw_rps:+$(awk -v v="$gw_rps" 'BEGIN{printf "%.0f", v}')}
gw_lat=$(sed -n 's/^  latency (ms) *//p' "$OUT/load-$run.txt" | head -1)
verdict=$(grep -c '^  FAIL' "$OUT/load-$run.txt" || true)

# redis-benchmark: the same reserve script, one round trip per call, at the
# same concurrency, with distinct users and requestIds (__rand_int__) and
# arguments of the gateway's sizes (an event like the gateway's, a 24-hex
# fingerprint, an orderNo of the gateway's form). Three runs, each on a fresh
# stock; the ratio uses their median, since one run of a few seconds on a
# shared 2-core machine varies by ±15 %.
rb_rps=""
if command -v redis-benchmark >/dev/null && command -v redis-cli >/dev/null; then
  rcli() { redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" "$@"; }
  tag="{a1:i1}"
  now_ms=$(($(date +%s) * 1000))
  sha=$(rcli SCRIPT LOAD "$(cat pkg/stock/reserve.lua)")
  rb_stock=$((RB_N * STOCK / N))
  ono="1-1-mil0x2kq__rand_int__"
  event="{\"requestId\":\"r__rand_int__\",\"orderNo\":\"$ono\",\"userId\":__rand_int__,\"activityId\":1,\"itemId\":1,\"quantity\":1,\"reservedAt\":\"2026-11-29T10:00:00.123456Z\"}"
  phase 2 "redis-benchmark: EVALSHA reserve.lua, c=$C, n=$RB_N, stock $rb_stock, 3 runs (the floor of one reserve)"
  rates=()
  for i in 1 2 3; do
    rb_dirty=1
    rcli SET "${rbprefix}stock:$tag" "$rb_stock" >/dev/null
    rcli HSET "${rbprefix}sale:$tag" starts $((now_ms - 60000)) ends $((now_ms + 3600000)) cap 1 >/dev/null
    csv=$(redis-benchmark -h "$REDIS_HOST" -p "$REDIS_PORT" -c "$C" -n "$RB_N" -r 1000000000 --csv \
      EVALSHA "$sha" 8 "${rbprefix}stock:$tag" "${rbprefix}sale:$tag" "${rbprefix}limit:$tag:__rand_int__" \
      "${rbprefix}req:$tag:r$i-__rand_int__" "${rbprefix}resv:$tag" "${rbprefix}ord:$tag:$ono" "${rbprefix}fate:$tag:$ono" \
      "${rbprefix}lmk:$tag" "r$i-__rand_int__" 0123456789abcdef01234567 "$ono" 1 "$event" 86400 "" __rand_int__ | tail -1)
    # CSV: "test","rps","avg","min","p50","p95","p99","max"; count from the end, the test name holds quotes.
    csv=$(echo "$csv" | tr -d '"')
    rates+=("$(echo "$csv" | awk -F, '{printf "%.0f", $(NF-6)}')")
    echo "  run $i: $(echo "$csv" | awk -F, '{printf "%.0f req/s, p50 %.2f ms, p99 %.2f ms, max %.2f ms", $(NF-6), $(NF-3), $(NF-1), $NF}');" \
      "remaining stock $(rcli GET "${rbprefix}stock:$tag"), journal $(rcli HLEN "${rbprefix}resv:$tag") entries"
    unlink_prefix "$rbprefix" 2>/dev/null
    rb_dirty=""
  done
  rb_rps=$(printf '%s\n' "${rates[@]}" | sort -g | sed -n 2p)
else
  phase 2 "redis-benchmark not found (apt-get install -y redis-tools): no EVALSHA baseline"
fi

# The open loop. Its workload: every request a new user with
# stock for all, so every answer is a 202 (the produce waited for). Its
# closed-loop maximum at c=$C is measured first, on a sale of its own; then
# the same workload at a constant rate of half that (or RATE) for
# OPEN_SECONDS, against the trivial handler (a process of its own, started
# here) and then the gateway, each request's latency from its intended time.
ostatus=0
if [ "$OPEN" != 0 ]; then
  floor_port=$(free_port)
  "$BIN" bench --serve-floor "127.0.0.1:$floor_port" >"$log.floor" 2>&1 &
  floor_pid=$!
  pids+=("$floor_pid")
  if [ -z "$RATE" ]; then
    phase 3 "open loop: the closed-loop maximum first (c=$C, $MAX_N requests, every one accepted)"
    "$BIN" bench -c "$C" -n "$MAX_N" --stock "$MAX_N" --retry-share 0 --repeat-share 0 \
      --worker-metrics "http://127.0.0.1:$metrics_port/metrics" --json-out "$OUT/max-$run.json" >"$OUT/max-$run.txt" || ostatus=$?
    grep -E '^  (throughput|latency|FAIL)' "$OUT/max-$run.txt" || cat "$OUT/max-$run.txt"
    max_rps=$(sed -n 's/^  "reqPerSec": \([0-9.]*\).*/\1/p' "$OUT/max-$run.json" 2>/dev/null | head -1)
    RATE=$(awk -v m="${max_rps:-0}" 'BEGIN{printf "%d", m / 2}')
  else
    phase 3 "open loop: RATE=$RATE given, no maximum measured"
  fi
  if [ "${RATE:-0}" -gt 0 ] 2>/dev/null; then
    open_n=$((RATE * OPEN_SECONDS))
    phase 4 "open loop: $RATE req/s for ${OPEN_SECONDS}s ($open_n requests, at most $C connections), the trivial handler then the gateway"
    curl -s "http://$HTTP_ADDR/metrics" >"$OUT/waits0-$run.txt" || true
    declare -A obefore
    cpu_snapshot obefore
    floor_before=$(cpu_ticks "$floor_pid")
    times >"$times_file"
    oclient_before=$(children_cpu)
    "$BIN" bench -c "$C" --rate "$RATE" -n "$open_n" --stock "$open_n" --retry-share 0 --repeat-share 0 \
      --floor-url "http://127.0.0.1:$floor_port" --worker-metrics "http://127.0.0.1:$metrics_port/metrics" \
      --json-out "$OUT/open-$run.json" --html-out "$OUT/open-$run.html" >"$OUT/open-$run.txt" || ostatus=$?
    times >"$times_file"
    oclient_after=$(children_cpu)
    ocpu="$(cpu_since obefore) trivial-handler $(awk -v t=$(($(cpu_ticks "$floor_pid") - floor_before)) -v hz="$hz" 'BEGIN{printf "%.2f", t / hz}')"
    ocpu+=" load-client $(awk -v a="$oclient_after" -v b="$oclient_before" 'BEGIN{printf "%.2f", a - b}')"
    sed -n '/^open loop:/,/gateway \/ trivial handler/p' "$OUT/open-$run.txt"
    echo "  CPU seconds during the open loop (the trivial handler's run, then the gateway's):$ocpu"
    if [ -s "$OUT/open-$run.html" ]; then echo "  the report with its charts: $OUT/open-$run.html"; fi
    # What the gateway's two waits took in the open loop, from its own histograms.
    if curl -s "http://$HTTP_ADDR/metrics" >"$OUT/waits1-$run.txt" && [ -s "$OUT/waits0-$run.txt" ]; then
      echo "the gateway's waits during the open loop (its histograms; GATEWAY_PRODUCER=${GATEWAY_PRODUCER:-group}):"
      waits_summary "$OUT/waits0-$run.txt" "$OUT/waits1-$run.txt"
    fi
    rm -f "$OUT/waits0-$run.txt" "$OUT/waits1-$run.txt"
  else
    echo "bench: no open-loop rate (the maximum run failed?); skipping the open loop" >&2
    ostatus=2
  fi
fi
if ! alive; then
  echo "bench: a component exited; last lines of $log*:" >&2
  tail -n 20 "$log" "$log.kafka" "$log.worker" "$log.closer" "$log.relay" >&2
  exit 2
fi

sstatus=0
phase $((phases - 1)) "the Redis strategies race (pkg/stock's BenchmarkStrategies): naive, lock, reserve script; c=500, $STRAT_N requests for $((STRAT_N / 4)) units"
TEST_REDIS_ADDR="$REDIS_ADDR" go test -tags dev -run '^$' -bench Strategies -benchtime "${STRAT_N}x" ./pkg/stock/ \
  >"$OUT/strategies-$run.txt" 2>&1 || sstatus=$?
grep '^BenchmarkStrategies' "$OUT/strategies-$run.txt" || true
phase "$phases" "stopping the pipeline, removing its database and keys"

# One screen: the figures that matter, each with where its detail is.
echo
echo "summary ($(nproc) cores, $(($(date +%s) - bench_start))s; every figure of this run, with its detail, in $OUT/*-$run.*):"
if [ "${verdict:-1}" = 0 ] && [ "$status" -eq 0 ]; then
  echo "  invariants: every one held (I1-I7, nothing lost; $OUT/load-$run.txt)"
else
  echo "  invariants: FAILED, see $OUT/load-$run.txt"
fi
echo "  gateway, closed loop c=$C: ${gw_rps:-?} req/s; latency $gw_lat"
echo "  gateway RSS after the run: $((${rss_kb:-0} / 1024)) MiB"
if [ -n "$rb_rps" ] && [ -n "$gw_rps" ]; then
  echo "  redis-benchmark EVALSHA (median of 3): $rb_rps req/s; gateway / redis-benchmark = $(awk -v a="$gw_rps" -v b="$rb_rps" 'BEGIN{printf "%.2f", a/b}')"
fi
echo "$cpu_line"
if [ -s "$OUT/open-$run.txt" ]; then
  echo "  open loop at ${RATE} req/s (ms, from each request's intended time; $OUT/open-$run.txt):"
  sed -n '/^open loop:/,/gateway \/ trivial handler/p' "$OUT/open-$run.txt" | sed 1d | sed 's/^/  /' || true
fi
if [ "$sstatus" -eq 0 ]; then
  echo "  Redis strategies: the reserve script never oversold nor granted a user twice ($OUT/strategies-$run.txt)"
else
  echo "  Redis strategies: FAILED, see $OUT/strategies-$run.txt"
fi
if [ "$status" -eq 0 ]; then
  status=$ostatus
fi
if [ "$status" -eq 0 ]; then
  status=$sstatus
fi
exit "$status"
