package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"orderpipe/pkg/testenv"
)

// The end-to-end suite: every end-to-end test of this package is a case
// written once, func(t, engine), and registered in suite below; each tier
// runs the suite's cases on its engine (the shape of watermill's universal
// pub/sub tests, which each backend's test calls with its constructor):
//
//	TestEndToEnd        the fast cases on kfake             make test
//	TestEndToEndSlow    the slow cases on kfake             make e2e (make test skips it)
//	TestEndToEndOnKafka every case but the kfakeOnly ones,  make test-kafka (it skips without
//	                    on the cluster at TEST_KAFKA_BROKERS  TEST_KAFKA_BROKERS)
//
// A case calls t.Parallel() itself when it can share the machine (its
// database, Redis prefix, topics and broker are its own); the serial ones
// run first, alone (docs/testing.md). A slow case calls it only when it
// is marked shares: it then runs beside the other shared slow cases, after
// the slow cases that run alone.

// engine is the Kafka-protocol broker a case's pipelines run on.
type engine struct {
	name string
	// inProcess: a kfake cluster in this process, one per pipeline, which
	// a case can stall, hold or close (p.Kafka.Cluster); `all`'s embedded
	// broker is this engine too.
	inProcess bool
	kafka     func(testing.TB) testenv.Kafka
}

