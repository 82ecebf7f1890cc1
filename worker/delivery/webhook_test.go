package delivery_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
	"orderpipe/pkg/webhook"
	"orderpipe/worker/delivery"
)

// testSecret is a Standard Webhooks secret of 32 bytes.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func mustSecret(tb testing.TB) webhook.Secret {
	tb.Helper()
	key, err := webhook.ParseSecret(testSecret)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

// env is a store with a sale (activity 1, item 10).
type env struct {
	db     testenv.Database
	orders *order.Store
	sale   *ordertest.StatusSale
}

func mustEnv(tb testing.TB) *env {
	tb.Helper()
	db := testenv.MustDatabase(tb)
	e := &env{db: db, orders: order.NewStore(db.Pool)}
	e.sale = ordertest.MustStatusSale(tb, e.orders, 100000)
	return e
}

// changes makes and changes n orders of the sale (StatusSale.Change); it
// may run on a goroutine of its own, so a failure is only reported.
func (e *env) changes(tb testing.TB, n int) {
	tb.Helper()
	if err := e.sale.Change(context.Background(), n); err != nil {
		tb.Error(err)
	}
}

// want is every event of the orders made so far: webhook-id → the value
// the relay publishes on orders.status for it.
func (e *env) want(tb testing.TB) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	for _, no := range e.sale.OrderNos() {
		evs, err := e.orders.EventsOf(context.Background(), no)
		if err != nil {
			tb.Fatal(err)
		}
		for _, ev := range evs {
			st, err := event.ParseStored(ev.Payload)
			if err != nil {
				tb.Fatal(err)
			}
			out[webhook.MessageID(ev.OrderNo, ev.Version)] = event.StatusMessage(st).Value
		}
	}
	return out
}

// receipt is one webhook a receiver accepted (answered 2xx).
type receipt struct {
	ID, Timestamp, Signature string
	Body                     []byte
}

// receiver is a webhook endpoint on a real port. It checks every request
// against the Standard Webhooks specification (its own reading of it, not
// the package's code) and answers what answer says.
type receiver struct {
	tb     testing.TB
	srv    *httptest.Server
	key    []byte
	answer atomic.Value // func(*http.Request) int
	tries  atomic.Int64

	mu  sync.Mutex
	got []receipt
}

func mustReceiver(tb testing.TB) *receiver {
	tb.Helper()
	r := &receiver{tb: tb, key: mustSecret(tb)}
	r.set(func(*http.Request) int { return http.StatusNoContent })
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) set(answer func(*http.Request) int) { r.answer.Store(answer) }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.tries.Add(1)
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	id, ts, sig := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature")
	if err := r.verify(req, id, ts, sig, body); err != nil {
		r.tb.Errorf("webhook %s: %v", id, err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	code := r.answer.Load().(func(*http.Request) int)(req)
	if code >= 200 && code < 300 {
		r.mu.Lock()
		r.got = append(r.got, receipt{ID: id, Timestamp: ts, Signature: sig, Body: body})
		r.mu.Unlock()
	}
	w.WriteHeader(code)
	fmt.Fprintf(w, "answer %d", code)
}

// verify is the specification's check: the signature over id.timestamp.body
// with the secret's decoded bytes, the timestamp within five minutes.
func (r *receiver) verify(req *http.Request, id, ts, sig string, body []byte) error {
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		return fmt.Errorf("%s with Content-Type %q", req.Method, req.Header.Get("Content-Type"))
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return fmt.Errorf("webhook-timestamp %q", ts)
	}
	mac := hmac.New(sha256.New, r.key)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return fmt.Errorf("webhook-signature %q, want %q", sig, want)
	}
	return nil
}

func (r *receiver) receipts() []receipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receipt(nil), r.got...)
}

// endpoint is the receiver as an endpoint at url (its own by default).
func (r *receiver) endpoint(tb testing.TB, rawURL string) webhook.Endpoint {
	tb.Helper()
	if rawURL == "" {
		rawURL = r.srv.URL + "/hooks"
	}
	eps, err := webhook.ParseEndpoints([]string{rawURL})
	if err != nil {
		tb.Fatal(err)
	}
	return eps[0]
}

// complete reports whether the receiver accepted every event of want.
func (r *receiver) complete(want map[string][]byte) bool {
	seen := map[string]bool{}
	for _, g := range r.receipts() {
		seen[g.ID] = true
	}
	for id := range want {
		if !seen[id] {
			return false
		}
	}
	return true
}

