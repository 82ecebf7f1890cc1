#!/usr/bin/env bash
# What one call costs Redis itself, for docs/capacity.md: redis-server's own
# CPU (utime+stime of every redis-server process, /proc/<pid>/stat) per call
# while redis-benchmark, pipelined P deep over C connections as the gateway's
# batcher pipelines, runs
#   reserve-sold-out  the reserve script (EVALSHA) on an item with 0 units: a refusal
#   reserve-accept    the reserve script on an item with enough units: a reservation
#   exists            EXISTS of a dedup record (what a gateway that remembered
#                     "sold out" would still have to ask, to answer a retry
#                     of an accepted request with its replay)
# under a throwaway key prefix it deletes afterwards.
#   heavy bash bench/redis-cost.sh           N=300000 C=50 P=16
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-300000}
C=${C:-50}
P=${P:-16}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
BIN=${BIN:-bin/orderpipe-dev}

. bench/lib.sh

prefix="rcost$(date +%s)$$:"
rcli() { redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" "$@"; }
cleanup() { REDIS_KEY_PREFIX="$prefix" "$BIN" bench --purge-keys >/dev/null 2>&1 || true; }
trap cleanup EXIT
tag="{a1:i1}"
now_ms=$(($(date +%s) * 1000))
sha=$(rcli SCRIPT LOAD "$(cat pkg/stock/reserve.lua)")
ono="1-1-mil0x2kq__rand_int__"
event="{\"requestId\":\"r__rand_int__\",\"orderNo\":\"$ono\",\"userId\":__rand_int__,\"activityId\":1,\"itemId\":1,\"quantity\":1,\"reservedAt\":\"2026-11-29T10:00:00.123456Z\"}"
rcli HSET "${prefix}sale:$tag" starts $((now_ms - 60000)) ends $((now_ms + 3600000)) cap 1 >/dev/null
tmp=$(mktemp -d)

measure() { # measure NAME redis-benchmark-command...
  local name=$1 rps cpu
  shift
  # shellcheck disable=SC2046
  pid_ticks $(pgrep -x redis-server) >"$tmp/before"
  rps=$(redis-benchmark -h "$REDIS_HOST" -p "$REDIS_PORT" -c "$C" -P "$P" -n "$N" -r 1000000000 --csv "$@" | tail -1 | tr -d '"' | awk -F, '{print $(NF-6)}')
  # shellcheck disable=SC2046
  pid_ticks $(pgrep -x redis-server) >"$tmp/after"
  cpu=$(ticks_between "$tmp/before" "$tmp/after")
  printf '  %-18s %8.0f calls/s  redis-server %5.2f CPU s  %5.1f CPU us/call\n' "$name" "$rps" "$cpu" "$(awk -v c="$cpu" -v n="$N" 'BEGIN{print c * 1e6 / n}')"
}
reserve() { # reserve RUN: sets args to the reserve script's call, as bench/run.sh makes it
  args=(EVALSHA "$sha" 8 "${prefix}stock:$tag" "${prefix}sale:$tag" "${prefix}limit:$tag:__rand_int__"
    "${prefix}req:$tag:r$1-__rand_int__" "${prefix}resv:$tag" "${prefix}ord:$tag:$ono" "${prefix}fate:$tag:$ono"
    "${prefix}lmk:$tag" "r$1-__rand_int__" 0123456789abcdef01234567 "$ono" 1 "$event" 86400 "" __rand_int__)
}

echo "redis-cost: redis-benchmark -c $C -P $P -n $N, $(nproc) cores, $(redis-server --version | cut -d' ' -f3)"
rcli SET "${prefix}stock:$tag" 0 >/dev/null
reserve 1
measure reserve-sold-out "${args[@]}"
rcli SET "${prefix}stock:$tag" "$((N * 2))" >/dev/null
reserve 2
measure reserve-accept "${args[@]}"
echo "  (after the accept run: $(rcli GET "${prefix}stock:$tag") units left, journal $(rcli HLEN "${prefix}resv:$tag") entries)"
measure exists EXISTS "${prefix}req:$tag:r2-__rand_int__"
rm -rf "$tmp"
