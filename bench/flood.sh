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
# Each run then measures the same again against the check floor
# (bench/floorpipe -refuse: the refusal's one exchange the contract requires,
# a coalesced check of the requestId and the sale's end in Redis, and
# nothing else), so the gateway is seen against both floors in one run.
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
pid="" floor_pid="" check_pid=""
trap 'stop_run flood $pid $floor_pid $check_pid' EXIT

start_all flood "$BIN" "$log"
floor_port=$(free_port)
env -u GOGC -u GOMEMLIMIT "$BIN" bench --serve-floor "127.0.0.1:$floor_port" --floor-status 409 >"$log.floor" 2>&1 &
floor_pid=$!
go build -o bin/floorpipe ./bench/floorpipe || { echo "flood: building bench/floorpipe failed" >&2; exit 2; }
check_port=$(free_port)
env -u GOGC -u GOMEMLIMIT bin/floorpipe -refuse ${CHECK_ALONE:+-refuse-alone} -addr "127.0.0.1:$check_port" -redis "${REDIS_ADDR:-127.0.0.1:6379}" \
  -prefix "${REDIS_KEY_PREFIX}floor:" >"$log.check" 2>&1 &
check_pid=$!
wait_port "$http_port" "$pid" || { echo "flood: orderpipe all exited or did not listen; see $log" >&2; exit 2; }
wait_port "$floor_port" "$floor_pid" || { echo "flood: the trivial handler did not listen; see $log.floor" >&2; exit 2; }
wait_port "$check_port" "$check_pid" || { echo "flood: the check floor did not listen; see $log.check" >&2; exit 2; }

part_pids() {
  case "$1" in
    all) echo "$pid" ;;
    floor) echo "$floor_pid" ;;
    check) echo "$check_pid" ;;
    *) procs "$1" ;; # redis, postgres (lib.sh; SHARED=1: only this run's)
  esac
}
echo "flood: orderpipe all (pid $pid) on $HTTP_ADDR, database $db; c=$C, $N requests a half, $RUNS runs"
printf '%-4s  %-6s %-30s  %-8s  %s\n' "run" "floor" "refusals/s floor / gateway" "ratio" "CPU µs per refusal: floor half (floor / redis), gateway half (all / redis)"
status=0
# measure RUN FLOOR_NAME FLOOR_URL FLOOR_PART: one load run, the floor's half
# then the gateway's; prints its row.
measure() {
  local i=$1 fname=$2 furl=$3 fpart=$4 txt="$OUT/flood-$run-$1.txt" rstatus=0
  [ "$fpart" = floor ] || txt="$OUT/flood-$run-$1-$fpart.txt"
  mapfile -t procs_flags < <(proc_flags part_pids "$fpart" all redis postgres)
  env -u GOGC -u GOMEMLIMIT "$BIN" bench -c "$C" -n "$N" --sold-out --wait-ready 60s --url "http://$HTTP_ADDR" \
    --floor-url "$furl" --floor-name "$fname" "${procs_flags[@]}" \
    --json-out "${txt%.txt}.json" --html-out "${txt%.txt}.html" >"$txt" 2>"$txt.err" || rstatus=$?
  [ "$rstatus" -gt "$status" ] && status=$rstatus
  if [ "$rstatus" -ge 2 ]; then
    echo "flood: run $i could not run; see $txt.err" >&2
    tail -3 "$txt.err" >&2
    return
  fi
  # The report's rows: "refusals/s FLOOR GATEWAY ×RATIO", "NAME CPU µs/refusal FLOOR GATEWAY".
  awk -v i="$i" -v f="$fpart" '
    $1 == "refusals/s" { r = $2 " / " $3; x = $4 }
    $2 == "CPU" && $3 == "µs/refusal" { a[$1] = $4; g[$1] = $5 }
    END { printf "%-4s  %-6s %-30s  %-8s  %s / %s, %s / %s  (process ×%.2f)\n", i, f, r, x, a[f], a["redis"], g["all"], g["redis"], (a[f] > 0 ? g["all"] / a[f] : 0) }' "$txt"
}
for i in $(seq 1 "$RUNS"); do
  measure "$i" "trivial handler" "http://127.0.0.1:$floor_port" floor
  measure "$i" "check floor" "http://127.0.0.1:$check_port" check
done
echo "the reports: $OUT/flood-$run-<run>.txt, .json and .html (<run>-check.* against the check floor); orderpipe all's log: $log"
exit "$status"
