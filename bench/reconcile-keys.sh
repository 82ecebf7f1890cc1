#!/usr/bin/env bash
# reconcile-keys.sh: times reconciler passes over a sale of BUYERS live
# orders while the Redis beside it holds 0, 1 M and 10 M unrelated keys
# (bench/reconcilepass). It starts its own redis-server on REDIS_PORT (no
# persistence; 10 M keys take ~1 GB) and its own Postgres database on
# PG_URL's server, and removes both afterwards.
#   bench/reconcile-keys.sh                 # BUYERS=100000 PASSES=3
#   BIN=/path/to/reconcilepass bench/reconcile-keys.sh   # another build of it
set -euo pipefail
cd "$(dirname "$0")/.."

BUYERS=${BUYERS:-100000}
PASSES=${PASSES:-3}
REDIS_PORT=${REDIS_PORT:-6390}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
db=reconcile_keys_$$
dir=$(mktemp -d)

bin=${BIN:-}
if [ -z "$bin" ]; then
  bin=$dir/reconcilepass
  go build -o "$bin" ./bench/reconcilepass/
fi
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --enable-debug-command yes \
  --dir "$dir" --logfile "$dir/redis.log" --daemonize yes --pidfile "$dir/redis.pid"
psql "$PG_URL" -Xqc "CREATE DATABASE $db"
cleanup() {
  kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
  psql "$PG_URL" -Xqc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 50); do
  redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done
echo "reconcile-keys: $(nproc) cores, $(redis-server --version | cut -d' ' -f3), $BUYERS buyers, $PASSES passes each"
# -keys are totals: 0, then 1 M, then 10 M unrelated keys.
DATABASE_URL="${PG_URL%%/postgres\?*}/$db?sslmode=disable" REDIS_ADDR=127.0.0.1:$REDIS_PORT \
  "$bin" -buyers "$BUYERS" -keys 0,1000000,10000000 -passes "$PASSES"
