# orderpipe — the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
# The local pipeline turns the admin API on with a development token so the
# README's curl examples work; production sets ADMIN_TOKEN from a secret.
ADMIN_TOKEN ?= dev-admin-token
export ADMIN_TOKEN
# TRACES=1 make run: every span goes to the local span store in bin/traces,
# where `orderpipe locate <requestId>` (with the same TRACE_STORE_DIR) prints
# the request's span tree.
ifneq ($(TRACES),)
TRACE_STORE_DIR ?= $(CURDIR)/bin/traces
export TRACE_STORE_DIR
endif

.PHONY: deps run services promtool pushgateway kubectl-validate k8s-rules test e2e test-kafka test-java build build-dev vet bench fuzz fuzz-api chaos chaos-kafka soak kafka

# When this make began: `make test` and `make e2e` print their wall time
# (prerequisites included) from it.
MAKE_START := $(shell date +%s)

# What `orderpipe version` and the orderpipe_build_info metric say. The
# production build (`build`, deploy/Dockerfile) links no test fake; `-tags
# dev` adds the embedded Kafka broker and the Redis/Postgres stand-ins (run,
# build-dev, and the tests, which test them).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
MODIFIED ?= $(shell git status --porcelain 2>/dev/null | grep -q . && echo true || echo false)
LDFLAGS := -X orderpipe/pkg/version.version=$(VERSION) -X orderpipe/pkg/version.commit=$(COMMIT) -X orderpipe/pkg/version.modified=$(MODIFIED)

# The modules go.sum names, fetched once into Go's module cache before
# anything builds: `go mod download` says nothing unless it fails, where a
# first build, vet or test on a fresh clone would print a "go: downloading"
# line per module.
deps: ## fetch the Go modules (quiet; a no-op once they are in the module cache)
	@$(GO) mod download

# Built, then exec'd: the binary is make's child, so Ctrl-C (SIGINT to the
# whole foreground group) reaches it directly, it drains and exits 0, and
# make has no failed recipe to report (`go run` answers a signalled child
# with exit 1: "make: *** Error 1"). bin/orderpipe-dev stays for the other
# commands (`bin/orderpipe-dev locate …`).
run: deps ## the whole pipeline in the foreground (gateway + worker + closer + embedded Kafka; a -tags dev build)
	@$(GO) build -tags dev -ldflags "$(LDFLAGS)" -o bin/orderpipe-dev . && exec bin/orderpipe-dev all

build: deps ## bin/orderpipe, the production binary (no embedded broker, no stand-ins)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/orderpipe .

build-dev: deps ## bin/orderpipe-dev: bin/orderpipe plus the embedded broker (`orderpipe kafka`) and the stand-ins, for bench and chaos
	$(GO) build -tags dev -ldflags "$(LDFLAGS)" -o bin/orderpipe-dev .

vet: deps ## go vet, every analyzer, over the whole tree as both builds (production and -tags dev); test-kafka runs it first
	$(GO) vet ./...
	$(GO) vet -tags dev ./...

# Every analyzer go vet has, for make test's go test: it then vets each
# package it tests on the build it tests (-tags dev -race), with no second
# compile of the tree (go vet would build it again without -race, once per
# tag set: a minute after a change to a package most others import).
VET_ALL = $(shell $(GO) tool vet help 2>&1 | sed -n '/Registered analyzers/,/By default/p' | awk 'NF && $$1 ~ /^[a-z]+$$/ {print $$1}' | paste -sd, -)

# PostgreSQL and Redis for the tests: installed (Debian packages) and started
# when absent, a no-op where they run or where TEST_DATABASE_URL and
# TEST_REDIS_ADDR point elsewhere.
services: ## make PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379) available for the tests
	@if [ -n "$$TEST_DATABASE_URL" ] && [ -n "$$TEST_REDIS_ADDR" ]; then :; else deploy/local/services.sh; fi

# promtool for the Prometheus rules' unit tests (deploy/prometheus_test.go):
# found on the PATH or in ~/.cache/orderpipe, else unpacked from Debian's
# prometheus package (never installed: that would start a server on :9090).
promtool: ## fetch promtool (Debian's prometheus package, unpacked into ~/.cache/orderpipe) for the alert rules' tests
	@deploy/prometheus/promtool.sh >/dev/null

