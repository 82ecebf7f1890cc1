#!/usr/bin/env bash
# test-redis.sh CMD...: runs CMD with TEST_REDIS_ADDR pointing at a Redis of
# its own — a throwaway redis-server (no persistence) on a free port, stopped
# when CMD ends — so the tests' speed does not depend on what the machine's
# Redis holds (keys `make run` or earlier runs left there: the tests' cleanup
# and anything that SCANs walks them all). Where TEST_REDIS_ADDR is set
# already, or no redis-server is installed, CMD runs as it is.
set -euo pipefail

if [ -n "${TEST_REDIS_ADDR:-}" ] || ! command -v redis-server >/dev/null 2>&1; then
  exec "$@"
fi
port=""
for p in $(seq 6480 6580); do
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || { echo "test-redis: no free port in 6480-6580" >&2; exit 1; }
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --logfile "$dir/redis.log" --daemonize yes --pidfile "$dir/redis.pid"
# Waits for the server to be gone before removing its directory: one still
# shutting down writes its log there, and rm would fail on it (turning a
# green run red). Never changes CMD's exit status.
stop() {
  local pid
  if pid=$(cat "$dir/redis.pid" 2>/dev/null); then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
  fi
  rm -rf "$dir" || true
}
trap stop EXIT
for _ in $(seq 50); do
  redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done
echo "test-redis: the tests' own redis-server on 127.0.0.1:$port" >&2
TEST_REDIS_ADDR=127.0.0.1:$port "$@"
