#!/usr/bin/env bash
# Makes PostgreSQL and Redis available on 127.0.0.1:5432 / :6379 for the tests
# and `make run`, on a throwaway Debian machine:
#   - installs postgresql and redis-server from Debian's packages when absent;
#   - creates and starts the PostgreSQL cluster, lets 127.0.0.1 and ::1 in
#     without a password (trust: this is a test machine, never a server) so the
#     tests' default postgres://postgres@127.0.0.1:5432/... works, and creates
#     the databases `test` (the tests') and `orderpipe` (make run's);
#   - starts Redis with no persistence (--save "" --appendonly no).
# Idempotent: where both already answer, it changes nothing. Needs root (or
# sudo) only when it has something to install or start.
set -euo pipefail

PGPORT=5432
REDIS_PORT=6379
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
PG_TEST_URL="postgres://postgres@127.0.0.1:${PGPORT}/postgres?sslmode=disable"

log() { echo "services: $*" >&2; }

pg_ok() { psql "$PG_TEST_URL" -XAtqc 'select 1' >/dev/null 2>&1; }
redis_ok() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }

install_missing() {
  local pkgs=()
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || pkgs+=(postgresql)
  command -v psql >/dev/null 2>&1 || pkgs+=(postgresql-client)
  command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  log "installing ${pkgs[*]}"
  # Keep the packages' init scripts from starting servers with their own
  # settings (Redis would persist to disk): this script starts them below.
  local policy=/usr/sbin/policy-rc.d made_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    made_policy=1
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  if [ -n "$made_policy" ]; then $SUDO rm -f "$policy"; trap - EXIT; fi
}

start_postgres() {
  if pg_ok; then return 0; fi
  local ver
  ver=$(ls /usr/lib/postgresql | sort -V | tail -1)
  if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$ver main"; then
    log "creating PostgreSQL $ver cluster main"
    $SUDO pg_createcluster --port "$PGPORT" "$ver" main >/dev/null
  fi
  local hba=/etc/postgresql/$ver/main/pg_hba.conf
  if ! $SUDO grep -q '^# orderpipe test machine' "$hba"; then
    log "allowing trust auth for 127.0.0.1 and ::1 in $hba"
    { printf '# orderpipe test machine: loopback without a password (deploy/local/services.sh)\n'
      printf 'host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n'
      $SUDO cat "$hba"; } > /tmp/pg_hba.$$
    $SUDO install -o postgres -g postgres -m 640 /tmp/pg_hba.$$ "$hba"
    rm -f /tmp/pg_hba.$$
  fi
  # The tests and the chaos suite open many pools at once.
  local conf=/etc/postgresql/$ver/main/conf.d/orderpipe.conf
  if [ ! -e "$conf" ]; then
    printf "listen_addresses = 'localhost'\nmax_connections = 300\n" | $SUDO tee "$conf" >/dev/null
  fi
  if pg_lsclusters -h | awk -v v="$ver" '$1==v && $2=="main" {print $4}' | grep -q online; then
    log "reloading PostgreSQL $ver (pg_hba changed)"
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main restart
  else
    log "starting PostgreSQL $ver"
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main start
  fi
  for _ in $(seq 1 100); do pg_ok && return 0; sleep 0.1; done
  log "PostgreSQL did not answer on 127.0.0.1:$PGPORT"; return 1
}

ensure_databases() {
  local db
  for db in test orderpipe; do
    if [ -z "$(psql "$PG_TEST_URL" -XAtqc "select 1 from pg_database where datname='$db'")" ]; then
      log "creating database $db"
      psql "$PG_TEST_URL" -XAtqc "create database $db" >/dev/null
    fi
  done
}

start_redis() {
  if redis_ok; then return 0; fi
  log "starting Redis on 127.0.0.1:$REDIS_PORT (no persistence)"
  local dir=/tmp/orderpipe-redis
  mkdir -p "$dir"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" \
    --save "" --appendonly no --dir "$dir" --logfile "$dir/redis.log"
  for _ in $(seq 1 100); do redis_ok && return 0; sleep 0.1; done
  log "Redis did not answer on 127.0.0.1:$REDIS_PORT"; return 1
}

if pg_ok && redis_ok; then
  ensure_databases
  exit 0
fi
install_missing
start_postgres
ensure_databases
start_redis
log "PostgreSQL on 127.0.0.1:$PGPORT and Redis on 127.0.0.1:$REDIS_PORT are up"
