package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"orderpipe/pkg/testenv"
)

// TestReconcilerIsATarget: the reconciler is a row of the targets table like
// any component: it runs beside another in one process, on the process's
// connections, its passes counted on the process's /metrics (METRICS_ADDR),
// and it drains when the process stops.
func TestReconcilerIsATarget(t *testing.T) {
	t.Parallel()
	db := testenv.MustDatabase(t)
	rdb := testenv.MustRedis(t)
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database.URL, cfg.Redis.Addr, cfg.Stock.Prefix = db.URL, testenv.RedisAddr(), rdb.Prefix
	cfg.Telemetry.MetricsAddr, cfg.Reconciler.Interval = freeAddr(t), 50*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runComponents(ctx, testLog(), cfg, components{"closer", "reconciler"}, nil) }()
	passed := regexp.MustCompile(`(?m)^orderpipe_reconciler_passes_total\{result="clean"\} [1-9]`)
	testenv.WaitFor(t, time.Minute, "a clean reconciler pass on /metrics", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the process stopped: %v", err)
		default:
		}
		res, err := http.Get("http://" + cfg.Telemetry.MetricsAddr + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return passed.Match(b)
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("stopping: %v", err)
	}
}
