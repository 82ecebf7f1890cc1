package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"orderpipe/gateway"
	"orderpipe/gateway/client"
	"orderpipe/pkg/invariant"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

// pipeline is a running orderpipe (gateway + worker, the `all` wiring) on
// real Postgres, Redis and a Kafka-protocol broker, for end-to-end tests.
type pipeline struct {
	URL    string
	Cfg    config
	DB     testenv.Database
	Redis  testenv.Redis
	Kafka  testenv.Kafka
	Stock  *stock.Store
	Orders *order.Store
	// StockRedis is Stock's client and prefix, for stocktest.
	StockRedis stocktest.Redis
	Admin      string // admin token
	comps      components
	cancel     context.CancelFunc
	done       chan error

	mu       sync.Mutex
	accepted map[string]string // orderNo → requestId of every 2xx (202 or replayed 200) this test saw
}

// mustPipeline starts a pipeline on e's broker; it is stopped (and drained)
// at cleanup.
func mustPipeline(tb testing.TB, e engine, comps components, mod func(*config)) *pipeline {
	tb.Helper()
	return mustPipelineLogging(tb, e, comps, mod, nil)
}

// mustPipelineLogging is mustPipeline writing its JSON log lines to logTo
// (nil: discarded, or stderr with TEST_LOG set).
func mustPipelineLogging(tb testing.TB, e engine, comps components, mod func(*config), logTo io.Writer) *pipeline {
	tb.Helper()
	p := &pipeline{DB: testenv.MustDatabase(tb), Redis: testenv.MustRedis(tb), Kafka: e.kafka(tb), Admin: "test-admin-token",
		comps: comps}
	cfg, err := loadConfig()
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Database.URL = p.DB.URL
	cfg.Redis.Addr = testenv.RedisAddr()
	cfg.Stock.Prefix = p.Redis.Prefix
	cfg.Kafka.Brokers = p.Kafka.Brokers
	cfg.Kafka.Topic = testenv.UniqueName("orders.requested.")
	cfg.Kafka.DLQTopic = cfg.Kafka.Topic + ".dlq"
	cfg.Kafka.StatusTopic = cfg.Kafka.Topic + ".status"
	cfg.Worker.Group = testenv.UniqueName("group.")
	cfg.Kafka.Partitions = 4
	cfg.Gateway.AdminToken = p.Admin
	cfg.Gateway.Addr = "127.0.0.1:0"
	cfg.Telemetry.MetricsAddr = "127.0.0.1:0"
	// Tests share two cores with the race detector: a slow moment is not an
	// outage. Tests about outages cut the dependency instead.
	cfg.Redis.Timeout = 5 * time.Second
	cfg.Gateway.ProduceTimeout = 10 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	p.Cfg = cfg
	ctx := context.Background()
	if len(cfg.Kafka.Brokers) > 0 { // none: `all` embeds its broker, which seeds them
		if err := cfg.Kafka.EnsureTopics(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p.URL = "http://" + ln.Addr().String()
	p.Stock = stock.New(p.Redis.Client, p.Redis.Prefix)
	p.StockRedis = stocktest.On(p.Redis.Client, p.Redis.Prefix)
	p.Orders = order.NewStore(p.DB.Pool)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if os.Getenv("TEST_LOG") != "" {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if logTo != nil {
		log = slog.New(slog.NewJSONHandler(logTo, nil))
	}
	runCtx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	p.done = make(chan error, 1)
	go func() { p.done <- runComponents(runCtx, log, cfg, comps, ln) }()
	tb.Cleanup(p.Stop)
	if slices.Contains(comps, "gateway") {
		testenv.WaitFor(tb, 10*time.Second, "gateway /healthz", func() bool {
			res, _, err := get(tb, p.URL+"/healthz")
			return err == nil && res.StatusCode == http.StatusOK
		})
	}
	return p
}

// Stop stops the pipeline and waits for it to drain (idempotent).
func (p *pipeline) Stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		panic("pipeline did not stop")
	}
}

// apiResponse is a decoded answer.
type apiResponse struct {
	Status int
	Body   map[string]any
	Header http.Header
}

// Code is the error code of an error answer.
func (r apiResponse) Code() string {
	e, _ := r.Body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// Str is a top-level string field.
func (r apiResponse) Str(k string) string { s, _ := r.Body[k].(string); return s }

// httpClient is every test's HTTP client of the gateways: each exchange is
// checked against the gateway's OpenAPI description (gateway/openapi.json)
// by the transport, which reports to the calling test (contractCtx).
var httpClient = &http.Client{Timeout: 20 * time.Second, Transport: contractTransport{}}

// contractTransport sends through one shared transport and checks each
// exchange with the contract (testenv.APIContract.Transport).
type contractTransport struct{}

var sharedTransport = &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512}

func (contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	contract, err := apiContract()
	if err != nil {
		return nil, fmt.Errorf("the OpenAPI contract: %w", err)
	}
	return contract.Transport(sharedTransport).RoundTrip(req)
}

// apiContract is the gateway's OpenAPI description, which every exchange
// of these tests with a gateway is checked against.
var apiContract = sync.OnceValues(func() (*testenv.APIContract, error) {
	return testenv.NewAPIContract(gateway.OpenAPI())
})

// contractCtx is a context whose exchanges fail tb when they break the
// contract: an undocumented status, body, error code or missing header, or
// a request the contract refuses that was not refused.
func contractCtx(tb testing.TB, what string) context.Context {
	return testenv.WithContractReport(context.Background(), func(err error) { tb.Errorf("%s: %v", what, err) })
}

// api is the typed client (gateway/client) of the pipeline's gateway, the
// one the storefront, the bench and the chaos suite use.
func (p *pipeline) api() *client.Client {
	c := client.New(p.URL)
	c.HTTPClient, c.AdminToken = httpClient, p.Admin
	return c
}

// do sends a request through the client; body may be a string (sent raw)
// or a value (JSON); header is name, value pairs.
func (p *pipeline) do(tb testing.TB, method, path, contentType string, body any, header ...string) apiResponse {
	tb.Helper()
	var reqBody []byte
	switch b := body.(type) {
	case nil:
	case string:
		reqBody = []byte(b)
	default:
		var err error
		if reqBody, err = json.Marshal(b); err != nil {
			tb.Fatal(err)
		}
	}
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	res, err := p.api().Do(contractCtx(tb, method+" "+path), method, path, contentType, reqBody, h)
	if err != nil {
		tb.Errorf("%s %s: %v", method, path, err)
		return apiResponse{}
	}
	out := apiResponse{Status: res.Status, Header: res.Header}
	if len(res.Body) > 0 {
		if err := json.Unmarshal(res.Body, &out.Body); err != nil {
			tb.Errorf("%s %s: answer is not JSON: %q", method, path, res.Body)
		}
	}
	return out
}

// exchange sends req (whose body is reqBody) to a gateway, reads the answer
// and fails tb if the request or the answer breaks the OpenAPI contract.
func exchange(tb testing.TB, req *http.Request, reqBody []byte) (*http.Response, []byte, error) {
	tb.Helper()
	req = req.WithContext(testenv.WithContractReport(req.Context(), func(err error) {
		tb.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
	}))
	if reqBody != nil {
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, nil, err
	}
	return res, raw, nil
}

// get is GET url (a gateway's), checked against the contract like p.do.
func get(tb testing.TB, url string) (*http.Response, []byte, error) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return exchange(tb, req, nil)
}

