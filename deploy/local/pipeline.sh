# pipeline.sh: a throwaway `orderpipe all` (gateway, worker, closer,
# embedded Kafka) on free ports with a fresh Postgres database of its own,
# for a script that tests against the live API. Sourced (by
# deploy/local/fuzz-api.sh and gateway/client/java/live-test.sh); the
# caller sets BIN, OUT, PG (a server URL without a database), DB, REDIS and
# PREFIX and defines log, then calls
#
#   start_pipeline HTTP_LOW KAFKA_LOW METRICS_LOW [VAR=value]...
#
# which picks each port among 100 from its LOW (callers use apart ranges,
# so their tiers may run at once), starts BIN all with the VARs besides the
# ports, database and Redis (its log in $OUT/orderpipe.log), waits until
# /readyz answers and sets PIPELINE (its pid), HTTP_PORT, KAFKA_PORT and
# BASE. On exit the pipeline is stopped and the database dropped.

free_port() { # a port in $1-$2 nothing listens on
  local p
  for p in $(seq "$1" "$2"); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  log "no free port in $1-$2"; return 1
}

PIPELINE=""
stop_pipeline() {
  if [ -n "$PIPELINE" ]; then kill "$PIPELINE" 2>/dev/null || true; wait "$PIPELINE" 2>/dev/null || true; fi
  psql "$PG/postgres?sslmode=disable" -XAtqc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
}

start_pipeline() {
  HTTP_PORT=$(free_port "$1" $(($1 + 99)))
  KAFKA_PORT=$(free_port "$2" $(($2 + 99)))
  local metrics_port
  metrics_port=$(free_port "$3" $(($3 + 99)))
  shift 3
  trap stop_pipeline EXIT
  log "pipeline on 127.0.0.1:$HTTP_PORT (database $DB, Redis $REDIS, embedded Kafka on $KAFKA_PORT); log in $OUT/orderpipe.log"
  env HTTP_ADDR="127.0.0.1:$HTTP_PORT" METRICS_ADDR="127.0.0.1:$metrics_port" KAFKA_BROKERS= KAFKA_EMBEDDED_PORT="$KAFKA_PORT" \
    DATABASE_URL="$PG/$DB?sslmode=disable" REDIS_ADDR="$REDIS" REDIS_URL= REDIS_KEY_PREFIX="$PREFIX" ADMIN_ADDR= API_TOKENS= \
    "$@" "$BIN" all >"$OUT/orderpipe.log" 2>&1 &
  PIPELINE=$!
  BASE=http://127.0.0.1:$HTTP_PORT
  for _ in $(seq 300); do
    curl -fsS "$BASE/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$PIPELINE" 2>/dev/null || { log "the pipeline exited:"; tail -20 "$OUT/orderpipe.log" >&2; exit 1; }
    sleep 0.2
  done
  curl -fsS "$BASE/readyz" >/dev/null || { log "the pipeline is not ready"; tail -20 "$OUT/orderpipe.log" >&2; exit 1; }
}