pushgateway: ## fetch a Prometheus Pushgateway (Debian's package, unpacked into ~/.cache/orderpipe) for the reconciler's push test
	@deploy/prometheus/pushgateway.sh >/dev/null

# The alert and recording rules as a PrometheusRule for prometheus-operator
# users, generated from deploy/prometheus/orderpipe-rules.yml (the test fails
# when the two differ).
k8s-rules: ## regenerate deploy/k8s/components/prometheus-operator/prometheusrule.yaml from deploy/prometheus/orderpipe-rules.yml
	$(GO) test -count=1 -run TestPrometheusRuleMatchesRulesFile ./deploy/ -update-rules

# kubectl-validate for the overlays' tests (deploy/kubectl_validate_test.go):
# found on the PATH or in ~/.cache/orderpipe/bin, else built once with `go
# install sigs.k8s.io/kubectl-validate@v0.0.4` in a module of its own.
kubectl-validate: ## fetch kubectl-validate (go install, into ~/.cache/orderpipe/bin) for the Kubernetes overlays' tests
	@deploy/k8s/kubectl-validate.sh >/dev/null

# The root package's end-to-end tests are one suite (suite_test.go), each
# case written once and run on an engine: TestEndToEnd runs the fast cases
# on kfake (make test), TestEndToEndSlow the slow ones on kfake (make e2e:
# the production binary built and run, make run and Ctrl-C, a JVM, a
# pipeline held for minutes), TestEndToEndOnKafka every case that a cluster
# does not merely repeat on TEST_KAFKA_BROKERS (make test-kafka). A case
# says which it is; the targets name entry points, never cases.
E2E_SLOW := ^TestEndToEndSlow$$
E2E_KFAKE := ^TestEndToEnd(Slow)?$$

# The tests run on a Redis of their own (deploy/local/test-redis.sh: a
# throwaway redis-server on a free port, unless TEST_REDIS_ADDR is set), so
# millions of keys left in the machine's Redis by `make run` do not slow
# them. In `make test` two packages run at once (-p 2; the root package,
# the slowest, starts first) and, within a package, up to TEST_PARALLEL
# tests that call t.Parallel(): each has a pooled database of its own
# (pkg/testenv/pool.go), its own Redis key prefix, topics, broker and
# ports. Tests that change process-wide state stay serial and run first.
# -timeout is per package. Every package with tests is vetted by every
# analyzer as go test builds it (-vet=$(VET_ALL)); `make vet` (the whole
# tree, both builds) runs before make test-kafka. The last line is the wall
# time of the whole `make test`.
TEST_PARALLEL ?= 8
test: deps services promtool pushgateway kubectl-validate ## unit and integration tests in parallel with the race detector, each package vetted by every analyzer (the fast tier; prints its wall time)
	@KUBECTL_VALIDATE=$$(deploy/k8s/kubectl-validate.sh) deploy/local/test-redis.sh $(GO) test -tags dev -race -vet=$(VET_ALL) -count=1 -p 2 -parallel $(TEST_PARALLEL) -skip '$(E2E_SLOW)' -timeout 15m ./...; \
	rc=$$?; t=$$(( $$(date +%s) - $(MAKE_START) )); echo "make test: $$((t / 60)) min $$((t % 60)) s wall"; exit $$rc

# The slow tier: first the slow cases that need the machine to themselves,
# one after another (the quiet log, make run, the loading Redis, the
# SASL_SSL broker), then the ones marked shares all together, up to
# E2E_PARALLEL at once (mostly waiting: an endpoint down for 2 minutes,
# commands waiting out dead stores); all share one production binary,
# built once. TEST_KAFKA_TLS=1 (.ci/run sets it) makes the SASL_SSL test
# fail rather than skip when Java or the Kafka jars are missing.
E2E_PARALLEL ?= 16
e2e: deps services ## the slow end-to-end tests make test skips: the production binary, make run and Ctrl-C, Kafka over SASL_SSL, a quiet healthy log (prints its wall time)
	@deploy/local/test-redis.sh $(GO) test -tags dev -race -count=1 -parallel $(E2E_PARALLEL) -run '$(E2E_SLOW)' -timeout 25m .; \
	rc=$$?; t=$$(( $$(date +%s) - $(MAKE_START) )); echo "make e2e: $$((t / 60)) min $$((t % 60)) s wall"; exit $$rc

