package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/standin"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

// metric reads one sample's value from the gateway's /metrics ("" if absent).
func (p *pipeline) metric(tb testing.TB, series string) string {
	tb.Helper()
	_, raw, err := get(tb, p.URL+"/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimPrefix(line, series+" ")
		}
	}
	return ""
}

// testRedisDownFailsClosed stops the gateway's Redis mid-traffic: answers
// are 503 UNAVAILABLE (never another 5xx), nothing is oversold or lost, and
// the gateway recovers by itself when Redis returns.
func testRedisDownFailsClosed(t *testing.T, e engine) {
	// Serial: it waits for 503s under a stream of orders; beside other
	// pipelines on two cores its requests time out.
	rs := testenv.MustRedisServer(t)
	p := mustPipeline(t, e, both, func(c *config) {
		c.Redis.Addr = rs.Addr
		c.Stock.Prefix = ""
		c.BreakerOpenFor = 300 * time.Millisecond
	})
	sr := stocktest.On(rs.Client(t), "")
	it := stock.Item{ActivityID: 1, ItemID: 1}
	p.mustSale(t, 1, 1, map[int64]int64{1: 100000})

	var (
		mu       sync.Mutex
		answers  = map[int]int{}
		accepted []string
		n        atomic.Int64
		stop     atomic.Bool
		phase    atomic.Int32 // 0 up, 1 down, 2 restarted
		downSeen = map[int]int{}
	)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := n.Add(1)
				ph := phase.Load()
				r := p.order(t, orderBody{RequestID: fmt.Sprintf("f-%d", i), UserID: i, ActivityID: 1, ItemID: 1, Quantity: 1})
				mu.Lock()
				answers[r.Status]++
				if ph == 1 {
					downSeen[r.Status]++
				}
				if r.Status == http.StatusAccepted {
					accepted = append(accepted, r.Str("orderNo"))
				}
				if r.Status == http.StatusServiceUnavailable && (r.Code() != "UNAVAILABLE" || r.Header.Get("Retry-After") == "") {
					t.Errorf("503 without UNAVAILABLE/Retry-After: %v %v", r.Body, r.Header)
				}
				mu.Unlock()
			}
		}()
	}
	count := func(status int) int { mu.Lock(); defer mu.Unlock(); return answers[status] }
	testenv.WaitFor(t, 10*time.Second, "traffic to flow", func() bool { return count(http.StatusAccepted) > 50 })
	rs.Stop()
	phase.Store(1)
	testenv.WaitFor(t, 20*time.Second, "503s while redis is down", func() bool { return count(http.StatusServiceUnavailable) > 50 })
	rs.Start(t)
	phase.Store(2)
	before := count(http.StatusAccepted)
	testenv.WaitFor(t, 20*time.Second, "orders accepted again after redis returned", func() bool { return count(http.StatusAccepted) > before+50 })
	stop.Store(true)
	wg.Wait()

	for status := range answers {
		if status != http.StatusAccepted && status != http.StatusServiceUnavailable {
			t.Errorf("unexpected status %d (%d times); all answers: %v", status, answers[status], answers)
		}
	}
	if downSeen[http.StatusServiceUnavailable] == 0 {
		t.Errorf("no 503 while redis was down: %v", downSeen)
	}
	// Every accepted order reaches Postgres once Redis is back.
	ctx := context.Background()
	testenv.WaitFor(t, 30*time.Second, "accepted orders persisted", func() bool {
		return ordertest.CountOrdersAmong(t, p.DB.Pool, accepted) == len(accepted)
	})
	// A reserve whose reply was lost as Redis died may still be in the
	// journal: it is in flight, and I5's in-flight form must hold exactly.
	testenv.WaitFor(t, 10*time.Second, "db and redis to agree", func() bool {
		db := p.dbStock(t, it)
		redisStock, _ := stocktest.Stock(t, sr, it)
		rids := slices.Collect(maps.Keys(stocktest.Journal(t, sr, it)))
		done, err := p.Orders.ProcessedAmong(ctx, rids)
		if err != nil {
			return false
		}
		inflight := int64(len(rids) - len(done))
		live := ordertest.CountLive(t, p.DB.Pool)
		return db.InitialStock == db.Stock+live && db.Stock-redisStock == inflight
	})
}