// mustBeInOrder fails tb unless the receiver accepted every event of
// want, each with the body the contract says (the relay's value under
// order.<status>), and each order's events in version order: an event is
// accepted only after every earlier version of its order was (duplicates
// of the latest one aside).
func (r *receiver) mustBeInOrder(tb testing.TB, want map[string][]byte) {
	tb.Helper()
	last := map[string]int{}
	seen := map[string]bool{}
	for _, g := range r.receipts() {
		no, v, err := webhook.ParseMessageID(g.ID)
		if err != nil {
			tb.Errorf("receipt id: %v", err)
			continue
		}
		data, ok := want[g.ID]
		if !ok {
			tb.Errorf("webhook %s: no such event", g.ID)
			continue
		}
		var m struct {
			Type      string          `json:"type"`
			Timestamp time.Time       `json:"timestamp"`
			Data      json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(g.Body, &m); err != nil {
			tb.Errorf("webhook %s: body %s: %v", g.ID, g.Body, err)
			continue
		}
		var st event.OrderStatus
		json.Unmarshal(data, &st) //nolint:errcheck // from ParseStored
		if !bytes.Equal(m.Data, data) || m.Type != "order."+strings.ToLower(st.Status) || !m.Timestamp.Equal(st.At) {
			tb.Errorf("webhook %s: body %s, want type order.%s, timestamp %s and data %s", g.ID, g.Body,
				strings.ToLower(st.Status), st.At.Format(time.RFC3339Nano), data)
		}
		if v < last[no] || (v > last[no] && v != last[no]+1 && !seen[webhook.MessageID(no, v-1)]) {
			tb.Errorf("order %s: version %d accepted after version %d", no, v, last[no])
		}
		last[no] = max(last[no], v)
		seen[g.ID] = true
	}
	for id := range want {
		if !seen[id] {
			tb.Errorf("webhook %s never accepted", id)
		}
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

// fast is a configuration with test-sized waits.
func fast(eps ...webhook.Endpoint) delivery.Config {
	return delivery.Config{Endpoints: eps, Timeout: 2 * time.Second, RetryFor: time.Hour, BackoffBase: 10 * time.Millisecond,
		BackoffMax: 200 * time.Millisecond, Concurrency: 4, Interval: 20 * time.Millisecond, GaugeInterval: 50 * time.Millisecond}
}

func mustKey(tb testing.TB, c delivery.Config) delivery.Config {
	c.Secret = mustSecret(tb)
	return c
}

// start runs a deliverer until the returned stop (or cleanup).
func start(tb testing.TB, d *delivery.Deliverer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }() //nolint:errcheck
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(stop)
	return stop
}

// TestDeliversEverySignedEventInOrder: two endpoints get every change,
// committed before and while the deliverer runs, signed, with the body the
// contract says, in version order per order.
func TestDeliversEverySignedEventInOrder(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	a, b := mustReceiver(t), mustReceiver(t)
	e.changes(t, 10) // before: the outbox has a backlog
	m := telemetry.NewMetrics()
	start(t, delivery.New(mustKey(t, fast(a.endpoint(t, ""), b.endpoint(t, ""))), delivery.Deps{Orders: e.orders, Metrics: m, Log: quietLog()}))
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { e.changes(t, 15) })
	}
	wg.Wait()
	want := e.want(t)
	for _, r := range []*receiver{a, b} {
		testenv.WaitFor(t, 60*time.Second, "every event at "+r.srv.URL, func() bool { return r.complete(want) })
		r.mustBeInOrder(t, want)
	}
	name := a.endpoint(t, "").Name
	// The counter follows the commit that records the deliveries, which
	// follows the receiver's answer.
	testenv.WaitFor(t, 10*time.Second, "every delivery counted", func() bool {
		return testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues(name, "delivered")) >= float64(len(want))
	})
	testenv.WaitFor(t, 10*time.Second, "the backlog gauges at 0", func() bool {
		return testutil.ToFloat64(m.WebhookPending.WithLabelValues(name)) == 0 && testutil.ToFloat64(m.WebhookOldest.WithLabelValues(name)) == 0
	})
}

