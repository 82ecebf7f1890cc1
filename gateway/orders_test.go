package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/gateway/client"
	"orderpipe/pkg/event"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// failingProducer reports every produce as failed. With claim set, the
// event "arrived" first: a worker claimed its reservation in Redis, as
// happens when a produce times out on the client but lands on the broker.
type failingProducer struct {
	st    *stock.Store
	claim bool
}

func (p failingProducer) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	for _, m := range msgs {
		ev, err := event.Decode(m.Value)
		if err != nil {
			return err
		}
		if p.claim {
			it := stock.Item{ActivityID: ev.ActivityID, ItemID: ev.ItemID}
			if _, err := p.st.Claim(ctx, it, []stock.Ref{{RequestID: ev.RequestID, OrderNo: ev.OrderNo}}); err != nil {
				return err
			}
		}
	}
	return errors.New("produce: i/o timeout")
}

func TestFailedProduce(t *testing.T) {
	t.Parallel()
	for _, landed := range []bool{false, true} {
		name := map[bool]string{false: "LostIsGivenBack", true: "LandedIsAccepted"}[landed]
		t.Run(name, func(t *testing.T) {
			r := testenv.MustRedis(t)
			st := stock.New(r.Client, r.Prefix)
			it := stock.Item{ActivityID: 1, ItemID: 1}
			ctx := context.Background()
			preheatTen(t, st, it)
			s := New(Config{}, Deps{Stock: st, Producer: failingProducer{st: st, claim: landed}, Metrics: telemetry.NewMetrics(),
				Log: slog.New(slog.DiscardHandler)})
			w := placeR1(s)

			k := stocktest.KeysOf(stocktest.On(r.Client, r.Prefix), it)
			left, _ := r.Client.Get(ctx, k.Stock).Int64()
			journal, _ := r.Client.HLen(ctx, k.Journal).Result()
			marker, _ := r.Client.Exists(ctx, k.Limit(7)).Result()
			if !landed {
				if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
					t.Fatalf("answer %d %s, want 503 with Retry-After", w.Code, w.Body)
				}
				if left != 10 || journal != 0 || marker != 0 {
					t.Fatalf("after the 503: stock %d, journal %d, marker %d; want 10, 0, 0 (nothing reserved)", left, journal, marker)
				}
				return
			}
			var got client.Placed
			if w.Code != http.StatusAccepted || json.Unmarshal(w.Body.Bytes(), &got) != nil {
				t.Fatalf("answer %d %s, want 202: the event arrived", w.Code, w.Body)
			}
			if got.OrderNo == "" || got.Remaining != 9 {
				t.Fatalf("202 %+v, want its orderNo and remaining 9", got)
			}
			if left != 9 || journal != 1 || marker != 1 {
				t.Fatalf("stock %d, journal %d, marker %d; want 9, 1, 1 (the reservation stands)", left, journal, marker)
			}
		})
	}
}

// cuttingProducer fails every produce after cutting the proxy to Redis, so
// the release that follows cannot reach Redis either.
type cuttingProducer struct{ proxy *testenv.Proxy }

func (p cuttingProducer) WriteMessages(context.Context, ...kafka.Message) error {
	p.proxy.Down()
	return errors.New("produce: i/o timeout")
}

// TestUnknownOutcomeIsReleasedOnceRedisAnswers: a failed produce whose
// release cannot reach Redis is answered 503 "outcome unknown", and the
// reservation is given back in the background as soon as Redis answers
// again — not left for the redrive to make an order of that its client,
// told 503, never learns of.
func TestUnknownOutcomeIsReleasedOnceRedisAnswers(t *testing.T) {
	t.Parallel()
	r, proxy, st := redisBehindProxy(t)
	it := stock.Item{ActivityID: 1, ItemID: 1}
	ctx := context.Background()
	preheatTen(t, st, it)
	s := New(Config{ReserveTimeout: 300 * time.Millisecond}, Deps{Stock: st, Producer: cuttingProducer{proxy}, Metrics: telemetry.NewMetrics(),
		Log: slog.New(slog.DiscardHandler)})
	w := placeR1(s)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "outcome is unknown") {
		t.Fatalf("answer %d %s, want 503 outcome unknown", w.Code, w.Body)
	}
	k := stocktest.KeysOf(stocktest.On(r.Client, r.Prefix), it)
	state := func() (left, journal, marker int64) {
		left, _ = r.Client.Get(ctx, k.Stock).Int64()
		journal, _ = r.Client.HLen(ctx, k.Journal).Result()
		marker, _ = r.Client.Exists(ctx, k.Limit(7)).Result()
		return
	}
	if left, journal, marker := state(); left != 9 || journal != 1 || marker != 1 {
		t.Fatalf("with Redis cut: stock %d, journal %d, marker %d; want the reservation standing (9, 1, 1)", left, journal, marker)
	}
	time.Sleep(time.Second) // a few failed retries
	proxy.Up(t)
	testenv.WaitFor(t, 15*time.Second, "the reservation given back", func() bool {
		left, journal, marker := state()
		return left == 10 && journal == 0 && marker == 0
	})
	// And a retry of the request starts afresh: a new reservation.
	s.deps.Producer = okProducer{}
	w = placeR1(s)
	if w.Code != http.StatusAccepted {
		t.Errorf("retry after the release: %d %s, want 202", w.Code, w.Body)
	}
}

// redisBehindProxy is a store on the tests' Redis reached through a proxy
// the test can cut, its calls bounded by 300 ms.
func redisBehindProxy(t *testing.T) (testenv.Redis, *testenv.Proxy, *stock.Store) {
	t.Helper()
	r := testenv.MustRedis(t)
	proxy := testenv.MustProxy(t, testenv.RedisAddr())
	return r, proxy, stock.New(testenv.RedisClient(t, proxy.Addr, 300*time.Millisecond), r.Prefix)
}

type okProducer struct{}

func (okProducer) WriteMessages(context.Context, ...kafka.Message) error { return nil }

// preheatTen puts it on sale in st: 10 units, one per user, for the hour.
func preheatTen(t *testing.T, st *stock.Store, it stock.Item) {
	t.Helper()
	if _, err := st.Preheat(context.Background(), stock.Sale{Item: it, Stock: 10, StartsAt: time.Now().Add(-time.Hour),
		EndsAt: time.Now().Add(time.Hour), Cap: 1}); err != nil {
		t.Fatal(err)
	}
}

// placeR1 sends request r1 (user 7, item 1:1, one unit) to s.
func placeR1(s *Server) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/orders",
		strings.NewReader(`{"requestId":"r1","userId":7,"activityId":1,"itemId":1,"quantity":1}`))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	return w
}