// orderBody is a POST /v1/orders payload.
type orderBody = client.OrderRequest

func (p *pipeline) order(tb testing.TB, b orderBody) apiResponse {
	tb.Helper()
	r := p.do(tb, http.MethodPost, "/v1/orders", "application/json", b)
	// Every orderNo a client is shown in a 2xx (202, or 200 replayed) must
	// resolve: assertInvariants checks them all (I4).
	if (r.Status == http.StatusAccepted || r.Status == http.StatusOK) && r.Str("orderNo") != "" {
		p.shown(r.Str("orderNo"), b.RequestID)
	}
	return r
}

// mustAccept is order for an order the test needs taken: anything but a
// 202 ends the test.
func (p *pipeline) mustAccept(tb testing.TB, b orderBody) apiResponse {
	tb.Helper()
	r := p.order(tb, b)
	if r.Status != http.StatusAccepted {
		tb.Fatalf("order %s: %d %v, want 202", b.RequestID, r.Status, r.Body)
	}
	return r
}

// place is POST /v1/orders through the typed client, for tests whose
// subject is not HTTP itself; like order, it records an accepted orderNo.
func (p *pipeline) place(tb testing.TB, b orderBody) (client.Placed, error) {
	tb.Helper()
	placed, err := p.api().PlaceOrder(contractCtx(tb, "POST /v1/orders"), b)
	if err == nil {
		p.shown(placed.OrderNo, b.RequestID)
	}
	return placed, err
}

// orderOf is GET /v1/orders/{orderNo} through the typed client.
func (p *pipeline) orderOf(tb testing.TB, orderNo string) (client.Order, error) {
	tb.Helper()
	return p.api().GetOrder(contractCtx(tb, "GET /v1/orders/"+orderNo), orderNo)
}

// deref is *n for a message, or nil: an answer's optional number.
func deref(n *int64) any {
	if n == nil {
		return nil
	}
	return *n
}

// shown records an orderNo a client was shown in a 2xx: assertInvariants
// checks that each resolves (I4).
func (p *pipeline) shown(orderNo, requestID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.accepted == nil {
		p.accepted = map[string]string{}
	}
	p.accepted[orderNo] = requestID
}

// mustSale creates activity id with items (itemID → stock) through the admin
// API and preheats it; the sale runs from a minute ago for an hour.
func (p *pipeline) mustSale(tb testing.TB, id int64, perUserLimit int, items map[int64]int64) {
	tb.Helper()
	p.mustActivity(tb, id, time.Now().Add(-time.Minute), time.Now().Add(time.Hour), perUserLimit, items)
}