// TestReplicasDeliverEachEventOnce: three deliverers on one database send
// each event once to each endpoint (no attempt fails, so no retry's
// duplicate is allowed).
func TestReplicasDeliverEachEventOnce(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	a, b := mustReceiver(t), mustReceiver(t)
	eps := []webhook.Endpoint{a.endpoint(t, ""), b.endpoint(t, "")}
	for range 3 {
		start(t, delivery.New(mustKey(t, fast(eps...)), delivery.Deps{Orders: e.orders, Log: quietLog()}))
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { e.changes(t, 20) })
	}
	wg.Wait()
	want := e.want(t)
	for _, r := range []*receiver{a, b} {
		testenv.WaitFor(t, 60*time.Second, "every event at "+r.srv.URL, func() bool { return r.complete(want) })
		r.mustBeInOrder(t, want)
		counts := map[string]int{}
		for _, g := range r.receipts() {
			counts[g.ID]++
		}
		for id, n := range counts {
			if n != 1 {
				t.Errorf("%s received %s %d times, want once", r.srv.URL, id, n)
			}
		}
		if n := r.tries.Load(); n != int64(len(want)) {
			t.Errorf("%s: %d requests for %d events", r.srv.URL, n, len(want))
		}
	}
}

// TestDeadEndpointHoldsBackNoOther: one endpoint hangs past the timeout,
// then answers 500, for a long while (many backoffs); the other gets every
// event meanwhile. Once it answers again it gets every event, in version
// order.
func TestDeadEndpointHoldsBackNoOther(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	dead, healthy := mustReceiver(t), mustReceiver(t)
	release := make(chan struct{})
	var hung atomic.Bool
	hung.Store(true)
	dead.set(func(r *http.Request) int {
		if hung.Load() {
			select { // no answer: the deliverer's timeout ends it
			case <-r.Context().Done():
			case <-release:
			}
			return http.StatusServiceUnavailable
		}
		return http.StatusInternalServerError
	})
	t.Cleanup(func() { close(release) })
	m := telemetry.NewMetrics()
	cfg := mustKey(t, fast(dead.endpoint(t, ""), healthy.endpoint(t, "")))
	cfg.Timeout = 300 * time.Millisecond
	start(t, delivery.New(cfg, delivery.Deps{Orders: e.orders, Metrics: m, Log: quietLog()}))
	e.changes(t, 30)
	want := e.want(t)
	testenv.WaitFor(t, 60*time.Second, "every event at the healthy endpoint", func() bool { return healthy.complete(want) })
	healthy.mustBeInOrder(t, want)
	deadName := dead.endpoint(t, "").Name
	testenv.WaitFor(t, 30*time.Second, "timeouts, then 500s, retried", func() bool {
		if hung.Load() && testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues(deadName, "retried")) >= 8 {
			hung.Store(false)
		}
		return !hung.Load() && testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues(deadName, "retried")) >= 40
	})
	if n := len(dead.receipts()); n != 0 {
		t.Fatalf("the dead endpoint accepted %d", n)
	}
	states, err := e.orders.WebhookDeliveriesOf(context.Background(), "1-10-o2")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Endpoint == deadName && s.Version == 2 && s.Attempts != 0 {
			t.Errorf("version 2 of 1-10-o2 attempted %d times while version 1 was not delivered", s.Attempts)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "the oldest-undelivered gauge of the dead endpoint", func() bool {
		return testutil.ToFloat64(m.WebhookOldest.WithLabelValues(deadName)) > 0 && testutil.ToFloat64(m.WebhookPending.WithLabelValues(deadName)) > 0
	})
	dead.set(func(*http.Request) int { return http.StatusOK })
	testenv.WaitFor(t, 60*time.Second, "every event at the revived endpoint", func() bool { return dead.complete(want) })
	dead.mustBeInOrder(t, want)
}