// testKafkaDownOpensBreaker: failed produces answer 503 with nothing
// reserved and trip the breaker; then a new request is answered 503 and
// changes nothing, while a retry of a request accepted before is still
// answered its first answer (200 replayed) and a reused requestId 422. When
// the broker is back the breaker lets orders through again and every
// invariant holds over everything the clients were told.
func testKafkaDownOpensBreaker(t *testing.T, e engine) {
	t.Parallel()
	proxy := kafkaBehindProxy(t)
	p := mustPipeline(t, e, both, func(c *config) {
		c.Kafka.Brokers = []string{proxy.Addr}
		c.Kafka.ReplicationFactor = 1 // one broker, whatever the real-engine tier sets
		c.Gateway.ProduceTimeout = time.Second
		// Long enough for the checks below, short enough to see it close.
		c.BreakerOpenFor = 10 * time.Second
	})
	it := stock.Item{ActivityID: 2, ItemID: 1}
	p.mustSale(t, 2, 1, map[int64]int64{1: 10})
	// Accepted while the broker is up, and replayed once (so its event is durable).
	accepted := orderBody{RequestID: "before-down", UserID: 500, ActivityID: 2, ItemID: 1, Quantity: 1}
	first := p.mustAccept(t, accepted)
	if r := p.order(t, accepted); r.Status != http.StatusOK || r.Str("orderNo") != first.Str("orderNo") {
		t.Fatalf("retry with the broker up: %d %v, want 200 replayed %s", r.Status, r.Body, first.Str("orderNo"))
	}
	p.waitDrained(t, it) // the worker has it: nothing in flight when the broker goes
	proxy.Down()
	for i := 0; p.metric(t, `orderpipe_breaker_state{name="gateway-kafka"}`) != "2"; i++ {
		if i == 20 {
			t.Fatal("breaker did not open after 20 failed produces")
		}
		r := p.order(t, orderBody{RequestID: fmt.Sprintf("k-%d", i), UserID: int64(i + 1), ActivityID: 2, ItemID: 1, Quantity: 1})
		if r.Status != http.StatusServiceUnavailable || r.Code() != "UNAVAILABLE" {
			t.Fatalf("produce failure answered %d %v", r.Status, r.Body)
		}
	}
	before := p.state(t)
	r := p.order(t, orderBody{RequestID: "after-open", UserID: 99, ActivityID: 2, ItemID: 1, Quantity: 1})
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("open breaker answered %d %v", r.Status, r.Body)
	}
	if r := p.order(t, accepted); r.Status != http.StatusOK || r.Str("orderNo") != first.Str("orderNo") || r.Body["replayed"] != true {
		t.Errorf("retry of an accepted request with the breaker open: %d %v, want 200 replayed %s", r.Status, r.Body, first.Str("orderNo"))
	}
	reused := accepted
	reused.UserID = 501
	if r := p.order(t, reused); r.Status != http.StatusUnprocessableEntity || r.Code() != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("reused requestId with the breaker open: %d %v, want 422 IDEMPOTENCY_KEY_REUSED", r.Status, r.Body)
	}
	// k-0's reservation was given back when its produce failed: nothing to replay.
	if r := p.order(t, orderBody{RequestID: "k-0", UserID: 1, ActivityID: 2, ItemID: 1, Quantity: 1}); r.Status != http.StatusServiceUnavailable {
		t.Errorf("retry of a request answered 503, with the breaker open: %d %v, want 503", r.Status, r.Body)
	}
	if after := p.state(t); after != before {
		t.Errorf("requests with the breaker open changed state:\n%s\n%s", before, after)
	}
	if got := p.redisStock(t, it); got != 9 {
		t.Errorf("redis stock %d, want 9 (the accepted order's reservation, nothing more)", got)
	}

	proxy.Up(t)
	back := orderBody{RequestID: "after-back", UserID: 77, ActivityID: 2, ItemID: 1, Quantity: 1}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		r := p.order(t, back)
		if r.Status == http.StatusAccepted {
			break
		}
		if r.Status != http.StatusServiceUnavailable && r.Status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("order with the broker back: %d %v, want 202 once the breaker closes", r.Status, r.Body)
		}
	}
	p.waitDrained(t, it)
	if got := p.redisStock(t, it); got != 8 {
		t.Errorf("redis stock %d, want 8: the two accepted orders", got)
	}
	p.assertInvariants(t, it)
}

