package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/event"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// stallProduce holds every produce request the broker gets until resume is
// closed; then the held ones land, or with lands false fail (the broker
// closes their connection), and the later ones are served as usual.
func stallProduce(t *testing.T, k testenv.Kafka, lands bool) (stalled, resume chan struct{}) {
	t.Helper()
	if k.Cluster == nil {
		t.Skip("needs the in-process broker to stall its produce requests")
	}
	return k.StallProduce(lands)
}

// stallProduceFor is stallProduce for a benchmark: the held produces land.
func stallProduceFor(b *testing.B, k testenv.Kafka) (stalled, resume chan struct{}) {
	b.Helper()
	return k.StallProduce(true)
}

// storm is where a retry storm blows: one item of 10 units on sale (one
// per user), the reserve scripts of requestID counted, a topic of its own.
type storm struct {
	r       testenv.Redis
	st      *stock.Store
	counter *stocktest.ReserveCalls
	it      stock.Item
	k       testenv.Kafka
	topic   string
}

func mustStorm(tb testing.TB, requestID string, user int64) storm {
	tb.Helper()
	ctx := context.Background()
	r := testenv.MustRedis(tb)
	e := storm{r: r, st: stock.New(r.Client, r.Prefix), it: stock.Item{ActivityID: 1, ItemID: 1}}
	e.counter = stocktest.CountReserves(tb, stocktest.On(r.Client, r.Prefix), requestID, stock.Fingerprint(user, 1, 1, 1))
	if _, err := e.st.Preheat(ctx, stock.Sale{Item: e.it, Stock: 10, StartsAt: time.Now().Add(-time.Hour),
		EndsAt: time.Now().Add(time.Hour), Cap: 1}); err != nil {
		tb.Fatal(err)
	}
	e.k, e.topic = testenv.MustKafka(tb), testenv.UniqueName("orders")
	if err := event.EnsureTopics(ctx, e.k.Brokers, 1, 0, e.topic); err != nil {
		tb.Fatal(err)
	}
	return e
}

type orderAnswer struct {
	status int
	code   string
	body   client.Placed
	err    error
}

// TestRetryStormSharesOneWait: while a request's first attempt is held in
// a stalled produce, its retries on this gateway cost Redis one reserve
// call each plus one leader's polls, not a poll each every few
// milliseconds; a leader whose client hangs up hands the wait over; and
// every retry still gets the answer the atomic reserve gives: the first
// attempt's orderNo once its event is in Kafka, or, when that produce
// failed and was given back, the orderNo of the one retry that reserved
// afresh (no second unit taken).
func TestRetryStormSharesOneWait(t *testing.T) {
	t.Parallel()
	for _, lands := range []bool{true, false} {
		t.Run(map[bool]string{true: "FirstAttemptLands", false: "FirstAttemptGivenBack"}[lands], func(t *testing.T) {
			ctx := context.Background()
			const requestID, user = "stormed", 7
			e := mustStorm(t, requestID, user)
			// One attempt per produce, so a held one that fails fails.
			writer := event.NewWriter(event.WriterConfig{Brokers: e.k.Brokers, Topic: e.topic, WriteTimeout: 20 * time.Second, MaxAttempts: 1})
			defer writer.Close()
			// Long enough that no retry gives up while the test holds the produce.
			s := New(Config{ReplayWait: 20 * time.Second, ProduceTimeout: 20 * time.Second, Topic: e.topic},
				Deps{Stock: e.st, Producer: writer, Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()
			post := func(ctx context.Context) orderAnswer {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/orders", strings.NewReader(fmt.Sprintf(
					`{"requestId":%q,"userId":%d,"activityId":1,"itemId":1,"quantity":1}`, requestID, user)))
				req.Header.Set("Content-Type", "application/json")
				res, err := srv.Client().Do(req)
				if err != nil {
					return orderAnswer{err: err}
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				a := orderAnswer{status: res.StatusCode, code: errorCode(string(b))}
				json.Unmarshal(b, &a.body) //nolint:errcheck // an error body has no orderNo
				return a
			}

			stalled, resume := stallProduce(t, e.k, lands)
			var once sync.Once
			release := func() { once.Do(func() { close(resume) }) }
			defer release() // a failed test lets the held produce go
			first := make(chan orderAnswer, 1)
			go func() { first <- post(ctx) }()
			<-stalled // reserved, its produce held

			// A lone retry leads the wait.
			leaderCtx, hangUp := context.WithCancel(ctx)
			defer hangUp()
			leaderAnswer := make(chan orderAnswer, 1)
			go func() { leaderAnswer <- post(leaderCtx) }()
			var firstNo, leaderNo string
			testenv.WaitFor(t, 10*time.Second, "the lone retry to poll", func() bool {
				order, calls := e.counter.Snapshot()
				if len(order) < 2 {
					return false
				}
				firstNo, leaderNo = order[0], order[1]
				return calls[leaderNo] >= 2
			})
			// The storm: n more retries of the same request.
			const n = 12
			answers := make(chan orderAnswer, n)
			for range n {
				go func() { answers <- post(ctx) }()
			}
			testenv.WaitFor(t, 10*time.Second, "every retry's reserve", func() bool {
				order, _ := e.counter.Snapshot()
				return len(order) == n+2
			})
			// pollers are the storm's retries that called more than once.
			pollers := func() []string {
				order, calls := e.counter.Snapshot()
				var p []string
				for _, no := range order[2:] {
					if calls[no] > 1 {
						p = append(p, fmt.Sprintf("%s×%d", no, calls[no]))
					}
				}
				return p
			}
			_, calls := e.counter.Snapshot()
			since := calls[leaderNo]
			testenv.WaitFor(t, 10*time.Second, "the leader to poll twice more", func() bool {
				_, calls := e.counter.Snapshot()
				return calls[leaderNo] >= since+2
			})
			if p := pollers(); len(p) != 0 {
				t.Fatalf("while the leader polls, %d of %d other retries polled too (%v), want none", len(p), n, p)
			}

			// The leader's client hangs up: it stops waiting, and one of the
			// storm takes over the polling alone.
			hangUp()
			if a := <-leaderAnswer; a.err == nil {
				t.Fatalf("the retry whose client hung up was answered %d %s", a.status, a.code)
			}
			testenv.WaitFor(t, 10*time.Second, "another retry to lead", func() bool { return len(pollers()) > 0 })
			testenv.WaitFor(t, 10*time.Second, "the new leader to poll twice more", func() bool {
				_, calls := e.counter.Snapshot()
				for _, no := range pollers() {
					if no, _, _ := strings.Cut(no, "×"); calls[no] >= 3 {
						return true
					}
				}
				return false
			})
			if p := pollers(); len(p) != 1 {
				t.Fatalf("after the hand-over, %d retries polled (%v), want one", len(p), p)
			}

			release()
			a := <-first
			got := map[string]int{}
			var orderNo string
			for range n {
				b := <-answers
				switch {
				case b.err != nil:
					t.Fatalf("a retry: %v", b.err)
				case b.status == http.StatusOK && b.body.Replayed:
					got["200 replayed "+b.body.OrderNo]++
				case b.status == http.StatusAccepted:
					orderNo = b.body.OrderNo
					got["202 "+b.body.OrderNo]++
				default:
					got[fmt.Sprintf("%d %s", b.status, b.code)]++
				}
			}
			if lands {
				if a.status != http.StatusAccepted || a.body.OrderNo != firstNo {
					t.Fatalf("first attempt: %d %s %+v, want 202 %s", a.status, a.code, a.body, firstNo)
				}
				if want := map[string]int{"200 replayed " + firstNo: n}; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("retries answered %v, want %v", got, want)
				}
			} else {
				if a.status != http.StatusServiceUnavailable || a.body.OrderNo != "" {
					t.Fatalf("first attempt, produce failed: %d %s %+v, want 503 without an orderNo", a.status, a.code, a.body)
				}
				if want := map[string]int{"202 " + orderNo: 1, "200 replayed " + orderNo: n - 1}; orderNo == "" ||
					fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("retries answered %v, want one 202 and %d replays of its orderNo", got, n-1)
				}
			}
			if left, ok := stocktest.Stock(t, stocktest.On(e.r.Client, e.r.Prefix), e.it); !ok || left != 9 {
				t.Fatalf("redis stock %d (key present %t), want 9: one unit reserved", left, ok)
			}
		})
	}
}

