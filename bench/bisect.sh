#!/usr/bin/env bash
# The accepted path's latency across commits, measured from outside as a
# storefront would: for each build, one `orderpipe all` (make run's shape:
# the embedded broker) on free ports with a fresh database and its own
# activity, a sale with stock for every request, then vegeta at a constant
# RATE for SECONDS, every request a new buyer; prints each build's P50 /
# P99 / max, how many answers were 202, and the CPU µs per request of
# orderpipe all and of Redis over the attack (/proc). Only what every version of the
# contract has is used (the admin API's PUT and preheat, POST /v1/orders),
# so a build from any commit can be measured; builds run one after
# another, alternating when REPEAT > 1, so the machine's drift falls on
# each alike.
#   bench/bisect.sh 9520405 10ce8e4 HEAD                build each commit (a temporary worktree), measure each
#   RATE=2000 SECONDS_EACH=15 REPEAT=3 bench/bisect.sh A B
#   BINS="/tmp/a /tmp/b" bench/bisect.sh                 already built binaries instead of commits
# Needs vegeta (go install github.com/tsenart/vegeta/v12@latest; on PATH or
# in $(go env GOPATH)/bin), PostgreSQL and Redis (make services).
# Exit status: 0 measured, 2 could not run.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=${RATE:-2000}
SECONDS_EACH=${SECONDS_EACH:-15}
REPEAT=${REPEAT:-1}
OUT=${OUT:-bin/bench}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
ADMIN_TOKEN=bisect-admin-token
export PGOPTIONS="-c client_min_messages=warning"

. bench/lib.sh

VEGETA=$(command -v vegeta || echo "$(go env GOPATH)/bin/vegeta")
[ -x "$VEGETA" ] || { echo "bisect: vegeta not found: go install github.com/tsenart/vegeta/v12@latest" >&2; exit 2; }
mkdir -p "$OUT/bisect"

bins=()
labels=()
if [ -n "${BINS:-}" ]; then
  for b in $BINS; do bins+=("$b"); labels+=("$(basename "$b")"); done