// mustSaleWindow creates and preheats a one-item-per-entry sale with an
// explicit window and a per-user limit of 1.
func (p *pipeline) mustSaleWindow(tb testing.TB, id int64, starts, ends time.Time, items map[int64]int64) {
	tb.Helper()
	p.mustActivity(tb, id, starts, ends, 1, items)
}

func (p *pipeline) mustActivity(tb testing.TB, id int64, starts, ends time.Time, perUserLimit int, items map[int64]int64) {
	tb.Helper()
	a := client.ActivityUpsert{Name: fmt.Sprintf("sale %d", id), StartsAt: starts.UTC(), EndsAt: ends.UTC(), PerUserLimit: perUserLimit}
	for k, v := range items {
		a.Items = append(a.Items, client.ItemUpsert{ItemID: k, Stock: v})
	}
	ctx := contractCtx(tb, "admin")
	// Both calls are idempotent: a 503 (a Postgres call past its timeout
	// on a busy machine) is retried as an operator would, a few times.
	if err := client.RetryIdempotent(ctx, func() error { _, err := p.api().PutActivity(ctx, id, a); return err }); err != nil {
		tb.Fatalf("creating activity: %v", err)
	}
	if err := client.RetryIdempotent(ctx, func() error { _, err := p.api().Preheat(ctx, id); return err }); err != nil {
		tb.Fatalf("preheating: %v", err)
	}
}

// redisStock is the item's Redis stock (-1 if the key is missing).
func (p *pipeline) redisStock(tb testing.TB, it stock.Item) int64 {
	tb.Helper()
	n, ok := stocktest.Stock(tb, p.StockRedis, it)
	if !ok {
		return -1
	}
	return n
}

// dbStock is the item's Postgres stock row.
func (p *pipeline) dbStock(tb testing.TB, it stock.Item) order.ItemStock {
	tb.Helper()
	s, err := p.Orders.ItemStockOf(context.Background(), it.ActivityID, it.ItemID)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// journalLen is the number of in-flight reservations of the item.
func (p *pipeline) journalLen(tb testing.TB, it stock.Item) int64 {
	tb.Helper()
	n, err := p.Stock.JournalLen(context.Background(), it)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// waitDrained waits until the item's journal is empty and no compensation is pending.
func (p *pipeline) waitDrained(tb testing.TB, it stock.Item) {
	tb.Helper()
	testenv.WaitFor(tb, 30*time.Second, "the pipeline to drain", func() bool {
		n, err := p.Orders.CountPendingCompensations(context.Background())
		return err == nil && n == 0 && p.journalLen(tb, it) == 0
	})
}

// assertInvariants holds the item to I1–I7 (pkg/invariant, the checker of
// the bench and the chaos suite too): every violation fails tb. Every
// orderNo this test was shown in a 2xx must resolve, in Postgres and, with
// a gateway running, through GET (I4).
func (p *pipeline) assertInvariants(tb testing.TB, it stock.Item) {
	tb.Helper()
	p.publishStatus(tb) // when no relay runs
	p.mu.Lock()
	observed := maps.Clone(p.accepted)
	p.mu.Unlock()
	c := &invariant.Checker{Orders: p.Orders, Stock: p.Stock, Status: p.statusTopic()}
	if p.URL != "" && slices.Contains(p.comps, "gateway") && p.cancel != nil {
		c.Gateways = []invariant.Gateway{p.api()}
	}
	ctx := contractCtx(tb, "GET /v1/orders/{orderNo}")
	vs, err := c.Check(ctx, invariant.Scope{ActivityID: it.ActivityID, Items: []int64{it.ItemID}, Observed: observed})
	if err != nil {
		tb.Fatalf("checking the invariants: %v", err)
	}
	for _, v := range vs {
		tb.Error(v)
	}
}

// assertSettled waits until the pipeline has drained the item, holds it to
// the invariants and wants units left of it in Postgres (why: what took the
// rest).
func (p *pipeline) assertSettled(tb testing.TB, it stock.Item, units int64, why string) {
	tb.Helper()
	p.waitDrained(tb, it)
	p.assertInvariants(tb, it)
	if s := p.dbStock(tb, it); s.Stock != units {
		tb.Errorf("db stock %d after %s, want %d", s.Stock, why, units)
	}
}

// startWorker runs one more worker (like a separate worker process) on the
// pipeline's configuration, stopped at cleanup.
func (p *pipeline) startWorker(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runComponents(ctx, testLog(), p.Cfg, components{"worker"}, nil) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("worker: %v", err)
		}
	})
}

// mustPostgresProxy is a proxy in front of the test Postgres server, for a
// test that cuts the pipeline off it.
func mustPostgresProxy(tb testing.TB) *testenv.Proxy {
	tb.Helper()
	dbURL, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		tb.Fatal(err)
	}
	return testenv.MustProxy(tb, dbURL.Host)
}

// viaPostgresProxy points c's database at proxy. The breaker opens for a
// moment only, so the pipeline tries Postgres again soon after the proxy
// is back up.
func viaPostgresProxy(c *config, proxy *testenv.Proxy) {
	u, _ := url.Parse(c.Database.URL)
	u.Host = proxy.Addr
	c.Database.URL = u.String()
	c.BreakerOpenFor = 200 * time.Millisecond
}
