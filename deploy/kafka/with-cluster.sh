#!/usr/bin/env bash
# Runs a command against a real Apache Kafka cluster started for it: 3
# brokers (KAFKA_NODES) on 127.0.0.1:9192-9194 by default, with replication
# factor 3 and min.insync.replicas=2 (kafka.sh), stopped again afterwards
# whatever the command's outcome. The command sees TEST_KAFKA_BROKERS (the
# tests' real-engine switch, pkg/testenv) and KAFKA_REPLICATION_FACTOR.
#
#   deploy/kafka/with-cluster.sh go test ./...      (make test-kafka)
#
# With TEST_KAFKA_BROKERS already set, no cluster is started: that one is used.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

if [ -n "${TEST_KAFKA_BROKERS:-}" ]; then
  exec "$@"
fi
export KAFKA_NODES=${KAFKA_NODES:-3}
export KAFKA_BASE_PORT=${KAFKA_BASE_PORT:-9192}
export KAFKA_CONTROLLER_BASE_PORT=${KAFKA_CONTROLLER_BASE_PORT:-19192}
brokers=$("$here/kafka.sh" start)
trap '"$here/kafka.sh" stop >&2' EXIT
export TEST_KAFKA_BROKERS=$brokers
export KAFKA_REPLICATION_FACTOR=${KAFKA_REPLICATION_FACTOR:-$((KAFKA_NODES < 3 ? KAFKA_NODES : 3))}
echo "with-cluster: TEST_KAFKA_BROKERS=$TEST_KAFKA_BROKERS KAFKA_REPLICATION_FACTOR=$KAFKA_REPLICATION_FACTOR" >&2
"$@"
