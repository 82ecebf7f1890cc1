package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"orderpipe/gateway"
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
	Admin  string // admin token
	comps  components
	cancel context.CancelFunc
	done   chan error

	mu       sync.Mutex
	accepted map[string]string // orderNo → requestId of every 2xx (202 or replayed 200) this test saw
}

// mustPipeline starts a pipeline; it is stopped (and drained) at cleanup.
func mustPipeline(tb testing.TB, comps components, mod func(*config)) *pipeline {
	tb.Helper()
	return mustPipelineLogging(tb, comps, mod, nil)
}

// mustPipelineLogging is mustPipeline writing its JSON log lines to logTo
// (nil: discarded, or stderr with TEST_LOG set).
func mustPipelineLogging(tb testing.TB, comps components, mod func(*config), logTo io.Writer) *pipeline {
	tb.Helper()
	p := &pipeline{DB: testenv.MustDatabase(tb), Redis: testenv.MustRedis(tb), Kafka: testenv.MustKafka(tb), Admin: "test-admin-token",
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
	if err := cfg.Kafka.EnsureTopics(ctx); err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p.URL = "http://" + ln.Addr().String()
	p.Stock = stock.New(p.Redis.Client, p.Redis.Prefix)
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

var httpClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512}}

// do sends a request; body may be a string (sent raw) or a value (JSON).
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
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(reqBody)
	}
	req, err := http.NewRequest(method, p.URL+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, raw, err := exchange(tb, req, reqBody)
	if err != nil {
		tb.Errorf("%s %s: %v", method, path, err)
		return apiResponse{}
	}
	out := apiResponse{Status: res.StatusCode, Header: res.Header}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out.Body); err != nil {
			tb.Errorf("%s %s: answer is not JSON: %q", method, path, raw)
		}
	}
	return out
}

// apiContract is the gateway's OpenAPI description, which every exchange
// of these tests with a gateway is checked against.
var apiContract = sync.OnceValues(func() (*testenv.APIContract, error) {
	return testenv.NewAPIContract(gateway.OpenAPI())
})