// kafkaBehindProxy starts an in-process broker that names the proxy in
// front of it to its clients: the proxy's Down cuts every client off, Up
// lets them back (Cluster.Close is for good).
func kafkaBehindProxy(tb testing.TB) *testenv.Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	proxy := testenv.MustProxy(tb, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	_, adv, _ := net.SplitHostPort(proxy.Addr)
	advPort, _ := strconv.Atoi(adv)
	k, err := standin.StartKafka(standin.KafkaOptions{Port: port, AdvertisedPort: advPort})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(k.Close)
	return proxy
}

// testWorkerWaitsForPostgres: with Postgres unreachable the worker commits
// no offsets; when it returns, every accepted order is persisted once.
func testWorkerWaitsForPostgres(t *testing.T, e engine) {
	// Serial: every order must be taken in time while Postgres is cut;
	// beside other pipelines on two cores some time out.
	proxy := mustPostgresProxy(t)
	p := mustPipeline(t, e, both, func(c *config) { viaPostgresProxy(c, proxy) })
	it := stock.Item{ActivityID: 3, ItemID: 1}
	p.mustSale(t, 3, 1, map[int64]int64{1: 100})
	proxy.Down()
	const orders = 20
	for i := 0; i < orders; i++ {
		if r := p.order(t, orderBody{RequestID: fmt.Sprintf("pg-%d", i), UserID: int64(i + 1), ActivityID: 3, ItemID: 1, Quantity: 1}); r.Status != http.StatusAccepted {
			t.Fatalf("order %d: %d %v (the hot path must not need Postgres)", i, r.Status, r.Body)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "the worker's Postgres breaker to open", func() bool {
		return p.metric(t, `orderpipe_breaker_state{name="worker-postgres"}`) == "2"
	})
	if got := committedOffsets(t, p); got != 0 {
		t.Fatalf("worker committed %d offsets while Postgres was down", got)
	}
	if n := ordertest.CountOrders(t, p.DB.Pool); n != 0 {
		t.Fatalf("%d orders written while Postgres was unreachable?", n)
	}
	proxy.Up(t)
	p.waitDrained(t, it)
	testenv.WaitFor(t, 20*time.Second, "offsets committed", func() bool { return committedOffsets(t, p) == orders })
	if n := ordertest.CountOrders(t, p.DB.Pool); n != orders {
		t.Errorf("%d orders after Postgres returned, want %d", n, orders)
	}
	p.assertInvariants(t, it)
}

// committedOffsets sums the worker group's committed offsets over the topic.
func committedOffsets(tb testing.TB, p *pipeline) int64 {
	tb.Helper()
	client := &kafka.Client{Addr: kafka.TCP(p.Kafka.Brokers...), Timeout: 5 * time.Second}
	parts := make([]int, p.Cfg.Kafka.Partitions)
	for i := range parts {
		parts[i] = i
	}
	res, err := client.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: p.Cfg.Worker.Group,
		Topics: map[string][]int{p.Cfg.Kafka.Topic: parts}})
	if err != nil {
		tb.Fatalf("fetching offsets: %v", err)
	}
	var sum int64
	for _, po := range res.Topics[p.Cfg.Kafka.Topic] {
		if po.CommittedOffset > 0 {
			sum += po.CommittedOffset
		}
	}
	return sum
}