else
  [ $# -gt 0 ] || { echo "usage: bench/bisect.sh COMMIT... (or BINS=\"...\")" >&2; exit 2; }
  for c in "$@"; do
    sha=$(git rev-parse --short "$c^{commit}") || exit 2
    bin="$OUT/bisect/orderpipe-$sha"
    if [ ! -x "$bin" ]; then
      wt=$(mktemp -d)
      git worktree add --detach "$wt" "$sha" >/dev/null 2>&1 || { echo "bisect: cannot check out $c" >&2; exit 2; }
      echo "bisect: building $sha ($(git log -1 --format=%ad --date=short "$sha"))" >&2
      (cd "$wt" && go build -tags dev -o "$OLDPWD/$bin" .) || { git worktree remove --force "$wt"; echo "bisect: $sha does not build" >&2; exit 2; }
      git worktree remove --force "$wt"
    fi
    bins+=("$bin")
    labels+=("$sha")
  done
fi

# One run of bin: prints "P50 P99 max ok/total" (ms).
measure() {
  local bin=$1 tag=$2
  local db="orderpipe_bisect_${tag//[^a-zA-Z0-9]/_}" http_port kafka_port pid activity=$((RANDOM * 1000 + RANDOM))
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db" -qc "CREATE DATABASE $db" >/dev/null
  http_port=$(free_port)
  kafka_port=$(free_port)
  local log="$OUT/bisect/$tag.log"
  env DATABASE_URL="$PG/$db?sslmode=disable" HTTP_ADDR="127.0.0.1:$http_port" ADMIN_TOKEN=$ADMIN_TOKEN \
    KAFKA_EMBEDDED_PORT="$kafka_port" "$bin" migrate >"$log" 2>&1 || true
  env DATABASE_URL="$PG/$db?sslmode=disable" HTTP_ADDR="127.0.0.1:$http_port" ADMIN_TOKEN=$ADMIN_TOKEN \
    KAFKA_EMBEDDED_PORT="$kafka_port" "$bin" all >>"$log" 2>&1 &
  pid=$!
  # shellcheck disable=SC2064
  trap "kill $pid 2>/dev/null || true" EXIT
  wait_port "$http_port" "$pid" || { echo "bisect: $tag did not listen; see $log" >&2; return 2; }
  local url="http://127.0.0.1:$http_port" n=$((RATE * SECONDS_EACH)) t
  for t in $(seq 1 60); do curl -sf "$url/readyz" >/dev/null && break; sleep 1; done
  local now start end
  now=$(date -u +%s)
  start=$(date -u -d "@$((now - 60))" +%Y-%m-%dT%H:%M:%SZ)
  end=$(date -u -d "@$((now + 3600))" +%Y-%m-%dT%H:%M:%SZ)
  curl -sf -X PUT "$url/admin/v1/activities/$activity" -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
    -d "{\"name\":\"bisect\",\"startsAt\":\"$start\",\"endsAt\":\"$end\",\"perUserLimit\":1,\"items\":[{\"itemId\":1,\"stock\":$n}]}" >/dev/null ||
    { echo "bisect: $tag: creating the sale failed" >&2; return 2; }
  curl -sf -X POST "$url/admin/v1/activities/$activity/preheat" -H "Authorization: Bearer $ADMIN_TOKEN" >/dev/null ||
    { echo "bisect: $tag: preheat failed" >&2; return 2; }
  python3 - "$url" "$activity" "$n" >"$OUT/bisect/$tag.targets" <<'EOF'
import base64, json, sys
url, activity, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    body = json.dumps({"requestId": f"b-{activity}-{i}", "userId": i + 1, "activityId": activity, "itemId": 1, "quantity": 1})
    print(json.dumps({"method": "POST", "url": url + "/v1/orders", "header": {"Content-Type": ["application/json"]},
                      "body": base64.b64encode(body.encode()).decode()}))
EOF
  # CPU over the attack: orderpipe all, and Redis (every redis-server here,
  # or with SHARED=1 the one on REDIS_PORT).
  local redis_pids before after
  redis_pids=$(procs redis | tr '\n' ' ')
  before=$(mktemp) after=$(mktemp)
  # shellcheck disable=SC2086
  { pid_ticks "$pid" | sed 's/^/all /'; pid_ticks $redis_pids | sed 's/^/redis /'; } >"$before"
  "$VEGETA" attack -format=json -lazy -rate="$RATE/s" -duration="${SECONDS_EACH}s" -timeout=10s -max-workers=200 \
    <"$OUT/bisect/$tag.targets" >"$OUT/bisect/$tag.bin"
  # shellcheck disable=SC2086
  { pid_ticks "$pid" | sed 's/^/all /'; pid_ticks $redis_pids | sed 's/^/redis /'; } >"$after"
  local cpu
  cpu=$(awk -v hz="$(getconf CLK_TCK)" -v n="$n" 'NR == FNR { b[$1 " " $2] = $3; next }
    { k = $1 " " $2; t[$1] += $3 - (k in b ? b[k] : 0) } END { printf "%.0f %.0f", 1e6 * t["all"] / hz / n, 1e6 * t["redis"] / hz / n }' "$before" "$after")
  rm -f "$before" "$after"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  trap - EXIT
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  # The sale's keys (an old build knows no key prefix; every key of it names the activity).
  redis-cli -p "${REDIS_PORT:-6379}" --scan --pattern "*a$activity:*" | xargs -r -n 500 redis-cli -p "${REDIS_PORT:-6379}" del >/dev/null || true
  "$VEGETA" report -type=json <"$OUT/bisect/$tag.bin" | python3 -c '
import json, sys
r = json.load(sys.stdin)
l = r["latencies"]
ok = r["status_codes"].get("202", 0)
print("%.2f %.2f %.2f %d/%d" % (l["50th"] / 1e6, l["99th"] / 1e6, l["max"] / 1e6, ok, r["requests"]), end=" ")'
  echo "$cpu"
}

printf '%-10s %-6s %-30s %-14s %s\n' build round "P50 / P99 / max ms" "202s" "CPU µs per request: all / redis"
for round in $(seq 1 "$REPEAT"); do
  for i in "${!bins[@]}"; do
    read -r p50 p99 mx ok cpu_all cpu_redis < <(measure "${bins[$i]}" "${labels[$i]}-$round") || exit 2
    printf '%-10s %-6s %-30s %-14s %s\n' "${labels[$i]}" "$round" "$p50 / $p99 / $mx" "$ok" "$cpu_all / $cpu_redis"
  done
done
