#!/usr/bin/env bash
# Open-loop latency of `make run`: one `orderpipe all` process (gateway,
# worker, closer, relay, redrive and the embedded broker, as `make run` starts
# it) on free ports with a fresh database and Redis key prefix, against a
# floor at the same rates: by default the minimal pipeline of the contract's
# exchanges (bench/floorpipe: decode, one EVALSHA, one acked produce to an
# in-process kfake through memory, 202; a consumer group inserting batches
# into Postgres), with FLOOR=contract the same floor doing also the rest of
# the worker's side of the contract (-contract: the idempotency table, a
# conditional stock update, the UNPAID status event in an outbox published by
# a relay), with FLOOR=trivial the trivial handler (`orderpipe bench
# --serve-floor`). At each
# rate the load tool sends SECONDS seconds of requests, every one a new user
# and accepted, first to the floor and then to the gateway, latency
# from each request's intended time. Prints one row per rate and the CPU
# seconds `orderpipe all` used in each, then, for the middle of each half,
# how busy the machine was and each part's CPU per request (orderpipe all,
# Redis, PostgreSQL, the load tool); keeps each run's report in $OUT (its
# HTML sets the floor beside the pipeline, with the CPU per request of the
# floor, orderpipe all, Redis and PostgreSQL over each whole half: --proc).
#   bench/latency.sh                              1000, 2000 and 4000 req/s, 15 s each
#   RATES=2000 SECONDS_EACH=30 bench/latency.sh
#   PROFILE=2000 bench/latency.sh                 also, at 2000 req/s, in the middle of each half, a 5 s CPU, block
#                                                 and mutex profile and a 2 s execution trace of the floor pipeline
#                                                 and of orderpipe all ($OUT/latency-<run>-<rate>.{floor,all}.*),
#                                                 each trace's requests split by what they waited in (bench/tracesplit)
#   PIPE_BIN=/tmp/old/orderpipe-dev bench/latency.sh   another build's orderpipe all (and its migrate) against
#                                                 this build's floor and load tool: a bisect across commits
#   GOGC=400 bench/latency.sh                     any variable of docs/config.md (and Go's GOGC,
#                                                 GOMEMLIMIT) passes through to orderpipe all
# Exit status: 0 every run's invariants held, 1 one failed, 2 could not run.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/orderpipe-dev}
PIPE_BIN=${PIPE_BIN:-$BIN}
RATES=${RATES:-1000 2000 4000}
SECONDS_EACH=${SECONDS_EACH:-15}
C=${C:-200}
OUT=${OUT:-bin/bench}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
PROFILE=${PROFILE:-}
FLOOR=${FLOOR:-pipeline}   # pipeline: bench/floorpipe; contract: bench/floorpipe -contract; trivial: the trivial handler

. bench/lib.sh

fresh_run lat latency
pid="" floor_pid="" load_pid=""
trap 'stop_run latency $load_pid $pid $floor_pid' EXIT

pprof_port=$(free_port)
[ -n "$PROFILE" ] && export PPROF_ADDR="127.0.0.1:$pprof_port"
start_all latency "$PIPE_BIN" "$log"
floor_port=$(free_port)
floor_pprof_port=$(free_port)
# The floor gets none of orderpipe all's settings.
case "$FLOOR" in
  trivial)
    floor_name="trivial handler"
    env -u GOGC -u GOMEMLIMIT "$BIN" bench --serve-floor "127.0.0.1:$floor_port" >"$log.floor" 2>&1 & ;;
  pipeline|contract)
    floor_name="floor pipeline"
    go build -o bin/floorpipe ./bench/floorpipe || { echo "latency: building bench/floorpipe failed" >&2; exit 2; }
    floor_flags=()
    [ -n "$PROFILE" ] && floor_flags=(-pprof "127.0.0.1:$floor_pprof_port")
    if [ "$FLOOR" = contract ]; then floor_name="contract floor" floor_flags+=(-contract); fi
    env -u GOGC -u GOMEMLIMIT bin/floorpipe -addr "127.0.0.1:$floor_port" -db "$DATABASE_URL" -redis "${REDIS_ADDR:-127.0.0.1:6379}" \
      -prefix "${REDIS_KEY_PREFIX}floor:" "${floor_flags[@]}" >"$log.floor" 2>&1 & ;;
  *) echo "latency: FLOOR=$FLOOR: want pipeline, contract or trivial" >&2; exit 2 ;;
esac
floor_pid=$!
wait_port "$http_port" "$pid" || { echo "latency: orderpipe all exited or did not listen; see $log" >&2; exit 2; }
wait_port "$floor_port" "$floor_pid" || { echo "latency: the $floor_name did not listen; see $log.floor" >&2; exit 2; }

