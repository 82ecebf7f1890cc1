package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// The floods of unauthenticated requests that must cost nothing
// downstream, measured over real HTTP against real Redis, Postgres and the
// in-process broker (docs/benchmarks.md). Self-contained but for pkg/testenv,
// so this file and that package measure an older gateway too.

const floodClients = 16

// flood sends n requests from floodClients clients and returns how long it took.
func flood(n int, send func(i int)) time.Duration { return floodC(n, floodClients, send) }

// BenchmarkReadyzFlood: 1000 GET /readyz per iteration; reported are the
// broker checks (a new connection each) and Redis pings they cost.
//
//	go test -tags dev -run '^$' -bench ReadyzFlood -benchtime 3x ./gateway/
func BenchmarkReadyzFlood(b *testing.B) {
	r := testenv.MustRedis(b)
	st := stock.New(r.Client, r.Prefix)
	k := testenv.MustKafka(b)
	var pings, dials atomic.Int64
	s := New(Config{}, Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler),
		Ready: map[string]PingFunc{
			"redis": func(ctx context.Context) error { pings.Add(1); return st.Ping(ctx) },
			"kafka": func(ctx context.Context) error { dials.Add(1); return event.Ping(ctx, k.Brokers) },
		}})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	const probes = 1000
	for range b.N {
		flood(probes, func(int) {
			if res, err := srv.Client().Get(srv.URL + "/readyz"); err == nil {
				res.Body.Close()
			}
		})
	}
	b.ReportMetric(float64(dials.Load())*1000/float64(b.N*probes), "broker-dials/1000probes")
	b.ReportMetric(float64(pings.Load())*1000/float64(b.N*probes), "redis-pings/1000probes")
}

// BenchmarkUnknownItemFlood: 2000 POST /v1/orders per iteration for random
// activity and item ids, each from another user (so the per-user limit never
// bites), while a client reads an order (GET /v1/orders/{no}) in a loop;
// reported are the Postgres queries per POST and per second, and the share
// of those GETs answered (not 503).
//
//	go test -tags dev -run '^$' -bench UnknownItemFlood -benchtime 3x ./gateway/
func BenchmarkUnknownItemFlood(b *testing.B) {
	pool, q := testenv.MustCountedPool(b, testenv.MustDatabase(b).URL, 8)
	r := testenv.MustRedis(b)
	s := New(Config{}, Deps{Stock: stock.New(r.Client, r.Prefix), Orders: order.NewStore(pool), Metrics: telemetry.NewMetrics(),
		Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	const posts = 2000
	var took time.Duration
	var gets, answered atomic.Int64
	base := time.Now().UnixNano() % 1e9
	for it := range b.N {
		stop := make(chan struct{})
		getter := make(chan struct{})
		go func() {
			defer close(getter)
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := srv.Client().Get(srv.URL + "/v1/orders/1-1-abc")
				if err != nil {
					continue
				}
				res.Body.Close()
				gets.Add(1)
				if res.StatusCode != http.StatusServiceUnavailable {
					answered.Add(1)
				}
			}
		}()
		took += flood(posts, func(i int) {
			n := base + int64(it*posts+i)
			res, err := srv.Client().Post(srv.URL+"/v1/orders", "application/json", strings.NewReader(fmt.Sprintf(
				`{"requestId":"f-%d","userId":%d,"activityId":%d,"itemId":%d,"quantity":1}`, n, n, 1000+n, 7*n)))
			if err == nil {
				res.Body.Close()
			}
		})
		close(stop)
		<-getter
	}
	// Each GET answered (404: not in Postgres, not pending) made one query.
	postQueries := float64(q.Load() - answered.Load())
	b.ReportMetric(postQueries/float64(b.N*posts), "pg-queries/post")
	b.ReportMetric(postQueries/took.Seconds(), "pg-queries/s")
	b.ReportMetric(float64(b.N*posts)/took.Seconds(), "posts/s")
	b.ReportMetric(float64(answered.Load())/float64(max(gets.Load(), 1)), "gets-answered")
}

// BenchmarkSoldOutFlood: a closed loop of 100 clients, each request a fresh
// buyer, against a sold-out item, alternating in one run between a trivial
// net/http handler (writes a 409 body; the floor of an HTTP refusal on this
// machine) and the gateway (its refusal from the item's verdict), and the
// same for a sale not open yet. Reported per arm: refusals/s, this
// process's CPU per refusal (server and clients: compare arms, not
// absolutes) and Redis's CPU per refusal (INFO cpu, the whole server: run
// it alone).
//
//	go test -tags dev -run '^$' -bench SoldOutFlood -benchtime 20000x -count 3 ./gateway/
func BenchmarkSoldOutFlood(b *testing.B) {
	r := testenv.MustRedis(b)
	st := stock.New(r.Client, r.Prefix)
	ctx := context.Background()
	soldOut := stock.Item{ActivityID: 4601, ItemID: 1}
	notYet := stock.Item{ActivityID: 4601, ItemID: 2}
	now := time.Now()
	for _, s := range []stock.Sale{
		{Item: soldOut, Stock: 0, StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour), Cap: 1},
		{Item: notYet, Stock: 100, StartsAt: now.Add(time.Hour), EndsAt: now.Add(2 * time.Hour), Cap: 1},
	} {
		if _, err := st.Preheat(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	gw := New(Config{}, Deps{Stock: st, Producer: okProducer{}, Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	trivial := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeError(w, http.StatusConflict, "SOLD_OUT", "not enough stock")
	})
	arms := []struct {
		name string
		h    http.Handler
		it   stock.Item
	}{{"trivial", trivial, soldOut}, {"soldout", gw.Handler(), soldOut}, {"trivial", trivial, notYet}, {"notyet", gw.Handler(), notYet}}
	var seq atomic.Int64
	for _, a := range arms {
		srv := httptest.NewServer(a.h)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
		body := func() string {
			n := seq.Add(1)
			return fmt.Sprintf(`{"requestId":"sf-%d-%d","userId":%d,"activityId":%d,"itemId":%d,"quantity":1}`,
				now.UnixNano()%1e9, n, n, a.it.ActivityID, a.it.ItemID)
		}
		send := func() {
			res, err := client.Post(srv.URL+"/v1/orders", "application/json", strings.NewReader(body()))
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}
		for range 200 { // warm: connections, the verdict
			send()
		}
		redisBefore := redisCPU(b, r)
		cpuBefore := processCPU()
		took := floodC(b.N, 100, func(int) { send() })
		cpu := processCPU() - cpuBefore
		redis := redisCPU(b, r) - redisBefore
		name := a.name + "-" + map[stock.Item]string{soldOut: "soldout", notYet: "notyet"}[a.it]
		b.ReportMetric(float64(b.N)/took.Seconds(), name+"-refusals/s")
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), name+"-proc-µs/refusal")
		b.ReportMetric(float64(redis.Nanoseconds())/1e3/float64(b.N), name+"-redis-µs/refusal")
		srv.Close()
		client.CloseIdleConnections()
	}
}

// floodC is flood with c clients.
func floodC(n, c int, send func(i int)) time.Duration {
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				send(i)
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// processCPU is this process's CPU time so far (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the Redis server's CPU time so far (INFO cpu: used_cpu_sys + used_cpu_user).
func redisCPU(tb testing.TB, r testenv.Redis) time.Duration {
	info, err := r.Client.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
