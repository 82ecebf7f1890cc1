#!/usr/bin/env bash
# fuzz-api.sh: the OpenAPI-driven property-based tier (`make fuzz-api`).
# Starts a real pipeline (bin/orderpipe-dev all: gateway, worker, closer,
# embedded Kafka) on free ports, a fresh Postgres database of its own and
# the Redis TEST_REDIS_ADDR names (deploy/local/test-redis.sh gives it one of
# its own), with the admin API on; then lets schemathesis (pinned, installed
# into a venv under ~/.cache/orderpipe) generate requests from
# gateway/openapi.json against it. It fails on any 5xx, any answer the
# document does not describe (status, content type, headers, body schema),
# any request the document refuses that was taken, any undeclared method not
# answered 405 with Allow, and any schema-valid request refused by a rule the
# document's x-refusals do not list (deploy/local/fuzz_api_hooks.py).
#
# FUZZ_API_SEED (default 1) makes a run repeatable; FUZZ_API_EXAMPLES
# (default 100) bounds the examples per operation and phase; the whole run
# is cut at FUZZ_API_TIMEOUT seconds (default 600); FUZZ_API_BIN runs another
# build (an older one, to see what the tier catches). The report (JUnit, and
# the pipeline's log) is left in bin/fuzz-api.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

ST_VERSION=4.32.5
SEED=${FUZZ_API_SEED:-1}
EXAMPLES=${FUZZ_API_EXAMPLES:-100}
TIMEOUT=${FUZZ_API_TIMEOUT:-600}
VENV=${FUZZ_API_VENV:-$HOME/.cache/orderpipe/schemathesis-$ST_VERSION}
OUT=${FUZZ_API_OUT:-$PWD/bin/fuzz-api}
BIN=${FUZZ_API_BIN:-$PWD/bin/orderpipe-dev}
PG=${FUZZ_API_PG:-postgres://postgres@127.0.0.1:5432}

log() { echo "fuzz-api: $*" >&2; }

if [ ! -x "$VENV/bin/st" ]; then
  log "installing schemathesis $ST_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "schemathesis==$ST_VERSION"
fi
[ -x "$BIN" ] || { log "$BIN is missing: make build-dev"; exit 1; }

DB=orderpipe_fuzz_$$
REDIS=${TEST_REDIS_ADDR:-127.0.0.1:6379}
PREFIX="fuzz-api-$$:"
rm -rf "$OUT" && mkdir -p "$OUT"
. deploy/local/pipeline.sh
start_pipeline 18080 19092 19292 ADMIN_TOKEN=fuzz-admin-token RATE_LIMIT_USER_RPS=0

# A sale on the documents' example ids (activity 1, item 10086), so the
# generated orders that use them reach the reserve script, the worker and
# pay (202, replays, 422, SOLD_OUT, ALREADY_PURCHASED), not only 404; PUT
# and end run after the rest (below), and the per-user rate limit is off
# (the generated orders share a handful of userIds: most were 429).
now=$(date -u +%s)
sale=$(printf '{"name":"fuzz","startsAt":"%s","endsAt":"%s","perUserLimit":100,"items":[{"itemId":10086,"stock":1000000}]}' \
  "$(date -u -d "@$((now - 60))" +%Y-%m-%dT%H:%M:%SZ)" "$(date -u -d "@$((now + 3600))" +%Y-%m-%dT%H:%M:%SZ)")
curl -fsS -X PUT -H "Authorization: Bearer fuzz-admin-token" -H "Content-Type: application/json" -d "$sale" \
  "$BASE/admin/v1/activities/1" >/dev/null
curl -fsS -X POST -H "Authorization: Bearer fuzz-admin-token" "$BASE/admin/v1/activities/1/preheat" >/dev/null

log "schemathesis $ST_VERSION, seed $SEED (FUZZ_API_SEED=$SEED repeats this run), $EXAMPLES examples per operation"
status=0
# Run from $OUT: schemathesis keeps its state (.schemathesis/) in the
# working directory. Two passes: every operation but the two that change
# the sale above (replacing its window or items, or ending it, leaves every
# later order 404 NOT_ON_SALE: reserve, replays, pay and cancel would go
# untested; the examples phase ends it within the first second), then
# those two.
st_run() {
  (cd "$OUT" && PYTHONPATH=$ROOT/deploy/local SCHEMATHESIS_HOOKS=fuzz_api_hooks \
    timeout "$TIMEOUT" "$VENV/bin/st" --config-file "$ROOT/deploy/local/fuzz-api.toml" run "$ROOT/gateway/openapi.json" --url "$BASE" \
    -H "Authorization: Bearer fuzz-admin-token" \
    --seed "$SEED" --max-examples "$EXAMPLES" --workers 1 \
    --report junit --report-dir "$OUT" --output-truncate false "$@")
}
st_run --exclude-operation-id putActivity --exclude-operation-id endActivity || status=$?
st_run --include-operation-id putActivity --include-operation-id endActivity || { s=$?; [ "$status" -ne 0 ] || status=$s; }
if [ "$status" -eq 124 ]; then log "cut at ${TIMEOUT}s"; fi
if grep -q '"level":"ERROR"' "$OUT/orderpipe.log"; then
  log "the pipeline logged errors (first 5):"; grep '"level":"ERROR"' "$OUT/orderpipe.log" | head -5 >&2
fi
exit "$status"