// exchange sends req (whose body is reqBody) to a gateway, reads the answer
// and fails tb if the request or the answer breaks the OpenAPI contract
// (gateway/openapi.json): an undocumented status, body, error code or
// missing header, or a request the contract refuses that was not refused.
func exchange(tb testing.TB, req *http.Request, reqBody []byte) (*http.Response, []byte, error) {
	tb.Helper()
	contract, err := apiContract()
	if err != nil {
		tb.Fatalf("the OpenAPI contract: %v", err)
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
	if err := contract.Check(req, reqBody, res, raw); err != nil {
		tb.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
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
type orderBody struct {
	RequestID  string `json:"requestId"`
	UserID     int64  `json:"userId"`
	ActivityID int64  `json:"activityId"`
	ItemID     int64  `json:"itemId"`
	Quantity   int    `json:"quantity"`
}

func (p *pipeline) order(tb testing.TB, b orderBody) apiResponse {
	tb.Helper()
	r := p.do(tb, http.MethodPost, "/v1/orders", "application/json", b)
	// Every orderNo a client is shown in a 2xx (202, or 200 replayed) must
	// resolve: assertInvariants checks them all (I4).
	if (r.Status == http.StatusAccepted || r.Status == http.StatusOK) && r.Str("orderNo") != "" {
		p.mu.Lock()
		if p.accepted == nil {
			p.accepted = map[string]string{}
		}
		p.accepted[r.Str("orderNo")] = b.RequestID
		p.mu.Unlock()
	}
	return r
}

// mustSale creates activity id with items (itemID → stock) through the admin
// API and preheats it; the sale runs from a minute ago for an hour.
func (p *pipeline) mustSale(tb testing.TB, id int64, perUserLimit int, items map[int64]int64) {
	tb.Helper()
	type item struct {
		ItemID int64 `json:"itemId"`
		Stock  int64 `json:"stock"`
	}
	body := map[string]any{"name": fmt.Sprintf("sale %d", id), "startsAt": time.Now().Add(-time.Minute).UTC(),
		"endsAt": time.Now().Add(time.Hour).UTC(), "perUserLimit": perUserLimit}
	var its []item
	for k, v := range items {
		its = append(its, item{k, v})
	}
	body["items"] = its
	auth := []string{"Authorization", "Bearer " + p.Admin}
	if r := p.do(tb, http.MethodPut, fmt.Sprintf("/admin/v1/activities/%d", id), "application/json", body, auth...); r.Status != http.StatusOK {
		tb.Fatalf("creating activity: %d %v", r.Status, r.Body)
	}
	if r := p.do(tb, http.MethodPost, fmt.Sprintf("/admin/v1/activities/%d/preheat", id), "", nil, auth...); r.Status != http.StatusOK {
		tb.Fatalf("preheating: %d %v", r.Status, r.Body)
	}
}

// redisStock is the item's Redis stock (-1 if the key is missing).
func (p *pipeline) redisStock(tb testing.TB, it stock.Item) int64 {
	tb.Helper()
	n, err := p.Redis.Client.Get(context.Background(), stocktest.KeysOf(p.Stock, it).Stock).Int64()
	if err != nil {
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
	n, err := p.Redis.Client.HLen(context.Background(), stocktest.KeysOf(p.Stock, it).Journal).Result()
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

// assertInvariants checks I1, I2, I3, I4, I6, I7 and (nothing in flight) I5 for an item.
func (p *pipeline) assertInvariants(tb testing.TB, it stock.Item) {
	tb.Helper()
	ctx := context.Background()
	s := p.dbStock(tb, it)
	var live, dupUsers, dupReq int64
	if err := p.DB.Pool.QueryRow(ctx, `SELECT COALESCE(sum(quantity), 0) FROM orders
		WHERE activity_id = $1 AND item_id = $2 AND status IN ('UNPAID', 'PAID')`, it.ActivityID, it.ItemID).Scan(&live); err != nil {
		tb.Fatal(err)
	}
	if s.Stock < 0 || s.InitialStock != s.Stock+live {
		tb.Errorf("I1: initial %d != stock %d + live %d", s.InitialStock, s.Stock, live)
	}
	if err := p.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT user_id FROM orders WHERE activity_id = $1 AND item_id = $2
		AND status IN ('UNPAID', 'PAID') GROUP BY user_id HAVING count(*) > 1) d`, it.ActivityID, it.ItemID).Scan(&dupUsers); err != nil {
		tb.Fatal(err)
	}
	if dupUsers != 0 {
		tb.Errorf("I2: %d users hold more than one live order", dupUsers)
	}
	if err := p.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT request_id FROM orders GROUP BY request_id HAVING count(*) > 1) d`).Scan(&dupReq); err != nil {
		tb.Fatal(err)
	}
	if dupReq != 0 {
		tb.Errorf("I3: %d requestIds have more than one order", dupReq)
	}
	if rs := p.redisStock(tb, it); rs != s.Stock {
		tb.Errorf("I5: redis stock %d != db stock %d", rs, s.Stock)
	}
	// I5, markers: exactly one per live order, naming that order's request.
	rows, err := p.DB.Pool.Query(ctx, `SELECT user_id, request_id FROM orders WHERE activity_id = $1 AND item_id = $2
		AND status IN ('UNPAID', 'PAID')`, it.ActivityID, it.ItemID)
	if err != nil {
		tb.Fatal(err)
	}
	var user int64
	var rid string
	liveUsers := 0
	if _, err := pgx.ForEachRow(rows, []any{&user, &rid}, func() error {
		liveUsers++
		if got := stocktest.MarkerOwner(tb, p.Stock, it, user); got != rid {
			tb.Errorf("I5: user %d's limit marker is %q, want their live order's request %q", user, got, rid)
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	if markers := stocktest.CountMarkers(tb, p.Stock, it); markers != liveUsers {
		tb.Errorf("I5: %d limit markers for %d live orders", markers, liveUsers)
	}
	// I6: a paid order was never closed, and the status agrees with the times.
	var badI6 int64
	if err := p.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE (paid_at IS NOT NULL AND closed_at IS NOT NULL)
		OR (status = 'PAID') <> (paid_at IS NOT NULL) OR (status = 'CLOSED') <> (closed_at IS NOT NULL)`).Scan(&badI6); err != nil {
		tb.Fatal(err)
	}
	if badI6 != 0 {
		tb.Errorf("I6: %d orders whose status disagrees with paid_at/closed_at", badI6)
	}
	p.assertStatusEvents(tb, it.ActivityID) // I7
	// I4: every orderNo this test saw in a 2xx ended as an order of that
	// request or a REJECTED record with a reason, and GET says so.
	p.mu.Lock()
	defer p.mu.Unlock()
	for orderNo, rid := range p.accepted {
		p.assertResolved(tb, orderNo, rid)
	}
}

// assertResolved checks that orderNo, shown to a client of request rid in a
// 2xx, is decided in Postgres (an order, or a REJECTED record with a reason)
// and, when a gateway runs, that GET /v1/orders/{orderNo} answers it.
func (p *pipeline) assertResolved(tb testing.TB, orderNo, rid string) {
	tb.Helper()
	o, err := p.Orders.GetOrder(context.Background(), orderNo)
	switch {
	case err != nil:
		tb.Errorf("I4: %s, shown to request %s in a 2xx, is neither an order nor an explained rejection: %v", orderNo, rid, err)
		return
	case o.RequestID != rid:
		tb.Errorf("I4: %s, shown to request %s, is recorded for request %s", orderNo, rid, o.RequestID)
	case o.Status == order.StatusRejected && o.Reason == "":
		tb.Errorf("I4: %s was rejected without a reason", orderNo)
	}
	if p.URL == "" || !slices.Contains(p.comps, "gateway") || p.cancel == nil {
		return
	}
	g := p.do(tb, http.MethodGet, "/v1/orders/"+orderNo, "", nil)
	if g.Status != http.StatusOK || g.Str("status") != o.Status || g.Str("requestId") != rid {
		tb.Errorf("I4: GET %s answered %d %v, want %s of request %s", orderNo, g.Status, g.Body, o.Status, rid)
	}
}

// mustSaleWindow creates and preheats a one-item-per-entry sale with an
// explicit window and a per-user limit of 1.
func (p *pipeline) mustSaleWindow(tb testing.TB, id int64, starts, ends time.Time, items map[int64]int64) {
	tb.Helper()
	var its []map[string]int64
	for k, v := range items {
		its = append(its, map[string]int64{"itemId": k, "stock": v})
	}
	body := map[string]any{"name": fmt.Sprintf("sale %d", id), "startsAt": starts.UTC(), "endsAt": ends.UTC(), "perUserLimit": 1, "items": its}
	auth := []string{"Authorization", "Bearer " + p.Admin}
	if r := p.do(tb, http.MethodPut, fmt.Sprintf("/admin/v1/activities/%d", id), "application/json", body, auth...); r.Status != http.StatusOK {
		tb.Fatalf("creating activity: %d %v", r.Status, r.Body)
	}
	if r := p.do(tb, http.MethodPost, fmt.Sprintf("/admin/v1/activities/%d/preheat", id), "", nil, auth...); r.Status != http.StatusOK {
		tb.Fatalf("preheating: %d %v", r.Status, r.Body)
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