// testUserFloodIsRateLimited: a bot flooding as one user meets 429 while a
// burst of distinct buyers never does.
func testUserFloodIsRateLimited(t *testing.T, e engine) {
	// Serial: it floods the gateway; beside other pipelines on two cores
	// its requests time out.
	p := mustPipeline(t, e, components{"gateway"}, nil) // production defaults
	p.mustSale(t, 4, 1, map[int64]int64{1: 100000})
	limited := 0
	for i := 0; i < 40; i++ {
		r := p.order(t, orderBody{RequestID: fmt.Sprintf("bot-%d", i), UserID: 666, ActivityID: 4, ItemID: 1, Quantity: 1})
		if r.Status == http.StatusTooManyRequests {
			limited++
			if r.Code() != "RATE_LIMITED" || r.Header.Get("Retry-After") == "" {
				t.Errorf("429 without RATE_LIMITED/Retry-After: %v %v", r.Body, r.Header)
			}
		}
	}
	if limited == 0 {
		t.Error("a user sending 40 requests at once was never rate limited")
	}
	var wg sync.WaitGroup
	var buyers429 atomic.Int64
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if r := p.order(t, orderBody{RequestID: fmt.Sprintf("buyer-%d", i), UserID: int64(10000 + i), ActivityID: 4, ItemID: 1, Quantity: 1}); r.Status == http.StatusTooManyRequests {
				buyers429.Add(1)
			}
		}(i)
	}
	wg.Wait()
	if buyers429.Load() != 0 {
		t.Errorf("%d distinct buyers were rate limited", buyers429.Load())
	}
}

func testAPITokensAndAdminListener(t *testing.T, e engine) {
	t.Parallel()
	adminLn := freeAddr(t)
	p := mustPipeline(t, e, components{"gateway"}, func(c *config) { c.Gateway.APITokens = []string{"svc-a", "svc-b"}; c.Gateway.AdminAddr = adminLn })
	body := orderBody{RequestID: "tok", UserID: 1, ActivityID: 1, ItemID: 1, Quantity: 1}
	if r := p.order(t, body); r.Status != http.StatusUnauthorized || r.Code() != "UNAUTHORIZED" {
		t.Errorf("no token: %d %v", r.Status, r.Body)
	}
	if r := p.do(t, "POST", "/v1/orders", "application/json", body, "Authorization", "Bearer nope"); r.Status != http.StatusUnauthorized {
		t.Errorf("wrong token: %d %v", r.Status, r.Body)
	}
	// The admin API is not on the public listener...
	auth := []string{"Authorization", "Bearer " + p.Admin}
	if r := p.do(t, "POST", "/admin/v1/activities/1/preheat", "", nil, auth...); r.Status != http.StatusNotFound {
		t.Errorf("admin route on the public listener: %d %v", r.Status, r.Body)
	}
	// ...but on its own.
	admin := &pipeline{URL: "http://" + adminLn}
	sale := map[string]any{"name": "t", "startsAt": time.Now().Add(-time.Minute).UTC(), "endsAt": time.Now().Add(time.Hour).UTC(),
		"items": []map[string]any{{"itemId": 1, "stock": 5}}}
	if r := admin.do(t, "PUT", "/admin/v1/activities/1", "application/json", sale, auth...); r.Status != http.StatusOK {
		t.Fatalf("admin listener: %d %v", r.Status, r.Body)
	}
	if r := admin.do(t, "POST", "/admin/v1/activities/1/preheat", "", nil, auth...); r.Status != http.StatusOK {
		t.Fatalf("admin listener preheat: %d %v", r.Status, r.Body)
	}
	if r := p.do(t, "POST", "/v1/orders", "application/json", body, "Authorization", "Bearer svc-b"); r.Status != http.StatusAccepted {
		t.Errorf("valid token: %d %v", r.Status, r.Body)
	}
}

