# shellcheck shell=bash
# Shared by bench/run.sh, bench/cpu.sh, bench/rss.sh, bench/latency.sh and bench/flood.sh (sourced, not run): free ports and
# per-process CPU readings, the pids of each part, and a run's start and stop.

# free_port prints a port below the kernel's ephemeral range that nothing
# listens on, so no client socket or test listening on port 0 takes it
# between this check and the pipeline's bind.
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

# wait_port PORT PID...: until something listens on PORT, or one of the
# PIDs has exited (60 s at most). Fails if one has exited.
wait_port() {
  local port=$1 p
  shift
  for _ in $(seq 1 600); do
    for p in "$@"; do
      kill -0 "$p" 2>/dev/null || return 1
    done
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# pid_ticks PID...: one line "pid utime+stime" (clock ticks) per live PID.
pid_ticks() {
  local p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] && awk -v p="$p" '{print p, $14 + $15}' "/proc/$p/stat" 2>/dev/null || true
  done
}

# pid_waits PID...: per process, "pid nanoseconds" its threads have spent
# runnable but not running (the second field of each task's schedstat).
pid_waits() {
  local p
  for p in "$@"; do
    cat /proc/"$p"/task/*/schedstat 2>/dev/null | awk -v p="$p" '{ w += $2 } END { if (NR) print p, w }' || true
  done
}

# ticks_between BEFORE AFTER: the CPU seconds the processes listed in the
# file AFTER used since the file BEFORE (pid_ticks output) was written; a
# process absent from BEFORE counts from its start, one that exited
# meanwhile is not counted.
ticks_between() {
  awk -v hz="$(getconf CLK_TCK)" 'NR == FNR { b[$1] = $2; next } { t += $2 - ($1 in b ? b[$1] : 0) } END { printf "%.3f", t / hz }' "$1" "$2"
}

# names are the parts whose CPU the scripts report; procs NAME prints the
# pids of one of them now, from the pids the sourcing script set
# (gateway_pid, worker_pid, closer_pid, kafka_pid) or, for a real Kafka
# (REAL_KAFKA), Redis and PostgreSQL, every such process on this machine.
# shellcheck disable=SC2034 # names is read by the sourcing script
# With SHARED=1 (a machine other work shares), redis is only the
# redis-server on REDIS_PORT and postgres only the backends serving the run's
# database ($db): the shared WAL writer and checkpointer are then left out.
# relay_pid, when set, adds the orders.status relay.
names=(gateway worker closer kafka redis postgres)
procs() {
  case "$1" in
    gateway) echo "$gateway_pid" ;;
    worker) echo "$worker_pid" ;;
    closer) echo "$closer_pid" ;;
    relay) echo "${relay_pid:-}" ;;
    floor) echo "${floor_pid:-}" ;;
    kafka) if [ -n "$REAL_KAFKA" ]; then pgrep -f 'kafka[.]Kafka' || true; else echo "$kafka_pid"; fi ;;
    redis) if [ "${SHARED:-0}" = 1 ]; then pgrep -f "redis-server [^ ]*:${REDIS_PORT:-6379}\$" || true; else pgrep -x redis-server || true; fi ;;
    postgres) if [ "${SHARED:-0}" = 1 ]; then psql "$PG/postgres" -Atc "SELECT pid FROM pg_stat_activity WHERE datname = '$db'" 2>/dev/null || true; else pgrep -x postgres || true; fi ;;
  esac
}

# proc_flags PIDS NAME...: the load tool's --proc flags (one word a line, for
# mapfile -t), NAME=PID,PID... for each named part whose pids the function
# PIDS prints now; a part with none is left out.
proc_flags() {
  local pids=$1 name ps
  shift
  for name in "$@"; do
    ps=$("$pids" "$name" | grep -E '^[0-9]+$' | paste -sd, - || true)
    if [ -n "$ps" ]; then printf -- '--proc\n%s=%s\n' "$name" "$ps"; fi
  done
}

# waits_summary BEFORE AFTER: the gateway's intake, reserve and produce histograms
# (orderpipe_http_request_duration_seconds of POST /v1/orders, from routing to
# the answer; orderpipe_reserve_seconds, orderpipe_produce_seconds, as scraped from its
# /metrics into the two files) over the interval between them: the count,
# the mean and the share at or under a few bounds; and the produce requests
# and their mean size (orderpipe_produce_batch_messages, GATEWAY_PRODUCER=group).
waits_summary() {
  awk '
    FNR == 1 { f++ }
    /^orderpipe_((reserve|produce)_seconds_(sum|count|bucket)|produce_batch_messages_(sum|count))/ ||
    /^orderpipe_http_request_duration_seconds_(sum|count|bucket)\{route="POST \/v1\/orders"/ {
      v = $NF; k = substr($0, 1, length($0) - length($NF) - 1)
      sub(/\{route="POST \/v1\/orders",?/, "{", k); sub(/\{\}$/, "", k)
      sub(/^orderpipe_http_request_duration/, "orderpipe_intake", k)
      if (f == 1) { before[k] = v } else { after[k] = v }
    }
    END {
      split("intake reserve produce", names, " ")
      for (i = 1; i <= 3; i++) {
        n = names[i]; p = "orderpipe_" n "_seconds"
        cnt = after[p "_count"] - before[p "_count"]
        if (cnt <= 0) { continue }
        line = sprintf("  %s: %d calls, mean %.2f ms;", n, cnt, 1000 * (after[p "_sum"] - before[p "_sum"]) / cnt)
        split("0.0005 0.001 0.002 0.005 0.01 0.02", les, " ")
        for (j = 1; j <= 6; j++) {
          b = p "_bucket{le=\"" les[j] "\"}"
          line = line sprintf(" <=%g ms %.0f%%", 1000 * les[j], 100 * (after[b] - before[b]) / cnt)
        }
        print line
      }
      b = "orderpipe_produce_batch_messages"
      reqs = after[b "_count"] - before[b "_count"]
      if (reqs > 0) {
        printf "  produce requests: %d, %.2f events each on average\n", reqs, (after[b "_sum"] - before[b "_sum"]) / reqs
      }
    }' "$1" "$2"
}

# fresh_run NAME [LOG]: a run id ($run), a database ($db) and Redis key
# prefix of its own, exported with ADMIN_TOKEN for every orderpipe process
# the script starts, and its log, $log: $OUT/LOG-<run>.log (LOG defaults to
# NAME); drop_run NAME deletes what the run wrote (its keys, its database).
fresh_run() {
  run="$(date +%s)$$"
  db="orderpipe_$1_$run"
  export DATABASE_URL="$PG/$db?sslmode=disable"
  export REDIS_KEY_PREFIX="$1$run:"
  export ADMIN_TOKEN="$1-$run"
  mkdir -p "$OUT"
  log="$OUT/${2:-$1}-$run.log"
}
drop_run() {
  "$BIN" bench --purge-keys >/dev/null 2>&1 || true
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || echo "$1: database $db left behind" >&2
}

# stop_pids PID...: ends each process (SIGTERM) and waits for it.
stop_pids() {
  local p
  for p in "$@"; do kill "$p" 2>/dev/null || true; done
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

# stop_run NAME PID...: a script's exit trap, as
#   trap 'stop_run NAME $pid $other_pid' EXIT
# (single quotes: the pids as they are at exit; one not started yet is
# empty and left out): stops the processes, then drops the run (drop_run).
stop_run() {
  local name=$1
  shift
  stop_pids "$@"
  drop_run "$name"
}

# start_all NAME BIN LOG: migrates the run's database (LOG), then starts
# `BIN all` in the background with the embedded broker, as make run does,
# on free ports: sets pid, http_port and kafka_port, exports HTTP_ADDR and
# KAFKA_EMBEDDED_PORT, and unsets KAFKA_BROKERS. A failed migration exits 2.
start_all() {
  unset KAFKA_BROKERS
  "$2" migrate >"$3" 2>&1 || { echo "$1: migrate failed; see $3" >&2; exit 2; }
  http_port=$(free_port)
  kafka_port=$(free_port)
  export HTTP_ADDR="127.0.0.1:$http_port" KAFKA_EMBEDDED_PORT="$kafka_port"
  "$2" all >>"$3" 2>&1 &
  pid=$!
}

# machine_ticks: one line "busy idle steal" (clock ticks since boot, every
# CPU) from /proc/stat; busy is user, nice, system, irq and softirq.
machine_ticks() {
  awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $5 + $6, $9 }' /proc/stat
}

# cpu_window FILE PATTERN SECONDS OUT PIDS NAME...: once a line matching
# PATTERN appears in FILE (a load run's progress), waits 2 s and then
# records, over the SECONDS - 4 s that follow (at least 1 s), the machine's busy and steal
# shares and the CPU seconds of each named part, whose pids the function
# PIDS NAME prints (asked again at each end of the window, so processes
# started meanwhile count from their start). Writes "window <s>",
# "machine <busy %> <steal %>" and "<name> <cpu s>" lines to OUT, and the
# commands and socket reads the Redis at REDIS_ADDR processed meanwhile
# ("rediscalls <commands> <reads>": a script's own calls count as
# commands, a pipeline as one read or a few). Run it in the background
# beside the load.
cpu_window() {
  local file=$1 pattern=$2 secs=$3 out=$4 pids=$5 name m0 m1 w
  shift 5
  w=$((secs > 5 ? secs - 4 : 1))
  for _ in $(seq 1 1200); do
    grep -q "$pattern" "$file" 2>/dev/null && break
    sleep 0.1
  done
  sleep 2
  m0=$(machine_ticks)
  redis_calls >"$out.r0"
  for name in "$@"; do pid_ticks $("$pids" "$name") | sed "s/^/$name /"; done >"$out.0"
  for name in "$@"; do pid_waits $("$pids" "$name") | sed "s/^/$name /"; done >"$out.w0"
  sleep "$w"
  m1=$(machine_ticks)
  redis_calls >"$out.r1"
  for name in "$@"; do pid_ticks $("$pids" "$name") | sed "s/^/$name /"; done >"$out.1"
  for name in "$@"; do pid_waits $("$pids" "$name") | sed "s/^/$name /"; done >"$out.w1"
  {
    echo "window $w"
    echo "$m0 $m1" | awk '{ b = $4 - $1; i = $5 - $2; s = $6 - $3; t = b + i + s; printf "machine %.0f %.0f\n", 100 * b / t, 100 * s / t }'
    awk -v hz="$(getconf CLK_TCK)" 'NR == FNR { b[$1 " " $2] = $3; next } { k = $1 " " $2; t[$1] += $3 - (k in b ? b[k] : 0) } END { for (n in t) printf "%s %.2f\n", n, t[n] / hz }' "$out.0" "$out.1"
    # Seconds each part's threads waited for a core (a process that started
    # meanwhile counts from its start).
    awk 'NR == FNR { b[$1 " " $2] = $3; next } { k = $1 " " $2; t[$1] += $3 - (k in b ? b[k] : 0) } END { for (n in t) printf "wait %s %.3f\n", n, t[n] / 1e9 }' "$out.w0" "$out.w1"
    paste -d' ' "$out.r0" "$out.r1" | awk 'NF == 4 { printf "rediscalls %d %d\n", $3 - $1, $4 - $2 }'
  } >"$out"
  rm -f "$out.0" "$out.1" "$out.w0" "$out.w1" "$out.r0" "$out.r1"
}

# redis_calls: "<commands> <reads>" the Redis at REDIS_ADDR has processed
# since it started (INFO stats); nothing when it cannot be asked.
redis_calls() {
  local addr=${REDIS_ADDR:-127.0.0.1:6379}
  redis-cli -h "${addr%:*}" -p "${addr##*:}" info stats 2>/dev/null |
    awk -F: '$1 == "total_commands_processed" { c = $2 + 0 } $1 == "total_reads_processed" { r = $2 + 0 } END { if (c > 0) print c, r }' || true
}