// BenchmarkRetryStorm measures what a retry storm costs Redis: one request's
// first attempt is held in a stalled produce for hold while retries of it
// arrive on this gateway, then lands; reported are the reserve script calls
// per retry (the first attempt's not counted) and the retries answered 200
// replayed. Each iteration is one storm.
//
//	go test -tags dev -run '^$' -bench RetryStorm -benchtime 3x ./gateway/
func BenchmarkRetryStorm(b *testing.B) {
	const retries, hold = 50, time.Second
	var calls, replayed float64
	for i := range b.N {
		requestID, user := fmt.Sprintf("storm-%d", i), int64(7+i)
		e := mustStorm(b, requestID, user)
		if e.k.Cluster == nil {
			b.Skip("needs the in-process broker to stall its produce requests")
		}
		writer := event.NewWriter(event.WriterConfig{Brokers: e.k.Brokers, Topic: e.topic, WriteTimeout: 20 * time.Second})
		s := New(Config{ReplayWait: 20 * time.Second, ProduceTimeout: 20 * time.Second, Topic: e.topic},
			Deps{Stock: e.st, Producer: writer, Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
		srv := httptest.NewServer(s.Handler())
		body := fmt.Sprintf(`{"requestId":%q,"userId":%d,"activityId":1,"itemId":1,"quantity":1}`, requestID, user)
		post := func() int {
			res, err := srv.Client().Post(srv.URL+"/v1/orders", "application/json", strings.NewReader(body))
			if err != nil {
				return 0
			}
			defer res.Body.Close()
			var a client.Placed
			json.NewDecoder(res.Body).Decode(&a) //nolint:errcheck // an error body has no orderNo
			if res.StatusCode == http.StatusOK && a.Replayed {
				return 1
			}
			return 0
		}
		stalled, resume := stallProduceFor(b, e.k)
		first := make(chan int, 1)
		go func() { first <- post() }()
		<-stalled
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range retries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := post()
				mu.Lock()
				replayed += float64(n)
				mu.Unlock()
			}()
		}
		time.Sleep(hold)
		close(resume)
		<-first
		wg.Wait()
		order, got := e.counter.Snapshot()
		for _, no := range order[1:] {
			calls += float64(got[no])
		}
		srv.Close()
		writer.Close()
	}
	b.ReportMetric(calls/float64(b.N*retries), "reserves/retry")
	b.ReportMetric(replayed/float64(b.N*retries), "replayed/retry")
}
