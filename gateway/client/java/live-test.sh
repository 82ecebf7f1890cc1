#!/usr/bin/env bash
# live-test.sh: the Java client's tests against a live pipeline (`make
# test-java`). Starts bin/orderpipe-dev all (gateway, worker, closer,
# embedded Kafka) on free ports with a fresh Postgres database of its own and
# the Redis TEST_REDIS_ADDR names — a throwaway redis-server of its own
# (deploy/local/test-redis.sh), since one test pauses it (CLIENT PAUSE) to
# get a real 503 — and the admin API on; then runs `mvn verify` on the
# client: the openapi-generator plugin generates the client from
# gateway/openapi.json, the unit tests run, and the JUnit live tests
# (LivePipelineIT) create their own sale through the admin API and drive
# place, replay, pay, cancel, GET and the error codes. The per-user rate
# limit is 20 requests, then one per 100 s, so the rate-limit test's 21st
# request is refused whatever the machine's speed. Maven's log and the
# pipeline's are left in bin/test-java; the last line is the tests' count.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
BIN=${JAVA_TEST_BIN:-$ROOT/bin/orderpipe-dev}
OUT=$ROOT/bin/test-java
PG=${JAVA_TEST_PG:-postgres://postgres@127.0.0.1:5432}
PG_USER=${PG#postgres://}; PG_USER=${PG_USER%@*}; PG_HOST=${PG#*@}
log() { echo "test-java: $*" >&2; }

[ -x "$BIN" ] || { log "$BIN is missing: make build-dev"; exit 1; }
[ -n "${TEST_REDIS_ADDR:-}" ] || { log "TEST_REDIS_ADDR is empty: run under deploy/local/test-redis.sh (needs redis-server: make services)"; exit 1; }
command -v mvn >/dev/null || { log "mvn not found: install Maven (Debian: apt-get install maven)"; exit 1; }

DB=orderpipe_java_$$
TOKEN=java-admin-token-$$
REDIS=$TEST_REDIS_ADDR
PREFIX="java-$$:"
rm -rf "$OUT" && mkdir -p "$OUT"
. deploy/local/pipeline.sh
start_pipeline 18180 19192 19392 ADMIN_TOKEN="$TOKEN" RATE_LIMIT_USER_RPS=0.01 RATE_LIMIT_USER_BURST=20 RATE_LIMIT_GLOBAL_RPS=0

# -q: Maven says nothing but failures (-ntp: no download lines either); the
# generator's banner goes to the log with the rest.
status=0
rm -rf gateway/client/java/target/surefire-reports gateway/client/java/target/failsafe-reports
mvn -B -ntp -q -f gateway/client/java/pom.xml verify \
  -Dorderpipe.baseUrl="$BASE" -Dorderpipe.adminToken="$TOKEN" -Dorderpipe.redisAddr="$TEST_REDIS_ADDR" \
  -Dorderpipe.jdbcUrl="jdbc:postgresql://$PG_HOST/$DB?user=$PG_USER&sslmode=disable" \
  >"$OUT/mvn.log" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  log "mvn verify failed (exit $status); its log, $OUT/mvn.log, ends:"
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/mvn.log" | grep -v -E '^\[INFO\]|^#|^$' | tail -60 >&2
fi
# The count of the unit and live tests, from their reports.
reports=$(ls gateway/client/java/target/surefire-reports/TEST-*.xml gateway/client/java/target/failsafe-reports/TEST-*.xml 2>/dev/null || true)
if [ -z "$reports" ]; then log "no test report: no test ran"; exit 1; fi
[ -f gateway/client/java/target/failsafe-reports/TEST-orderpipe.client.LivePipelineIT.xml ] ||
  { log "the live tests did not run"; [ "$status" -ne 0 ] || status=1; }
# shellcheck disable=SC2086
awk -F'"' '/<testsuite /{for(i=1;i<NF;i++){if($i~/ tests=$/)t+=$(i+1);if($i~/ failures=$/)f+=$(i+1);if($i~/ errors=$/)e+=$(i+1);if($i~/ skipped=$/)s+=$(i+1)}}
  END{printf "test-java: %d passed, %d failed, %d skipped\n", t-f-e-s, f+e, s}' $reports
exit "$status"