// testHungRedisAnswers503InTime: a Redis that stops answering without
// closing anything (a hung server, a black-holed network) gets a 503 within
// about two REDIS_TIMEOUTs — the reserve, then the attempt to give it back —
// never a resent script or a request held for many timeouts; and nothing
// is reserved.
func testHungRedisAnswers503InTime(t *testing.T, e engine) {
	t.Parallel()
	proxy := testenv.MustProxy(t, testenv.RedisAddr())
	const redisTimeout = 500 * time.Millisecond
	p := mustPipeline(t, e, components{"gateway"}, func(c *config) { c.Redis.Addr = proxy.Addr; c.Redis.Timeout = redisTimeout })
	p.mustSale(t, 1, 1, map[int64]int64{1: 10})
	it := stock.Item{ActivityID: 1, ItemID: 1}
	proxy.Hang()

	start := time.Now()
	r := p.order(t, orderBody{RequestID: "hung-1", UserID: 7, ActivityID: 1, ItemID: 1, Quantity: 1})
	took := time.Since(start)
	if r.Status != http.StatusServiceUnavailable || r.Code() != "UNAVAILABLE" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("answer %d %v, want 503 UNAVAILABLE with Retry-After", r.Status, r.Body)
	}
	// go-redis's own retries resent the pipeline three times and the
	// release as often: about 8 timeouts. Three leave room for a slow machine.
	if took > 3*redisTimeout+time.Second {
		t.Errorf("503 after %v with REDIS_TIMEOUT=%v: the call was retried or waited beyond its bound", took, redisTimeout)
	}
	ctx := context.Background()
	tr, err := p.Stock.Traces(ctx, []stock.Item{it}, "hung-1")
	if err != nil {
		t.Fatal(err)
	}
	if left := p.redisStock(t, it); left != 10 || stocktest.MarkerOwner(t, p.StockRedis, it, 7) != "" || tr[0].Dedup != nil ||
		len(stocktest.Journal(t, p.StockRedis, it)) != 0 {
		t.Errorf("a hung Redis left a reservation: stock %d", left)
	}
}

// testStartRidesOutUnreachableStores: a closer started while Postgres and
// Redis refuse connections (a restart or failover under way) waits for them
// instead of exiting, serves once they are back, and stops cleanly.
func testStartRidesOutUnreachableStores(t *testing.T, _ engine) {
	t.Parallel()
	db := testenv.MustDatabase(t)
	rd := testenv.MustRedis(t)
	pgURL, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	pgProxy := testenv.MustProxy(t, pgURL.Host)
	redisProxy := testenv.MustProxy(t, testenv.RedisAddr())
	pgProxy.Down()
	redisProxy.Down()
	pgURL.Host = pgProxy.Addr

	c := startCloser(t, "DATABASE_URL="+pgURL.String(), "REDIS_ADDR="+redisProxy.Addr, "REDIS_KEY_PREFIX="+rd.Prefix)
	c.mustStayUp(t, 1500*time.Millisecond, "while Postgres and Redis were unreachable")
	pgProxy.Up(t)
	c.mustWaitThrough(t, "while Redis was unreachable", func() { redisProxy.Up(t) },
		"postgres not ready at start: retrying", "redis not ready at start: retrying")
}

// testStartWaitsForRedisToLoad: a closer started while a restarted Redis is
// still loading its append-only file (it answers every command with
// LOADING) waits for the load to end instead of exiting, as it waits for a
// Redis that refuses connections.
func testStartWaitsForRedisToLoad(t *testing.T, _ engine) {
	db := testenv.MustDatabase(t)
	mustBinary(t) // built before the load starts: it lasts about 2 s
	rs := testenv.MustLoadingRedis(t)
	c := startCloser(t, "DATABASE_URL="+db.URL, "REDIS_ADDR="+rs.Addr, "REDIS_KEY_PREFIX=loading:")
	c.mustServeAndStop(t, "redis not ready at start: retrying", "LOADING")
}

