#!/usr/bin/env bash
# The memory of `make run` under a long load: one `orderpipe all` process
# (gateway, worker, closer, redrive and the embedded broker, as `make run`
# starts it) on free ports with a fresh database and Redis key prefix, driven
# by the load tool for N requests on a sale with enough stock that every one
# is accepted, while its resident set (VmRSS in /proc/<pid>/status) is
# sampled every second. Prints the curve (one line per 10 % of the run) and
# the maximum, writes every sample to $OUT/rss-<run>.csv and the load tool's
# HTML report (RSS over time charted) to $OUT/rss-load-<run>.html, then stops the
# process and removes what the run created.
#   N=300000 C=100 bench/rss.sh            (bin/orderpipe-dev: make build-dev)
#   RATE=1000 N=600000 bench/rss.sh         an open loop: N requests at RATE req/s (10 min)
#   GOMEMLIMIT=200MiB N=300000 bench/rss.sh   any variable of docs/config.md (and Go's
#                                             GOMEMLIMIT) passes through to orderpipe all
# Exit status: the load run's (0 every invariant held, 1 one failed, 2 could not run).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/orderpipe-dev}
N=${N:-300000}
C=${C:-100}
STOCK=${STOCK:-$N}
OUT=${OUT:-bin/bench}
PG=${PG:-postgres://postgres@127.0.0.1:5432}

. bench/lib.sh

fresh_run rss
csv="$OUT/rss-$run.csv"
pid="" sampler=""
trap 'stop_run rss $sampler $pid' EXIT

start_all rss "$BIN" "$log"
wait_port "$http_port" "$pid" || { echo "rss: orderpipe all exited or did not listen; see $log" >&2; exit 2; }

start=$(date +%s.%N)
echo "seconds,rss_kib" >"$csv"
(
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$rss" ] && echo "$(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN{printf "%.0f", n - s}'),$rss" >>"$csv"
    sleep 1
  done
) &
sampler=$!

echo "rss: orderpipe all (pid $pid) on $HTTP_ADDR, database $db; $N requests, c=$C${RATE:+, at $RATE req/s}, stock $STOCK; samples in $csv"
status=0
# GOMEMLIMIT, if given, is for orderpipe all, not for the load tool; KAFKA_BROKERS
# lets its audit read orders.status from the embedded broker (I7).
GOMEMLIMIT='' KAFKA_BROKERS="127.0.0.1:$kafka_port" "$BIN" bench -c "$C" ${RATE:+--rate "$RATE"} -n "$N" --stock "$STOCK" --retry-share 0 --repeat-share 0 --wait-ready 60s --drain-timeout 5m \
  --url "http://$HTTP_ADDR" --json-out "$OUT/rss-load-$run.json" --html-out "$OUT/rss-load-$run.html" >"$OUT/rss-load-$run.txt" 2>"$OUT/rss-load-$run.err" || status=$?
sleep 5 # a few samples after the drain
kill "$sampler" 2>/dev/null || true
sampler=""
grep -E 'req/s|accepted|invariant|I[1-5]' "$OUT/rss-load-$run.txt" | head -12 || true

rows=$(($(wc -l <"$csv") - 1))
echo "RSS of orderpipe all (MiB), one sample per 10 % of the run ($rows samples, 1 s apart):"
awk -F, -v rows="$rows" 'NR > 1 {
    i = NR - 1; if (i == 1 || i == rows || i % int(rows / 10 > 0 ? rows / 10 : 1) == 0) printf "  t=%4ss %6.1f\n", $1, $2 / 1024
    if ($2 > max) { max = $2; at = $1 }
  } END { printf "max %.1f MiB at t=%ss\n", max / 1024, at }' "$csv"
echo "the load's report, RSS and CPU of orderpipe all charted over the run: $OUT/rss-load-$run.html"
exit "$status"
