package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"orderpipe/bench"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// testBenchLoadAudit runs the load tool against the real pipeline and checks
// that its audit comes out clean and its counts agree with each other and
// with the harness's own invariant checks.
func testBenchLoadAudit(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "relay"}, nil)
	const requests, units = 500, 200
	var progress bytes.Buffer
	rep, _ := mustBenchRun(t, p, bench.Config{Concurrency: 50, Requests: requests, Items: 1,
		Stock: units, RetryShare: 0.10, RepeatShare: 0.05, Seed: 42, Progress: &progress,
		KafkaBrokers: p.Cfg.Kafka.Brokers, StatusTopic: p.Cfg.Kafka.StatusTopic, KafkaSecurity: p.Cfg.Kafka.Security})
	au := rep.Audit
	if !au.StatusChecked || len(au.Violations) != 0 {
		t.Errorf("I7 checked %v; violations %v", au.StatusChecked, au.Violations)
	}
	if au.OversoldUnits != 0 || au.Lost != 0 || au.DuplicateUsers != 0 || au.DuplicateReqIDs != 0 || rep.DoubleAccepted != 0 {
		t.Errorf("oversold %d, lost %d, duplicate users %d, duplicate requests %d, double accepted %d",
			au.OversoldUnits, au.Lost, au.DuplicateUsers, au.DuplicateReqIDs, rep.DoubleAccepted)
	}
	if rep.Retries == 0 || rep.Repeats == 0 || rep.Fresh+rep.Retries+rep.Repeats != requests {
		t.Errorf("workload: fresh %d, retries %d, repeats %d", rep.Fresh, rep.Retries, rep.Repeats)
	}

	// Every request has exactly one answer.
	answered := rep.Accepted + rep.Replayed + rep.NoAnswer
	for _, n := range rep.RejectedByCode {
		answered += n
	}
	if answered != requests || rep.NoAnswer != 0 {
		t.Errorf("answers add up to %d of %d (%d without answer)", answered, requests, rep.NoAnswer)
	}
	// More distinct users than units: the sale sells out, one unit per 202.
	if rep.Accepted != units || rep.AcceptedRequests != units {
		t.Errorf("accepted %d (%d requestIds), want %d", rep.Accepted, rep.AcceptedRequests, units)
	}
	var rejectedInDB int64
	for _, n := range au.RejectedInDB {
		rejectedInDB += n
	}
	if rep.OrdersInDB+rejectedInDB != int64(rep.Accepted) {
		t.Errorf("orders %d + rejected %d != accepted %d", rep.OrdersInDB, rejectedInDB, rep.Accepted)
	}
	if rep.OrdersInDB != units-rep.FinalDBStock || rep.FinalDBStock != rep.FinalRedisStock || rep.FinalDBStock != 0 {
		t.Errorf("orders %d, final stock db %d redis %d, initial %d", rep.OrdersInDB, rep.FinalDBStock, rep.FinalRedisStock, units)
	}
	if rep.RejectedByCode["SOLD_OUT"] == 0 || rep.Replayed == 0 {
		t.Errorf("want sold-out answers and replays: %v, replayed %d", rep.RejectedByCode, rep.Replayed)
	}
	if rep.Latency.P50 <= 0 || rep.Latency.P99 < rep.Latency.P50 || rep.Latency.Max < rep.Latency.P99 || rep.ReqPerSec <= 0 {
		t.Errorf("latency %+v, %f req/s", rep.Latency, rep.ReqPerSec)
	}
	// The HTML report draws this run: the pipeline's own memory and CPU
	// series were scraped while it ran.
	var page strings.Builder
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"every invariant held", "Latency by percentile", "Answers per second, by outcome",
		"Resident memory per process", "CPU per process", "SOLD_OUT"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}
	if !strings.Contains(progress.String(), "bench: activity") {
		t.Errorf("no progress written: %q", progress.String())
	}

	// The harness agrees with the bench's audit.
	p.assertInvariants(t, stock.Item{ActivityID: rep.Scenario.ActivityID, ItemID: 1})
}

// mustBenchRun runs the load tool against p's pipeline (cfg's pipeline and
// store fields are p's), logs its report and fails the test unless the
// audit held; it returns the report and its text.
func mustBenchRun(t *testing.T, p *pipeline, cfg bench.Config) (*bench.Report, string) {
	t.Helper()
	cfg.URL, cfg.AdminToken, cfg.DatabaseURL = p.URL, p.Admin, p.DB.URL
	cfg.Redis, cfg.RedisPrefix = redisconn.Config{Addr: testenv.RedisAddr()}, p.Redis.Prefix
	rep, err := bench.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rep.WriteText(&out)
	t.Log(out.String())
	if !rep.OK {
		t.Fatalf("audit failed:\n%s", out.String())
	}
	return rep, out.String()
}