// testStartWaitsForRedisFailover: a closer started on a Redis address whose
// server is a replica cut from its primary (it answers MASTERDOWN while a
// failover is under way) waits, and serves once the replica is promoted.
func testStartWaitsForRedisFailover(t *testing.T, _ engine) {
	t.Parallel()
	db := testenv.MustDatabase(t)
	rs := testenv.MustCutReplica(t)
	c := startCloser(t, "DATABASE_URL="+db.URL, "REDIS_ADDR="+rs.Addr, "REDIS_KEY_PREFIX=failover:")
	c.mustWaitThrough(t, "while its Redis was a replica cut from its primary", func() { rs.Promote(t) },
		"redis not ready at start: retrying", "MASTERDOWN")
}

// testStartWaitsForPostgresToRecover: a closer started while PostgreSQL is
// still in recovery (every connection refused with SQLSTATE 57P03, as while
// a restarted server replays its WAL) waits for it instead of exiting.
func testStartWaitsForPostgresToRecover(t *testing.T, _ engine) {
	t.Parallel()
	rd := testenv.MustRedis(t)
	pg := testenv.MustPostgresStandby(t)
	c := startCloser(t, "DATABASE_URL="+pg.URL, "REDIS_ADDR="+testenv.RedisAddr(), "REDIS_KEY_PREFIX="+rd.Prefix)
	c.mustWaitThrough(t, "while Postgres was in recovery", func() { pg.Promote(t) },
		"postgres not ready at start: retrying", "57P03")
}

// testMigrateWaitsForPostgresToRecover: `orderpipe migrate` (and make run's
// own database creation, which shares prepareDatabase) started while
// PostgreSQL is still in recovery waits for it, then creates and migrates
// the database, instead of failing at once on 57P03.
func testMigrateWaitsForPostgresToRecover(t *testing.T, _ engine) {
	t.Parallel()
	pg := testenv.MustPostgresStandby(t)
	url := strings.Replace(pg.URL, "/postgres?", "/orderpipe_migrate?", 1)
	if url == pg.URL {
		t.Fatalf("cannot name another database in %s", pg.URL)
	}
	m := startBinary(t, "migrate", "DATABASE_URL="+url)
	m.mustStayUp(t, 1500*time.Millisecond, "while Postgres was in recovery")
	pg.Promote(t)
	m.mustSucceedWithin(t, 30*time.Second, "after the promotion")
	m.mustHaveLogged(t, "postgres not ready at start: retrying", "57P03", "migrated")
}

// testTopicsWaitsForAStartingBroker runs the production binary's `topics`
// against an address where no broker listens yet, starts one there 1.5 s
// later, and checks the command waited (one warning) and then created the
// three topics with the partitions asked for.
func testTopicsWaitsForAStartingBroker(t *testing.T, _ engine) {
	t.Parallel()
	addr := testenv.FreeAddr(t) // the broker listens there 1.5 s later
	_, portText, _ := net.SplitHostPort(addr)
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, "topics", "KAFKA_BROKERS="+addr, "KAFKA_PARTITIONS=3", "KAFKA_REPLICATION_FACTOR=1")
	p.mustStayUp(t, 1500*time.Millisecond, "while no broker listened")
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		t.Fatalf("starting the broker on %s: %v", addr, err)
	}
	t.Cleanup(broker.Close)
	p.mustSucceedWithin(t, 30*time.Second, "after the broker started")
	p.mustHaveLogged(t, "kafka not ready at start: retrying", "connection refused", "topics ready")
	conn, err := kafka.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, topic := range []string{"orders.requested", "orders.requested.dlq", "orders.status"} {
		parts, err := conn.ReadPartitions(topic)
		if err != nil || len(parts) != 3 {
			t.Errorf("topic %s: %d partitions (%v), want 3", topic, len(parts), err)
		}
	}
}