hz=$(getconf CLK_TCK)
# part_pids NAME: the pids cpu_window counts as NAME.
part_pids() {
  case "$1" in
    all) echo "$pid" ;;
    floor) echo "$floor_pid" ;;
    load) echo "$load_pid" ;;
    *) procs "$1" ;; # redis, postgres (lib.sh; SHARED=1: only this run's)
  esac
}
echo "latency: orderpipe all (pid $pid) on $HTTP_ADDR, database $db; rates $RATES req/s, ${SECONDS_EACH}s each, at most $C connections"
printf '%-6s  %-28s  %-36s  %-9s  %s\n' "req/s" "floor P50 / P99 / max" "gateway P50 / P99 / P99.9 / max" "P99 ×" "all CPU s"
status=0
for rate in $RATES; do
  n=$((rate * SECONDS_EACH))
  txt="$OUT/latency-$run-$rate.txt"
  prof=""
  if [ "$PROFILE" = "$rate" ]; then
    # The middle of each half, the floor's first (its half takes
    # SECONDS_EACH): at once a 5 s CPU profile, 5 s of the block and mutex
    # profiles and a 2 s execution trace of each process.
    (
      profiles() { # ADDR NAME
        curl -sf -o "$OUT/latency-$run-$rate.$2.cpu.pprof" "http://$1/debug/pprof/profile?seconds=5" || echo "latency: no CPU profile of $2" >&2 &
        curl -sf -o "$OUT/latency-$run-$rate.$2.block.pprof" "http://$1/debug/pprof/block?seconds=5" || echo "latency: no block profile of $2" >&2 &
        curl -sf -o "$OUT/latency-$run-$rate.$2.mutex.pprof" "http://$1/debug/pprof/mutex?seconds=5" || echo "latency: no mutex profile of $2" >&2 &
        curl -sf -o "$OUT/latency-$run-$rate.$2.trace" "http://$1/debug/pprof/trace?seconds=2" || echo "latency: no trace of $2" >&2 &
        wait
      }
      sleep $((SECONDS_EACH / 2 - 3))
      [ "$FLOOR" != trivial ] && profiles "127.0.0.1:$floor_pprof_port" floor
      sleep $((SECONDS_EACH - 5))
      profiles "$PPROF_ADDR" all
    ) &
    prof=$!
  fi
  curl -s "http://$HTTP_ADDR/metrics" >"$OUT/latency-$run-$rate.waits0" || true
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  rstatus=0
  # The HTML report's table of the floor beside the pipeline carries each
  # part's CPU per request over the whole of each half.
  mapfile -t procs_flags < <(proc_flags part_pids floor all redis postgres)
  # KAFKA_BROKERS: the audit reads orders.status from the embedded broker (I7).
  env -u GOGC -u GOMEMLIMIT KAFKA_BROKERS="127.0.0.1:$kafka_port" "$BIN" bench -c "$C" --rate "$rate" -n "$n" --stock "$n" --retry-share 0 --repeat-share 0 --wait-ready 60s \
    --url "http://$HTTP_ADDR" --floor-url "http://127.0.0.1:$floor_port" --floor-name "$floor_name" "${procs_flags[@]}" \
    --json-out "$OUT/latency-$run-$rate.json" --html-out "$OUT/latency-$run-$rate.html" >"$txt" 2>"$txt.err" &
  load_pid=$!
  cpu_window "$txt.err" "the floor first" "$SECONDS_EACH" "$OUT/latency-$run-$rate.cpu-floor" part_pids floor redis postgres load &
  win_floor=$!
  cpu_window "$txt.err" "then the gateway" "$SECONDS_EACH" "$OUT/latency-$run-$rate.cpu-gateway" part_pids all redis postgres load &
  win_gateway=$!
  wait "$load_pid" || rstatus=$?
  kill "$win_floor" "$win_gateway" 2>/dev/null || true
  wait "$win_floor" "$win_gateway" 2>/dev/null || true
  after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  curl -s "http://$HTTP_ADDR/metrics" >"$OUT/latency-$run-$rate.waits1" || true
  if [ -n "$prof" ]; then wait "$prof" 2>/dev/null || true; fi
  [ "$rstatus" -gt "$status" ] && status=$rstatus
  if [ "$rstatus" -ge 2 ]; then
    echo "latency: the load run at $rate req/s could not run; see $txt.err" >&2
    tail -3 "$txt.err" >&2
  fi
  awk -v rate="$rate" -v name="$floor_name" -v cpu="$(awk -v t=$((after - before)) -v hz="$hz" 'BEGIN{printf "%.1f", t / hz}')" '
    /^open loop:/ { open = 1 }
    open && index($0, "  " name) == 1 { n = split(name, w, " "); tr = $(n + 1) " / " $(n + 2) " / " $(n + 4) }
    open && /^ *gateway / && !gw { gw = $2 " / " $3 " / " $4 " / " $5 }
    open && index($0, "gateway / " name) { for (i = 1; i <= NF; i++) if ($i == "P99") { ratio = $(i + 1); gsub(/[×,]/, "", ratio) } }
    END { printf "%-6s  %-28s  %-36s  %-9s  %s\n", rate, tr, gw, ratio, cpu }' "$txt"
  waits_summary "$OUT/latency-$run-$rate.waits0" "$OUT/latency-$run-$rate.waits1" >"$OUT/latency-$run-$rate.waits"