// TestGiveUpListAndReplay: an endpoint that never answers 2xx within the
// retry window leaves failed deliveries; the later versions of an order
// are attempted once the earlier one gave up; `orderpipe webhooks list`
// shows them, `replay <id>` and `replay --all` send them again once the
// endpoint is back, with the same webhook-id.
func TestGiveUpListAndReplay(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	r := mustReceiver(t)
	r.set(func(*http.Request) int { return http.StatusInternalServerError })
	m := telemetry.NewMetrics()
	cfg := mustKey(t, fast(r.endpoint(t, "")))
	cfg.RetryFor = 300 * time.Millisecond
	start(t, delivery.New(cfg, delivery.Deps{Orders: e.orders, Metrics: m, Log: quietLog()}))
	e.changes(t, 6)
	want := e.want(t)
	ctx := context.Background()
	testenv.WaitFor(t, 60*time.Second, "every delivery failed", func() bool {
		fs, err := e.orders.FailedWebhooks(ctx, 0)
		return err == nil && len(fs) == len(want)
	})
	name := r.endpoint(t, "").Name
	// The counter follows the commit that records the failures.
	failed := func() float64 { return testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues(name, "failed")) }
	testenv.WaitFor(t, 10*time.Second, "every failure counted", func() bool { return failed() >= float64(len(want)) })
	if got := failed(); got != float64(len(want)) {
		t.Errorf("failed outcomes: %v, want %d", got, len(want))
	}
	envOf := func(name string) string {
		if name == "DATABASE_URL" {
			return e.db.URL
		}
		for _, v := range delivery.Settings {
			if v.Name == name {
				return v.Default
			}
		}
		t.Fatalf("undeclared %s", name)
		return ""
	}
	cmd := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := delivery.Main(ctx, args, setting.Env(envOf), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, out := cmd("list", "--json")
	var listed struct {
		Failed []struct {
			ID, Endpoint, Type   string
			Attempts, LastStatus int
		}
	}
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed.Failed) != len(want) {
		t.Fatalf("webhooks list --json: exit %d, %v:\n%s", code, err, out)
	}
	for _, f := range listed.Failed {
		if _, ok := want[f.ID]; !ok || f.Endpoint != name || f.LastStatus != 500 || f.Attempts < 1 || !strings.HasPrefix(f.Type, "order.") {
			t.Errorf("listed %+v", f)
		}
	}
	if code, out := cmd("list"); code != 0 || !strings.Contains(out, fmt.Sprintf("%d failed webhook deliveries", len(want))) ||
		!strings.Contains(out, "1-10-o1.1") || !strings.Contains(out, "HTTP 500: answer 500") {
		t.Errorf("webhooks list: exit %d:\n%s", code, out)
	}
	if code, out := cmd("replay", "1-10-nothing.1"); code != 1 || !strings.Contains(out, "no failed delivery") {
		t.Errorf("replay of an unknown id: exit %d, want 1:\n%s", code, out)
	}
	if code, out := cmd("replay"); code != 2 {
		t.Errorf("replay without ids: exit %d, want 2:\n%s", code, out)
	}

	r.set(func(*http.Request) int { return http.StatusOK })
	if code, out := cmd("replay", "1-10-o2.2"); code != 0 || !strings.Contains(out, "1 failed webhook delivery replayed") {
		t.Fatalf("replay 1-10-o2.2: exit %d:\n%s", code, out)
	}
	testenv.WaitFor(t, 30*time.Second, "the replayed webhook", func() bool {
		got := r.receipts()
		return len(got) == 1 && got[0].ID == "1-10-o2.2"
	})
	if code, out := cmd("replay", "--all"); code != 0 || !strings.Contains(out, fmt.Sprintf("%d failed webhook deliveries replayed", len(want)-1)) {
		t.Fatalf("replay --all: exit %d:\n%s", code, out)
	}
	testenv.WaitFor(t, 30*time.Second, "every replayed webhook", func() bool { return r.complete(want) })
	if code, out := cmd("list"); code != 0 || !strings.Contains(out, "0 failed webhook deliveries") {
		t.Errorf("webhooks list after the replays: exit %d:\n%s", code, out)
	}
}

// TestNemesis: while changes commit, the receiver is cut, hung and
// restored, the deliverer's Postgres is cut and restored, and deliverers
// are stopped, killed (their Postgres cut under them, so their claims'
// outcomes are lost) and started again. Once all is back, the receiver has
// every event, each order's in version order.
func TestNemesis(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	r := mustReceiver(t)
	cut := testenv.MustProxy(t, strings.TrimPrefix(r.srv.URL, "http://"))
	pg := testenv.MustProxy(t, mustHostPort(t, e.db.URL))
	orders := mustOrders(t, e.db.URL, pg.Addr)
	ep := r.endpoint(t, "http://"+cut.Addr+"/hooks")
	cfg := mustKey(t, fast(ep))
	cfg.Timeout, cfg.Lease = 500*time.Millisecond, 1500*time.Millisecond
	stops := []func(){start(t, delivery.New(cfg, delivery.Deps{Orders: orders, Log: quietLog()}))}
	done := make(chan struct{})
	go func() { defer close(done); e.changes(t, 60) }()
	faults := []func(){
		func() { cut.Down(); pause(150 * time.Millisecond); cut.Up(t) },
		func() { cut.Hang(); pause(800 * time.Millisecond); cut.Down(); cut.Unhang(); cut.Up(t) },
		func() { pg.Down(); pause(300 * time.Millisecond); pg.Up(t) },
		func() { // a deliverer killed: its claims' outcomes never recorded
			pg.Down()
			stops[len(stops)-1]()
			pg.Up(t)
			stops = append(stops, start(t, delivery.New(cfg, delivery.Deps{Orders: orders, Log: quietLog()})))
		},
		func() { // a deliverer stopped, another started
			stops[len(stops)-1]()
			stops = append(stops, start(t, delivery.New(cfg, delivery.Deps{Orders: orders, Log: quietLog()})))
		},
	}
	// Every fault at least once, and on until the changes are all in.
	for i := 0; ; i++ {
		select {
		case <-done:
			if i >= len(faults) {
				goto settled
			}
		default:
		}
		faults[i%len(faults)]()
		pause(100 * time.Millisecond)
	}
settled:
	want := e.want(t)
	testenv.WaitFor(t, 120*time.Second, "every event after the faults", func() bool { return r.complete(want) })
	r.mustBeInOrder(t, want)
}