# The real-engine tier: the end-to-end tests (root package, gateway, worker)
# on a real Apache Kafka — a 3-broker KRaft cluster (RF 3,
# min.insync.replicas=2) started for the run, or TEST_KAFKA_BROKERS. Also
# pkg/event's TLS/SASL test, on a SASL_SSL broker of its own
# (testenv.MustSecureKafka): TEST_KAFKA_TLS=1 makes it fail rather than
# skip when Java or the jars are missing. These packages' tests, the root
# package's suite on the cluster (TestEndToEndOnKafka) in place of its
# kfake runs, one package and TEST_KAFKA_PARALLEL (1) test at a time:
# beside three Kafka JVMs on a shared two-core machine, 8 and even 2
# pipelines at once starved (the gateway's 2 s Postgres calls timed out,
# 503) and a topic's metadata lagged its creation (TestGroupLag).
TEST_KAFKA_PARALLEL ?= 1
test-kafka: vet services ## the end-to-end tests on a real 3-broker Apache Kafka (fetched by Maven, started and stopped for the run)
	TEST_KAFKA_TLS=1 deploy/local/test-redis.sh deploy/kafka/with-cluster.sh $(GO) test -tags dev -race -count=1 -p 1 -parallel $(TEST_KAFKA_PARALLEL) -skip '$(E2E_KFAKE)' -timeout 25m . ./gateway/ ./worker/ ./pkg/event/

# The Java client (gateway/client/java): Maven generates it from
# gateway/openapi.json (the openapi-generator plugin, into target/), compiles
# the hand-written layer on top, and runs its JUnit tests against a pipeline
# of its own: bin/orderpipe-dev all on free ports, a fresh database, and a
# throwaway redis-server (one test pauses it to get a real 503, so never the
# machine's Redis: TEST_REDIS_ADDR is dropped). Quiet (mvn -q -B -ntp); the
# last line counts the tests, and bin/test-java keeps the logs.
test-java: build-dev services ## the Java client, generated from gateway/openapi.json by Maven, and its JUnit tests against a live pipeline of its own (docs/client.md)
	@env -u TEST_REDIS_ADDR deploy/local/test-redis.sh gateway/client/java/live-test.sh

FUZZTIME ?= 30s
# How long one input found is minimized (Go's default, 60 s, spent on a deep-nesting input stalls a short run).
FUZZMINIMIZETIME ?= 5s
fuzz: deps ## fuzz the order endpoint's decoding/validation (and its key check) and the worker's event decoding (go test runs their seed corpora too)
	$(GO) test -tags dev -run '^$$' -fuzz FuzzParseOrderRequest -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./gateway/
	$(GO) test -tags dev -run '^$$' -fuzz FuzzKeyScanAgreesWithEncodingJSON -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./gateway/
	$(GO) test -tags dev -run '^$$' -fuzz FuzzDecodeAgreesWithSchema -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./pkg/event/

# The OpenAPI-driven property-based tier: schemathesis (pinned, into a venv
# under ~/.cache/orderpipe) against a real `all` on free ports, its own
# database and Redis, the admin API on; a fixed seed (FUZZ_API_SEED), a
# bounded number of examples (FUZZ_API_EXAMPLES). See docs/client.md,
# "HTTP conventions the gateway keeps".
fuzz-api: build-dev services ## fuzz the HTTP API from gateway/openapi.json (schemathesis) against a running pipeline: no 5xx, no answer outside the document, no unstated refusal
	deploy/local/test-redis.sh deploy/local/fuzz-api.sh

# Then `make run`'s one process beside the floor pipeline (bench/floorpipe:
# the contract's exchanges and nothing else) at 1000, 2000 and 4000 req/s,
# and beside a trivial handler and the check floor in a sold-out flood (a few seconds a run).
bench: build-dev ## load-test a fresh local pipeline (c=500, one hot item), race the Redis strategies, then make run's process against the floor pipeline at constant rates and against a trivial handler and the check floor in a sold-out flood; see docs/benchmarks.md
	./bench/run.sh && ./bench/latency.sh && ./bench/flood.sh

