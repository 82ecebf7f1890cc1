#!/usr/bin/env bash
# `make bench`: start `orderpipe all` on free ports with a fresh database and
# Redis key prefix, run the standard scenario (c=500, one hot item, 20000
# requests for 5000 units, 10% retries, 5% repeats), run redis-benchmark on
# the same reserve script with EVALSHA at the same concurrency, race the Redis
# strategies, then stop the pipeline and remove what the run created.
# Every knob below can be overridden from the environment, e.g.
#   C=200 N=5000 STOCK=1000 make bench     KEEP=1 make bench (keep DB and keys)
# Exit status: the load run's (0 every invariant held, 1 one failed, 2 could
# not run), else the strategies run's.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/orderpipe}
C=${C:-500}
N=${N:-20000}
STOCK=${STOCK:-5000}
ITEMS=${ITEMS:-1}
RETRY=${RETRY:-0.10}
REPEAT=${REPEAT:-0.05}
RB_N=${RB_N:-100000}          # redis-benchmark requests (stock scaled to keep N:STOCK)
OUT=${OUT:-bin/bench}         # logs and JSON reports
PG=${PG:-postgres://postgres@127.0.0.1:5432}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
KEEP=${KEEP:-}

# A port below the kernel's ephemeral range, so no client socket or test
# listening on port 0 takes it between this check and the pipeline's bind.
free_port() {
  local low p
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  for _ in $(seq 1 200); do
    p=$((10000 + RANDOM % (low - 10000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo "bench: no free port found" >&2
  exit 2
}

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
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    wait "$pid" 2>/dev/null || true
  fi
  if [ -n "$rb_dirty" ]; then
    unlink_prefix "$rbprefix"
  fi
  if [ -n "$KEEP" ]; then
    echo "bench: kept database $db and Redis keys under $REDIS_KEY_PREFIX"
    return
  fi
  unlink_prefix "$REDIS_KEY_PREFIX"
  if command -v psql >/dev/null; then
    psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || true
  else
    echo "bench: psql missing, database $db left behind" >&2
  fi
}
trap cleanup EXIT

# Start the pipeline; if it dies before it listens (a port taken meanwhile),
# try again on other ports.
for attempt in 1 2 3; do
  http_port=$(free_port)
  kafka_port=$(free_port)
  export HTTP_ADDR="127.0.0.1:$http_port"
  export KAFKA_EMBEDDED_PORT="$kafka_port"
  echo "bench: starting orderpipe all on $HTTP_ADDR (database $db, key prefix $REDIS_KEY_PREFIX, kafka :$KAFKA_EMBEDDED_PORT); log $log"
  "$BIN" all >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    if ! kill -0 "$pid" 2>/dev/null || (exec 3<>"/dev/tcp/127.0.0.1/$http_port") 2>/dev/null; then
      break
    fi
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    break
  fi
  wait "$pid" 2>/dev/null || true
  echo "bench: the pipeline exited before listening (attempt $attempt): $(tail -1 "$log")" >&2
  if [ "$attempt" -eq 3 ]; then
    exit 2
  fi
done

status=0
"$BIN" bench -c "$C" -n "$N" --stock "$STOCK" --items "$ITEMS" --retry-share "$RETRY" --repeat-share "$REPEAT" \
  --wait-ready 60s --json-out "$OUT/load-$run.json" || status=$?
if ! kill -0 "$pid" 2>/dev/null; then
  echo "bench: the pipeline exited; last lines of $log:" >&2
  tail -20 "$log" >&2
  exit 2
fi
if [ ! -f "$OUT/load-$run.json" ]; then
  exit "$status"
fi
rss_kb=$(ps -o rss= -p "$pid" | tr -d ' ')
gw_rps=$(sed -n 's/^  "reqPerSec": \([0-9.]*\).*/\1/p' "$OUT/load-$run.json" | head -1)

# redis-benchmark: the same reserve script, one round trip per call, at the
# same concurrency, with distinct users and requestIds (__rand_int__).
rb_rps=""
if command -v redis-benchmark >/dev/null && command -v redis-cli >/dev/null; then
  rcli() { redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" "$@"; }
  tag="{a1:i1}"
  now_ms=$(($(date +%s) * 1000))
  sha=$(rcli SCRIPT LOAD "$(cat pkg/stock/reserve.lua)")
  rb_dirty=1
  rcli SET "${rbprefix}stock:$tag" $((RB_N * STOCK / N)) >/dev/null
  rcli HSET "${rbprefix}sale:$tag" starts $((now_ms - 60000)) ends $((now_ms + 3600000)) cap 1 >/dev/null
  echo
  echo "redis-benchmark: EVALSHA reserve.lua ($sha), c=$C, n=$RB_N, stock $((RB_N * STOCK / N))"
  csv=$(redis-benchmark -h "$REDIS_HOST" -p "$REDIS_PORT" -c "$C" -n "$RB_N" -r 1000000000 --csv \
    EVALSHA "$sha" 6 "${rbprefix}stock:$tag" "${rbprefix}sale:$tag" "${rbprefix}limit:$tag:__rand_int__" \
    "${rbprefix}req:$tag:r__rand_int__" "${rbprefix}resv:$tag" "${rbprefix}ord:$tag:o__rand_int__" \
    "r__rand_int__" fp "o__rand_int__" 1 '{"requestId":"r"}' "$now_ms" 86400 | tail -1)
  # CSV: "test","rps","avg","min","p50","p95","p99","max"; count from the end, the test name holds quotes.
  csv=$(echo "$csv" | tr -d '"')
  rb_rps=$(echo "$csv" | awk -F, '{print $(NF-6)}')
  echo "  $(echo "$csv" | awk -F, '{printf "%s req/s, p50 %s ms, p99 %s ms, max %s ms", $(NF-6), $(NF-3), $(NF-1), $NF}')"
  echo "  remaining stock $(rcli GET "${rbprefix}stock:$tag"), journal $(rcli HLEN "${rbprefix}resv:$tag") entries"
  unlink_prefix "$rbprefix"
  rb_dirty=""
else
  echo "bench: redis-benchmark not found (apt-get install -y redis-tools); skipping the EVALSHA baseline" >&2
fi

echo
echo "summary (standard scenario, $(nproc) cores):"
echo "  gateway: ${gw_rps:-?} req/s; pipeline RSS after the run: $((${rss_kb:-0} / 1024)) MiB (ps, pid $pid)"
if [ -n "$rb_rps" ] && [ -n "$gw_rps" ]; then
  echo "  redis-benchmark EVALSHA: $rb_rps req/s; gateway / redis-benchmark = $(awk -v a="$gw_rps" -v b="$rb_rps" 'BEGIN{printf "%.3f", a/b}')"
fi

sstatus=0
"$BIN" bench --redis-strategies -c "$C" -n "$N" --stock "$STOCK" --repeat-share "$REPEAT" \
  --json-out "$OUT/strategies-$run.json" || sstatus=$?
echo
echo "bench: reports in $OUT/load-$run.json and $OUT/strategies-$run.json"
if [ "$status" -eq 0 ]; then
  status=$sstatus
fi
exit "$status"