// binaryProcess is one command of the production binary, run by a test.
type binaryProcess struct {
	name    string
	cmd     *exec.Cmd
	out     *bytes.Buffer
	done    chan error
	metrics string
}

// startCloser starts the closer with env (and a free METRICS_ADDR); killed
// at cleanup unless it stopped.
func startCloser(t *testing.T, env ...string) *binaryProcess {
	t.Helper()
	metrics := freeAddr(t)
	c := startBinary(t, "closer", append(env, "METRICS_ADDR="+metrics)...)
	c.metrics = metrics
	return c
}

// startBinary starts `orderpipe <command>` with env; killed at cleanup
// unless it exited.
func startBinary(t *testing.T, command string, env ...string) *binaryProcess {
	t.Helper()
	p := &binaryProcess{name: command, out: new(bytes.Buffer), done: make(chan error, 1)}
	p.cmd = exec.Command(mustBinary(t), command)
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.cmd.Process.Kill() }) //nolint:errcheck // gone already unless the test failed
	return p
}

// mustSucceedWithin fails the test unless the process exits 0 within d
// (of the moment named by after).
func (p *binaryProcess) mustSucceedWithin(t *testing.T, d time.Duration, after string) {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", p.name, after, err, p.out.String())
		}
	case <-time.After(d):
		t.Fatalf("%s still running %s %s:\n%s", p.name, d, after, p.out.String())
	}
}

// mustStayUp fails the test if the process exits within d.
func (p *binaryProcess) mustStayUp(t *testing.T, d time.Duration, while string) {
	t.Helper()
	select {
	case err := <-p.done:
		t.Fatalf("%s exited %s: %v\n%s", p.name, while, err, p.out.String())
	case <-time.After(d):
	}
}

// mustHaveLogged fails the test for each of logged its output lacks.
func (p *binaryProcess) mustHaveLogged(t *testing.T, logged ...string) {
	t.Helper()
	for _, what := range logged {
		if !strings.Contains(p.out.String(), what) {
			t.Errorf("log does not say %q:\n%s", what, p.out.String())
		}
	}
}

// mustWaitThrough wants the closer to stay up (1.5 s) while a store keeps
// it waiting, then calls heal and wants it to serve and stop
// (mustServeAndStop).
func (c *binaryProcess) mustWaitThrough(t *testing.T, while string, heal func(), logged ...string) {
	t.Helper()
	c.mustStayUp(t, 1500*time.Millisecond, while)
	heal()
	c.mustServeAndStop(t, logged...)
}

// mustServeAndStop waits (20 s at most) for the closer's /healthz to answer
// 200, stops it with SIGTERM, and checks it exited cleanly and logged each
// of logged.
func (c *binaryProcess) mustServeAndStop(t *testing.T, logged ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-c.done:
			t.Fatalf("closer exited before serving: %v\n%s", err, c.out.String())
		default:
		}
		res, err := http.Get("http://" + c.metrics + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("closer not serving 20 s after its stores came back: %v\n%s", err, c.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.mustStop(t)
	c.mustHaveLogged(t, logged...)
}

// mustAnswerOK waits (a minute at most) for url to answer 200 while the
// process runs, and returns the answer's body.
func (p *binaryProcess) mustAnswerOK(t *testing.T, url string) string {
	t.Helper()
	var body string
	testenv.WaitFor(t, time.Minute, p.name+"'s "+url, func() bool {
		select {
		case err := <-p.done:
			t.Fatalf("%s exited: %v\n%s", p.name, err, p.out.String())
		default:
		}
		res, err := http.Get(url)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		body = string(b)
		return res.StatusCode == http.StatusOK
	})
	return body
}

// mustStop stops the process with SIGTERM and fails the test unless it
// exits cleanly.
func (p *binaryProcess) mustStop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it has exited already if this fails; done says how
	if err := <-p.done; err != nil {
		t.Errorf("%s after SIGTERM: %v\n%s", p.name, err, p.out.String())
	}
}