// pause lets the faults act for a while (what it waits on is the fault,
// not a condition).
func pause(d time.Duration) { time.Sleep(d) }

func mustHostPort(tb testing.TB, dbURL string) string {
	tb.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	return net.JoinHostPort(host, port)
}

// mustOrders is a store on dbURL's database through addr.
func mustOrders(tb testing.TB, dbURL, addr string) *order.Store {
	tb.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	u.Host = addr
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	pool, err := database.Open(context.Background(), u.String(), 8)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return order.NewStore(pool)
}

// TestSettings: WEBHOOK_URLS set without a Standard Webhooks secret, or
// with a URL that is not http(s), is a bad setting, and no message quotes
// the secret or a URL's credentials.
func TestSettings(t *testing.T) {
	read := func(vals map[string]string) (delivery.Config, error) {
		r := &setting.Reader{Env: func(name string) string {
			if v, ok := vals[name]; ok {
				return v
			}
			for _, v := range delivery.Settings {
				if v.Name == name {
					return v.Default
				}
			}
			return ""
		}}
		c := delivery.Read(r)
		return c, r.Err()
	}
	for _, tc := range []struct {
		name string
		vals map[string]string
		want string // "" ⇒ valid
	}{
		{"NoURLs", map[string]string{}, ""},
		{"Valid", map[string]string{"WEBHOOK_URLS": "https://a.example/h, http://b.example:8080/x", "WEBHOOK_SECRET": testSecret}, ""},
		{"NoSecret", map[string]string{"WEBHOOK_URLS": "https://a.example/h"}, "WEBHOOK_SECRET is empty"},
		{"NotWhsec", map[string]string{"WEBHOOK_URLS": "https://a.example/h", "WEBHOOK_SECRET": "hunter2-hunter2-hunter2-hunter2"}, "want whsec_"},
		{"NotBase64", map[string]string{"WEBHOOK_URLS": "https://a.example/h", "WEBHOOK_SECRET": "whsec_not*base64*at*all"}, "not standard base64"},
		{"Short", map[string]string{"WEBHOOK_URLS": "https://a.example/h", "WEBHOOK_SECRET": "whsec_c2hvcnQ="}, "want 24 to 64"},
		{"FTP", map[string]string{"WEBHOOK_URLS": "ftp://u:pw-Secret-9@a.example/h", "WEBHOOK_SECRET": testSecret}, "WEBHOOK_URLS"},
		{"Relative", map[string]string{"WEBHOOK_URLS": "/hooks", "WEBHOOK_SECRET": testSecret}, "WEBHOOK_URLS"},
		{"Twice", map[string]string{"WEBHOOK_URLS": "https://a.example/h?t=1,https://a.example/h?t=2", "WEBHOOK_SECRET": testSecret}, "listed twice"},
		{"ShortRetry", map[string]string{"WEBHOOK_RETRY_FOR": "1h"}, "WEBHOOK_RETRY_FOR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := read(tc.vals)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want an error saying %q, got %v", tc.want, err)
			}
			if err != nil && (strings.Contains(err.Error(), "pw-Secret-9") || strings.Contains(err.Error(), "hunter2")) {
				t.Errorf("the error quotes a secret: %v", err)
			}
			if tc.name == "Valid" && (len(c.Endpoints) != 2 || c.Endpoints[1].Name != "http://b.example:8080/x" || len(c.Secret) != 24) {
				t.Errorf("config %+v", c)
			}
		})
	}
}
