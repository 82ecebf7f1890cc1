# orderpipe — the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
# The local pipeline turns the admin API on with a development token so the
# README's curl examples work; production sets ADMIN_TOKEN from a secret.
ADMIN_TOKEN ?= dev-admin-token
export ADMIN_TOKEN

.PHONY: run services test test-kafka build vet bench fuzz chaos kafka

run: ## the whole pipeline in the foreground (gateway + worker + closer + embedded Kafka)
	$(GO) run . all

build:
	$(GO) build -o bin/orderpipe .

vet:
	$(GO) vet ./...

# PostgreSQL and Redis for the tests: installed (Debian packages) and started
# when absent, a no-op where they run or where TEST_DATABASE_URL and
# TEST_REDIS_ADDR point elsewhere.
services: ## make PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379) available for the tests
	@if [ -n "$$TEST_DATABASE_URL" ] && [ -n "$$TEST_REDIS_ADDR" ]; then :; else deploy/local/services.sh; fi

test: vet services ## vet, then unit and integration tests with the race detector
	$(GO) test -race -count=1 -p 1 -timeout 25m ./...

# The real-engine tier: the end-to-end tests (root package, gateway, worker)
# on a real Apache Kafka — a 3-broker KRaft cluster (RF 3,
# min.insync.replicas=2) started for the run, or TEST_KAFKA_BROKERS.
test-kafka: vet services ## the end-to-end tests on a real 3-broker Apache Kafka (fetched by Maven, started and stopped for the run)
	deploy/kafka/with-cluster.sh $(GO) test -race -count=1 -p 1 -timeout 25m . ./gateway/ ./worker/

FUZZTIME ?= 30s
fuzz: ## fuzz the order endpoint's decoding/validation and the worker's event decoding (go test runs their seed corpora too)
	$(GO) test -run '^$$' -fuzz FuzzParseOrderRequest -fuzztime $(FUZZTIME) ./gateway/
	$(GO) test -run '^$$' -fuzz FuzzDecodeAgreesWithSchema -fuzztime $(FUZZTIME) ./pkg/event/

bench: build ## load-test a fresh local pipeline (c=500, one hot item), then race the Redis strategies; see docs/benchmarks.md
	./bench/run.sh

chaos: build ## kill, cut and poison each part of a separately-run pipeline under load, then check I1–I6 (~1.5-3 min); see docs/benchmarks.md
	CHAOS_BIN=$(CURDIR)/bin/orderpipe CHAOS_OUT=$(CURDIR)/bin/chaos $(GO) test -tags chaos -run TestChaos -count=1 -v -timeout 20m ./bench/chaos/

kafka: ## a real Apache Kafka 4.1 in the foreground, jars fetched by Maven (KAFKA_NODES=3 for 3 brokers on 9092-9094); see deploy/kafka/kafka.sh
	deploy/kafka/kafka.sh run