done
echo "CPU µs per request in the middle $((SECONDS_EACH > 5 ? SECONDS_EACH - 4 : 1)) s of each half (the machine's busy and steal share; redis and postgres: every such process here, or with SHARED=1 only the run's),"
echo "then µs per request each part's threads waited for a core (runnable, not running: /proc/PID/task/*/schedstat),"
echo "then the commands (a script's own calls included) and socket reads Redis processed per request:"
printf '%-6s  %-34s  %s\n' "req/s" "floor half: machine / floor / redis / postgres / load" "gateway half: machine / all / redis / postgres / load"
for rate in $RATES; do
  awk -v rate="$rate" '
    FNR == 1 { f++ }
    $1 == "window" { w[f] = $2; next }
    $1 == "machine" { m[f] = $2 "% (" $3 "%)"; next }
    $1 == "wait" { q[f, $2] = $3; next }
    $1 == "rediscalls" { rc[f] = $2; rr[f] = $3; next }
    { c[f, $1] = $2 }
    function us(a, h, n) { return (h, n) in a && w[h] > 0 ? sprintf("%.0f", 1e6 * a[h, n] / (rate * w[h])) : "-" }
    END {
      printf "%-6s  %-34s  %s\n", rate, m[1] " / " us(c, 1, "floor") " / " us(c, 1, "redis") " / " us(c, 1, "postgres") " / " us(c, 1, "load"),
        m[2] " / " us(c, 2, "all") " / " us(c, 2, "redis") " / " us(c, 2, "postgres") " / " us(c, 2, "load")
      printf "%-6s  %-34s  %s\n", " wait", "      " us(q, 1, "floor") " / " us(q, 1, "redis") " / " us(q, 1, "postgres") " / " us(q, 1, "load"),
        "      " us(q, 2, "all") " / " us(q, 2, "redis") " / " us(q, 2, "postgres") " / " us(q, 2, "load")
      printf "%-6s  %-34s  %s\n", " redis", "      " per(rc, 1) " commands / " per(rr, 1) " reads", "      " per(rc, 2) " commands / " per(rr, 2) " reads" }
    function per(a, h) { return h in a && w[h] > 0 ? sprintf("%.1f", a[h] / (rate * w[h])) : "-" }' \
    "$OUT/latency-$run-$rate.cpu-floor" "$OUT/latency-$run-$rate.cpu-gateway" 2>/dev/null || echo "$rate  (no CPU window: the load ended early)"
done
echo "the gateway's own waits (its reserve and produce histograms):"
for rate in $RATES; do
  echo " at $rate req/s:"
  cat "$OUT/latency-$run-$rate.waits"
done
echo "the reports: $OUT/latency-$run-<rate>.txt and .html; orderpipe all's log: $log"
if [ -n "$PROFILE" ]; then
  # The same split of both processes' requests: blocked in the Redis client
  # (the reserve) or the Kafka client (the produce; the gateway's producer
  # goroutine is pkg/event), or elsewhere.
  p="$OUT/latency-$run-$PROFILE"
  if [ -s "$p.floor.trace" ]; then
    echo "the floor's requests in its trace at $PROFILE req/s, by where their time on the server went (ms; the tracer slows them):"
    go run ./bench/tracesplit -wait reserve=github.com/redis/go-redis -wait produce=github.com/segmentio/kafka-go "$p.floor.trace" ||
      echo "latency: bench/tracesplit failed" >&2
  fi
  if [ -s "$p.all.trace" ]; then
    echo "the gateway's requests in the trace at $PROFILE req/s, by where their time on the server went (ms; the tracer slows them):"
    go run ./bench/tracesplit -wait reserve=orderpipe/pkg/stock. -wait reserve=github.com/redis/go-redis \
      -wait produce=orderpipe/pkg/event. -wait produce=github.com/segmentio/kafka-go "$p.all.trace" || echo "latency: bench/tracesplit failed" >&2
  fi
  for kind in block mutex; do
    for who in floor all; do
      [ -s "$p.$who.$kind.pprof" ] || continue
      echo "the $kind profile of the $who process at $PROFILE req/s (5 s; the top 8):"
      go tool pprof -top -nodecount 8 "$p.$who.$kind.pprof" 2>/dev/null | sed -n '/flat%/,$p' || true
    done
  done
  echo "profiles at $PROFILE req/s: go tool pprof -top $PIPE_BIN $p.all.cpu.pprof (and .floor., .block., .mutex.); go tool trace $p.all.trace"
fi
exit "$status"