# The scripted scenarios (one fault each), then the nemesis: storefront
# clients with timeouts and retries against 2 gateways and 2 workers while
# a seeded schedule kills and pauses processes, restarts, fails over and
# pauses the suite's own Redis (a primary and a replica) and PostgreSQL,
# slows, throttles and resets their links and the broker's (Toxiproxy) and
# poisons the topic, judged by the history checker. The suite needs initdb
# and redis-server (deploy/local/services.sh installs both), not the
# machine's running services. NEMESIS_SEEDS are the CI seeds (each ~25-45 s;
# seeds 2 and 4, and seed 1 in some runs, catch the replay-while-producing
# loss on a binary without its fix; seed 20 fails Redis over while a
# gateway's clock runs behind, and finds a failover losing a 202 without
# REDIS_WAIT_REPLICAS, or an unwaited claim, redrive or fix lock with it);
# CHAOS_SEED=n repeats one seed.
NEMESIS_SEEDS ?= 1,2,4,20
chaos: build-dev ## scripted faults, then a seeded random nemesis (processes, its own Redis and Postgres, links) judged by a history checker (~4 min); see docs/testing.md
	CHAOS_BIN=$(CURDIR)/bin/orderpipe-dev CHAOS_OUT=$(CURDIR)/bin/chaos CHAOS_NEMESIS_SEEDS='$(NEMESIS_SEEDS)' $(GO) test -tags chaos -run 'TestChaos|TestNemesis' -count=1 -v -timeout 20m ./bench/chaos/

# The nemesis on bucketed stock: each item's stock split over CHAOS_BUCKETS
# Redis buckets (users routed by id, the mover refilling empty buckets),
# judged by the same history checker.
BUCKET_SEEDS ?= 3
chaos-buckets: build-dev ## the nemesis with each item's stock over 4 Redis buckets (bucketed stock), seeds BUCKET_SEEDS (~40 s each); see docs/testing.md
	CHAOS_BIN=$(CURDIR)/bin/orderpipe-dev CHAOS_OUT=$(CURDIR)/bin/chaos CHAOS_BUCKETS=4 CHAOS_NEMESIS_SEEDS='$(BUCKET_SEEDS)' $(GO) test -tags chaos -run TestNemesis -count=1 -v -timeout 20m ./bench/chaos/

# The nemesis for DURATION: seeds SEED, SEED+1, ... one after another (each
# a fresh sale, CHAOS_NEMESIS_LOAD of load) until DURATION has passed.
DURATION ?= 10m
SEED ?= 1
soak: build-dev ## the nemesis for DURATION (make soak DURATION=1h SEED=42); see docs/testing.md
	CHAOS_BIN=$(CURDIR)/bin/orderpipe-dev CHAOS_OUT=$(CURDIR)/bin/chaos CHAOS_SOAK=$(DURATION) CHAOS_SEED=$(SEED) $(GO) test -tags chaos -run TestNemesis -count=1 -v -timeout 0 ./bench/chaos/

# The same suite on a real Apache Kafka 4.1: a 3-broker KRaft cluster (RF 3,
# min.insync.replicas=2) that the suite starts itself on free ports through
# deploy/kafka/kafka.sh (each broker a process it kills, pauses and
# restarts), two workers in the group, and the scenarios only a real
# cluster has; then the nemesis on such a cluster (brokers paused, and
# SIGKILLed and restarted, among the other faults), NEMESIS_KAFKA_SEEDS (14
# and 29 kill a broker).
# The development build, as in `make chaos`: the broker is real, but the
# nemesis' clock steps need the stepped clock (DEV_CLOCK_OFFSET_FILE) that
# a production build refuses to start with.
NEMESIS_KAFKA_SEEDS ?= 3,14,29
chaos-kafka: build-dev ## the chaos suite on a real 3-broker Apache Kafka it starts itself, plus partition-leader, two-brokers-down, controller and rebalance faults, then the nemesis on it (~5 min); see docs/testing.md
	deploy/kafka/kafka.sh fetch
	CHAOS_KAFKA_NODES=3 CHAOS_KAFKA_SCRIPT=$(CURDIR)/deploy/kafka/kafka.sh CHAOS_BIN=$(CURDIR)/bin/orderpipe-dev CHAOS_OUT=$(CURDIR)/bin/chaos CHAOS_NEMESIS_SEEDS='$(NEMESIS_KAFKA_SEEDS)' $(GO) test -tags chaos -run 'TestChaos|TestNemesis' -count=1 -v -timeout 30m ./bench/chaos/

kafka: ## a real Apache Kafka 4.1 in the foreground, jars fetched by Maven (KAFKA_NODES=3 for 3 brokers on 9092-9094); see deploy/kafka/kafka.sh
	deploy/kafka/kafka.sh run