// kfakeEngine gives each pipeline an in-process kfake broker of its own,
// whatever TEST_KAFKA_BROKERS says.
var kfakeEngine = engine{name: "kfake", inProcess: true, kafka: func(tb testing.TB) testenv.Kafka {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		tb.Fatalf("starting kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return testenv.Kafka{Brokers: c.ListenAddrs(), Cluster: c}
}}

// clusterEngine is a running Kafka cluster shared by the cases; each
// pipeline has topics and a consumer group of its own on it.
func clusterEngine(brokers []string) engine {
	return engine{name: "kafka", kafka: func(testing.TB) testenv.Kafka { return testenv.Kafka{Brokers: brokers} }}
}

// e2eCase is one end-to-end test body and what decides where it runs.
type e2eCase struct {
	name string // the subtest's name; the body is test<name>
	run  func(t *testing.T, e engine)
	// slow: it builds or runs the production binary, runs make run, starts
	// a JVM, or holds a pipeline for minutes — make e2e runs it, make test
	// does not. A slow case runs alone, one after another, unless it is
	// marked shares.
	slow bool
	// shares: a slow case that can share the machine with the other slow
	// cases so marked. It mostly waits (a store or an endpoint held down)
	// or runs the production binary for moments, on what is its own (a
	// database of the pool, a Redis prefix or server, a PostgreSQL, ports,
	// a broker), and no deadline it holds is tight enough for a busy
	// machine to miss. Its body calls t.Parallel() (make e2e runs the
	// shared ones together, -parallel E2E_PARALLEL, after the ones that run
	// alone); the production binary they run is built once, under binMu
	// (mustBinary). A slow case that is CPU-heavy or times something — a
	// burst held to a quiet log, make run, a JVM, a Redis that loads for 2 s
	// — is not marked, does not call t.Parallel(), and has the machine.
	shares bool
	// kfakeOnly: a cluster would only repeat the kfake run — the case
	// reaches no broker of the engine's (none, a closed address, or one it
	// starts itself), or the broker is not what it holds still for minutes.
	kfakeOnly bool
}

// suite is every end-to-end case of this package.
var suite = []e2eCase{
	// admin_list_e2e_test.go
	{name: "ListActivitiesPagesNewestFirst", run: testListActivitiesPagesNewestFirst},
	// admin_read_e2e_test.go
	{name: "AdminReadsActivity", run: testAdminReadsActivity},
	// bench_e2e_test.go
	{name: "BenchLoadAudit", run: testBenchLoadAudit},
	// buckets_e2e_test.go
	{name: "BucketsAdminAndPreheat", run: testBucketsAdminAndPreheat},
	{name: "BucketsRoutingAndLimit", run: testBucketsRoutingAndLimit},
	{name: "BucketsReusedRequestIDAcrossUsers", run: testBucketsReusedRequestIDAcrossUsers},
	{name: "BucketsMoverRefillsEmptyBucket", run: testBucketsMoverRefillsEmptyBucket},
	{name: "BucketsReconcilerSumsAndFixes", run: testBucketsReconcilerSumsAndFixes},
	{name: "BucketsCloserReleasesIntoBucket", run: testBucketsCloserReleasesIntoBucket},
	// cancel_e2e_test.go
	{name: "CancelOrder", run: testCancelOrder},
	{name: "CancelPendingOrder", run: testCancelPendingOrder},
	{name: "StatusEventsOfARace", run: testStatusEventsOfARace},
	// client_e2e_test.go
	{name: "GoClientSpeaksEveryRoute", run: testGoClientSpeaksEveryRoute},
	// closer_e2e_test.go
	{name: "CloserClosesUnpaidOrder", run: testCloserClosesUnpaidOrder},
	{name: "PayOrder", run: testPayOrder},
	{name: "PayPendingOrder", run: testPayPendingOrder},
	// dlq_e2e_test.go
	{name: "DLQListShowReplay", run: testDLQListShowReplay},
	// e2e_test.go
	{name: "OrderBecomesUnpaid", run: testOrderBecomesUnpaid},
	{name: "GetOrderPendingBeforePersistence", run: testGetOrderPendingBeforePersistence},
	{name: "OrderRejections", run: testOrderRejections},
	{name: "AdminAPI", run: testAdminAPI},
	{name: "HotItemRace", run: testHotItemRace},
	{name: "Idempotency", run: testIdempotency},
	{name: "KafkaUnreachable", run: testKafkaUnreachable},
	{name: "ProducedEventMatchesSchema", run: testProducedEventMatchesSchema},
	// embedded_e2e_test.go
	{name: "AllReachesItsEmbeddedBrokerThroughMemory", run: testAllReachesItsEmbeddedBrokerThroughMemory},
	// end_e2e_test.go
	{name: "KillSwitchEndsTheSale", run: testKillSwitchEndsTheSale},
	{name: "KillSwitchBeforeTheStart", run: testKillSwitchBeforeTheStart},
	{name: "MovedWindowIsNotOnSaleUntilPreheated", run: testMovedWindowIsNotOnSaleUntilPreheated},
	{name: "EndedSaleStaysEnded", run: testEndedSaleStaysEnded},
	{name: "EndStaysPulledUnderRacingPutAndPreheat", run: testEndStaysPulledUnderRacingPutAndPreheat},
	{name: "KillSwitchDuringAPreheat", run: testKillSwitchDuringAPreheat},
	// events_e2e_test.go
	{name: "EventsCommand", run: testEventsCommand},
	// http_conventions_e2e_test.go
	{name: "IntegersByValue", run: testIntegersByValue},
	{name: "MethodNotAllowedEndToEnd", run: testMethodNotAllowedEndToEnd},
	// idempotency_e2e_test.go
	{name: "IdempotencyKeyOnOrders", run: testIdempotencyKeyOnOrders},
	{name: "IdempotencyKeyInProgress", run: testIdempotencyKeyInProgress},
	{name: "IdempotencyKeyOnPayAndCancel", run: testIdempotencyKeyOnPayAndCancel},
	{name: "CloserNeverClosesBeforePayBy", run: testCloserNeverClosesBeforePayBy},
	// monitoring_e2e_test.go
	{name: "MonitoringUsesExportedMetrics", run: testMonitoringUsesExportedMetrics},
	// neverlose_test.go
	{name: "ReplayWhileProducingIsNeverLost", run: testReplayWhileProducingIsNeverLost},
	{name: "ReplayAfterRedisLossShowsNothingLost", run: testReplayAfterRedisLossShowsNothingLost},
	{name: "RequestIDReusedForAnotherItem", run: testRequestIDReusedForAnotherItem},
	{name: "PoisonCopiesOfARealEventChangeNothing", run: testPoisonCopiesOfARealEventChangeNothing},
	// observability_e2e_test.go
	{name: "TraceFollowsOneRequest", run: testTraceFollowsOneRequest},
	{name: "TraceContinuesCallersTrace", run: testTraceContinuesCallersTrace},
	{name: "MetricsMoveWhenOrdersFlow", run: testMetricsMoveWhenOrdersFlow},
	{name: "Locate", run: testLocate},
	// openloop_e2e_test.go
	{name: "BenchOpenLoop", run: testBenchOpenLoop},
	{name: "BenchSoldOutFlood", run: testBenchSoldOutFlood},
	// postgres_outage_e2e_test.go
	{name: "PostgresOutageKeepsTakingOrders", run: testPostgresOutageKeepsTakingOrders},
	// preheat_e2e_test.go
	{name: "PreheatMarkCutSellsNothing", run: testPreheatMarkCutSellsNothing},
	{name: "PreheatRedisCutFixesLayout", run: testPreheatRedisCutFixesLayout},
	// reconcile_e2e_test.go
	{name: "RedriveStrandedReservation", run: testRedriveStrandedReservation},
	{name: "ReconcilerCountsInFlight", run: testReconcilerCountsInFlight},
	{name: "ReconcilerCountsCloserCompensations", run: testReconcilerCountsCloserCompensations},
	{name: "ReconcilerNudgedStock", run: testReconcilerNudgedStock},
	{name: "ReconcilerRedisLoss", run: testReconcilerRedisLoss},
	{name: "ReconcilerLoopDuringRace", run: testReconcilerLoopDuringRace},
	{name: "ReconcilerFixAfterRedisLostTheFence", run: testReconcilerFixAfterRedisLostTheFence},
	// replicawait_e2e_test.go
	{name: "ReplicaWaitFailsClosedWhenNoReplicaAcks", run: testReplicaWaitFailsClosedWhenNoReplicaAcks},
	{name: "ReplicaWaitFailoverLosesNo202", run: testReplicaWaitFailoverLosesNo202},
	{name: "ReplicaWaitFailoverKeepsTheWorkersClaim", run: testReplicaWaitFailoverKeepsTheWorkersClaim},
	// resilience_test.go
	{name: "RedisDownFailsClosed", run: testRedisDownFailsClosed},
	{name: "KafkaDownOpensBreaker", run: testKafkaDownOpensBreaker},
	{name: "WorkerWaitsForPostgres", run: testWorkerWaitsForPostgres},
	{name: "UserFloodIsRateLimited", run: testUserFloodIsRateLimited},
	{name: "APITokensAndAdminListener", run: testAPITokensAndAdminListener},
	{name: "HungRedisAnswers503InTime", run: testHungRedisAnswers503InTime},
	// trace_store_e2e_test.go
	{name: "LocatePrintsSpanTree", run: testLocatePrintsSpanTree},
	{name: "LocatePrintsSpanTreeFromJaeger", run: testLocatePrintsSpanTreeFromJaeger},
	{name: "LocateRefusedAndRedisDown", run: testLocateRefusedAndRedisDown},
	// traceresponse_e2e_test.go
	{name: "TraceResponseAndStatusEventTrace", run: testTraceResponseAndStatusEventTrace},
	// webhook_e2e_test.go
	{name: "WebhooksEndToEnd", run: testWebhooksEndToEnd},

	// The slow cases (make e2e). Only the healthy pipeline's log is also
	// held on the cluster: a real cluster's clients may warn where kfake's
	// do not. The quiet log (a burst on two cores), make run and Ctrl-C,
	// the Redis that loads for 2 s and the SASL_SSL broker (a JVM) run
	// alone; the others share.
	// cli_test.go
	{name: "HelpTouchesNothing", run: testHelpTouchesNothing, slow: true, shares: true, kfakeOnly: true},
	{name: "BadCommandLinesExit2", run: testBadCommandLinesExit2, slow: true, shares: true, kfakeOnly: true},
	{name: "LogLinesAreJSON", run: testLogLinesAreJSON, slow: true, shares: true, kfakeOnly: true},
	{name: "Version", run: testVersion, slow: true, shares: true, kfakeOnly: true},
	{name: "BuildInfoMetric", run: testBuildInfoMetric, slow: true, shares: true, kfakeOnly: true},
	{name: "ProductionBuildHasNoEmbeddedBroker", run: testProductionBuildHasNoEmbeddedBroker, slow: true, shares: true, kfakeOnly: true},
	{name: "ProductionBuildHasNoSteppedClock", run: testProductionBuildHasNoSteppedClock, slow: true, shares: true, kfakeOnly: true},
	// quiet_e2e_test.go
	{name: "HealthyPipelineLogsNoWarnings", run: testHealthyPipelineLogsNoWarnings, slow: true},
	// readme_test.go
	{name: "MakeRunCtrlCEndsClean", run: testMakeRunCtrlCEndsClean, slow: true, kfakeOnly: true},
	// resilience_test.go
	{name: "StartRidesOutUnreachableStores", run: testStartRidesOutUnreachableStores, slow: true, shares: true, kfakeOnly: true},
	{name: "StartWaitsForRedisToLoad", run: testStartWaitsForRedisToLoad, slow: true, kfakeOnly: true},
	{name: "StartWaitsForRedisFailover", run: testStartWaitsForRedisFailover, slow: true, shares: true, kfakeOnly: true},
	{name: "StartWaitsForPostgresToRecover", run: testStartWaitsForPostgresToRecover, slow: true, shares: true, kfakeOnly: true},
	{name: "MigrateWaitsForPostgresToRecover", run: testMigrateWaitsForPostgresToRecover, slow: true, shares: true, kfakeOnly: true},
	{name: "TopicsWaitsForAStartingBroker", run: testTopicsWaitsForAStartingBroker, slow: true, shares: true, kfakeOnly: true},
	// secrets_test.go
	{name: "SecretsNeverShown", run: testSecretsNeverShown, slow: true, shares: true, kfakeOnly: true},
	// tls_test.go
	{name: "BinaryReachesRedisOverTLS", run: testBinaryReachesRedisOverTLS, slow: true, shares: true, kfakeOnly: true},
	{name: "BinaryReachesPostgresOverTLS", run: testBinaryReachesPostgresOverTLS, slow: true, shares: true, kfakeOnly: true},
	{name: "KafkaOverSASLSSL", run: testKafkaOverSASLSSL, slow: true, kfakeOnly: true},
	// webhook_e2e_test.go
	{name: "WebhookEndpointDownForMinutes", run: testWebhookEndpointDownForMinutes, slow: true, shares: true, kfakeOnly: true},
}

func TestEndToEnd(t *testing.T) {
	runSuite(t, kfakeEngine, func(c e2eCase) bool { return !c.slow })
}

func TestEndToEndSlow(t *testing.T) {
	runSuite(t, kfakeEngine, func(c e2eCase) bool { return c.slow })
}

func TestEndToEndOnKafka(t *testing.T) {
	brokers := os.Getenv("TEST_KAFKA_BROKERS")
	if brokers == "" {
		t.Skip("TEST_KAFKA_BROKERS is not set: make test-kafka starts a cluster and sets it")
	}
	runSuite(t, clusterEngine(strings.Split(brokers, ",")), func(c e2eCase) bool { return !c.kfakeOnly })
}

// runSuite runs each case that pick picks as a subtest on e.
func runSuite(t *testing.T, e engine, pick func(e2eCase) bool) {
	t.Logf("engine: %s", e.name)
	for _, c := range suite {
		if pick(c) {
			t.Run(c.name, func(t *testing.T) { c.run(t, e) })
		}
	}
}

// TestSuiteHasEveryCase: a body written for the suite but not registered
// would never run; a slow case that needs the machine to itself but calls
// t.Parallel() would run beside the others, and one marked shares that
// does not call it would run alone, unseen. So every function of this
// package's tests shaped func(*testing.T, engine) is the run of exactly
// one case, named after it; a slow case calls t.Parallel() if and only if
// it is marked shares, and only a slow case is; and no top-level test
// starts a pipeline (it would run on one engine only).
func TestSuiteHasEveryCase(t *testing.T) {
	t.Parallel()
	registered := map[string]e2eCase{}
	for _, c := range suite {
		fn := runtime.FuncForPC(reflect.ValueOf(c.run).Pointer()).Name()
		fn = fn[strings.LastIndex(fn, ".")+1:]
		if _, dup := registered[fn]; dup {
			t.Errorf("%s is the run of two cases", fn)
		}
		if fn != "test"+c.name {
			t.Errorf("case %q runs %s: name the body test%s, so -run 'TestEndToEnd/^%s$' finds it", c.name, fn, c.name, c.name)
		}
		if c.shares && !c.slow {
			t.Errorf("case %q is marked shares but is not slow: shares is for the slow cases (a fast case calls t.Parallel() when it can share the machine)", c.name)
		}
		registered[fn] = c
	}
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	bodies := 0
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil {
				continue
			}
			name := fn.Name.Name
			if strings.HasPrefix(name, "Test") {
				if calls(fn.Body, "mustPipeline", "mustPipelineLogging") {
					t.Errorf("%s (%s) starts a pipeline outside the suite: make it a case of suite (suite_test.go)", name, f)
				}
				continue
			}
			if !isCaseBody(fn) {
				continue
			}
			bodies++
			c, ok := registered[name]
			switch {
			case !ok:
				t.Errorf("%s (%s) is a case body that no case of suite runs", name, f)
			case c.slow && !c.shares && calls(fn.Body, "Parallel"):
				t.Errorf("%s (%s) is a slow case that runs alone but calls t.Parallel(): it would run beside the others; "+
					"mark it shares if nothing it holds needs the machine to itself", name, f)
			case c.slow && c.shares && !calls(fn.Body, "Parallel"):
				t.Errorf("%s (%s) is a slow case marked shares but does not call t.Parallel(): it runs alone", name, f)
			}
		}
	}
	if bodies != len(suite) {
		t.Errorf("found %d case bodies in the source for %d cases: is the check reading the right files?", bodies, len(suite))
	}
}

// isCaseBody reports whether fn is shaped func(*testing.T, engine).
func isCaseBody(fn *ast.FuncDecl) bool {
	var types []string
	for _, field := range fn.Type.Params.List {
		n := max(len(field.Names), 1)
		for range n {
			types = append(types, typeString(field.Type))
		}
	}
	return fn.Type.Results == nil && len(types) == 2 && types[0] == "*testing.T" && types[1] == "engine"
}

func typeString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return "*" + typeString(e.X)
	case *ast.SelectorExpr:
		return typeString(e.X) + "." + e.Sel.Name
	}
	return ""
}

// calls reports whether body calls a function or method of one of names.
func calls(body ast.Node, names ...string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || found {
			return !found
		}
		switch f := call.Fun.(type) {
		case *ast.Ident:
			found = slices.Contains(names, f.Name)
		case *ast.SelectorExpr:
			found = slices.Contains(names, f.Sel.Name)
		}
		return !found
	})
	return found
}
