#!/usr/bin/env bash
# The sold-out flood: how fast `make run`'s one process (`orderpipe all`)
# says no, beside a floor that says no for free. On free ports with a fresh
# database and Redis key prefix, the load tool floods a sale with no stock
# (`orderpipe bench --sold-out`: every request a new buyer, every answer a
# refusal) in a closed loop of C workers, N requests first to the trivial
# handler answering a fixed 409 SOLD_OUT (`orderpipe bench --serve-floor ADDR
# --floor-status 409`), then to the gateway; RUNS times. Prints per run the
# refusals/s of both and their ratio, and the CPU µs per refusal of the floor,
# of orderpipe all and of Redis (--proc: /proc/PID/stat over each half);
# keeps each run's report (.txt, .json, .html) in $OUT.
#   bench/flood.sh                         c=100, 20000 requests, 3 runs
#   C=200 N=50000 RUNS=5 bench/flood.sh
#   SHARED=1 bench/flood.sh                Redis is only the redis-server on REDIS_PORT (lib.sh)
# Exit status: 0 every run's invariants held, 1 one failed, 2 could not run.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/orderpipe-dev}
C=${C:-100}
N=${N:-20000}
RUNS=${RUNS:-3}
OUT=${OUT:-bin/bench}
PG=${PG:-postgres://postgres@127.0.0.1:5432}

. bench/lib.sh

fresh_run flood
pid="" floor_pid=""
trap 'stop_run flood $pid $floor_pid' EXIT

start_all flood "$BIN" "$log"
floor_port=$(free_port)
env -u GOGC -u GOMEMLIMIT "$BIN" bench --serve-floor "127.0.0.1:$floor_port" --floor-status 409 >"$log.floor" 2>&1 &
floor_pid=$!
wait_port "$http_port" "$pid" || { echo "flood: orderpipe all exited or did not listen; see $log" >&2; exit 2; }
wait_port "$floor_port" "$floor_pid" || { echo "flood: the trivial handler did not listen; see $log.floor" >&2; exit 2; }

part_pids() {
  case "$1" in
    all) echo "$pid" ;;
    floor) echo "$floor_pid" ;;
    *) procs "$1" ;; # redis, postgres (lib.sh; SHARED=1: only this run's)
  esac
}
echo "flood: orderpipe all (pid $pid) on $HTTP_ADDR, database $db; c=$C, $N requests a half, $RUNS runs"
printf '%-4s  %-30s  %-8s  %s\n' "run" "refusals/s floor / gateway" "ratio" "CPU µs per refusal: floor half (floor / redis), gateway half (all / redis)"
status=0
for i in $(seq 1 "$RUNS"); do
  txt="$OUT/flood-$run-$i.txt"
  mapfile -t procs_flags < <(proc_flags part_pids floor all redis postgres)
  rstatus=0
  env -u GOGC -u GOMEMLIMIT "$BIN" bench -c "$C" -n "$N" --sold-out --wait-ready 60s --url "http://$HTTP_ADDR" \
    --floor-url "http://127.0.0.1:$floor_port" "${procs_flags[@]}" \
    --json-out "$OUT/flood-$run-$i.json" --html-out "$OUT/flood-$run-$i.html" >"$txt" 2>"$txt.err" || rstatus=$?
  [ "$rstatus" -gt "$status" ] && status=$rstatus
  if [ "$rstatus" -ge 2 ]; then
    echo "flood: run $i could not run; see $txt.err" >&2
    tail -3 "$txt.err" >&2
    continue
  fi
  # The report's rows: "refusals/s FLOOR GATEWAY ×RATIO", "NAME CPU µs/refusal FLOOR GATEWAY".
  awk -v i="$i" '
    $1 == "refusals/s" { r = $2 " / " $3; x = $4 }
    $2 == "CPU" && $3 == "µs/refusal" { f[$1] = $4; g[$1] = $5 }
    END { printf "%-4s  %-30s  %-8s  %s / %s, %s / %s\n", i, r, x, f["floor"], f["redis"], g["all"], g["redis"] }' "$txt"
done
echo "the reports: $OUT/flood-$run-<run>.txt, .json and .html; orderpipe all's log: $log"
exit "$status"
