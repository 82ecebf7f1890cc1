package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/closer"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
	"orderpipe/reconciler/locate"
)

// spans records every span the process ends while a test runs.
type spans struct{ rec *tracetest.SpanRecorder }

// mustRecordSpans installs an in-memory span recorder as the global tracer
// provider (always sampling) with the W3C propagator; both are restored at
// cleanup. Call it before mustPipeline: the gateway's HTTP middleware takes
// the propagator when it is built. The provider is the process's: a test
// that calls it stays serial (no t.Parallel), so no other test's spans land
// in its recorder.
func mustRecordSpans(tb testing.TB) spans {
	tb.Helper()
	rec := tracetest.NewSpanRecorder()
	mustInstallTracing(tb, telemetry.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	return spans{rec: rec}
}

// mustInstallTracing makes tp the global tracer provider, with the W3C
// propagator, until the test ends; then tp is shut down and the previous
// provider and propagator are back.
func mustInstallTracing(tb testing.TB, tp *sdktrace.TracerProvider) {
	tb.Helper()
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	telemetry.SetPropagator()
	tb.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
}

// where lists the ended spans that match.
func (s spans) where(match func(sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.rec.Ended() {
		if match(sp) {
			out = append(out, sp)
		}
	}
	return out
}

// waitOne waits for exactly one ended span that matches and returns it.
func (s spans) waitOne(tb testing.TB, what string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	tb.Helper()
	var got []sdktrace.ReadOnlySpan
	testenv.WaitFor(tb, 20*time.Second, what, func() bool {
		got = s.where(match)
		return len(got) > 0
	})
	if len(got) != 1 {
		tb.Fatalf("%d spans %s, want 1: %s", len(got), what, names(got))
	}
	return got[0]
}

func names(ss []sdktrace.ReadOnlySpan) string {
	var n []string
	for _, s := range ss {
		n = append(n, s.Name())
	}
	return strings.Join(n, ", ")
}

func attr(sp sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range sp.Attributes() {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func named(name string, kind trace.SpanKind, rid string) func(sdktrace.ReadOnlySpan) bool {
	return func(sp sdktrace.ReadOnlySpan) bool {
		return sp.Name() == name && sp.SpanKind() == kind && attr(sp, telemetry.AttrRequestID) == rid
	}
}

func hasLink(sp sdktrace.ReadOnlySpan, sc trace.SpanContext) bool {
	for _, l := range sp.Links() {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
			return true
		}
	}
	return false
}

// testTraceFollowsOneRequest: one order request is one trace from the
// gateway's server span through the Redis script and the Kafka send to the
// worker's process span, every span of it carrying the request id; the
// batch span links to the message. A dead-lettered message's span records
// the error.
func testTraceFollowsOneRequest(t *testing.T, e engine) {
	rec := mustRecordSpans(t)
	p := mustPipeline(t, e, both, nil)
	p.mustSale(t, 1, 1, map[int64]int64{10: 5})
	const rid = "trace-1"
	r := p.mustAccept(t, orderBody{RequestID: rid, UserID: 7, ActivityID: 1, ItemID: 10, Quantity: 1})
	orderNo := r.Str("orderNo")

	process := rec.waitOne(t, "the worker's process span", named("process "+p.Cfg.Kafka.Topic, trace.SpanKindConsumer, rid))
	server := rec.waitOne(t, "the gateway's server span", named("POST /v1/orders", trace.SpanKindServer, rid))
	send := rec.waitOne(t, "the gateway's send span", named("send "+p.Cfg.Kafka.Topic, trace.SpanKindProducer, rid))
	tid := server.SpanContext().TraceID()

	if send.SpanContext().TraceID() != tid || send.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Errorf("send span is not a child of the server span")
	}
	if process.SpanContext().TraceID() != tid || process.Parent().SpanID() != send.SpanContext().SpanID() || !process.Parent().IsRemote() {
		t.Errorf("process span (parent %s) is not a child of the send span %s", process.Parent().SpanID(), send.SpanContext().SpanID())
	}
	for sp, want := range map[sdktrace.ReadOnlySpan]map[string]string{
		send: {"messaging.system": "kafka", "messaging.destination.name": p.Cfg.Kafka.Topic, "messaging.operation.type": "send",
			"messaging.kafka.message.key": "1:10"},
		process: {"messaging.system": "kafka", "messaging.destination.name": p.Cfg.Kafka.Topic, "messaging.operation.type": "process",
			"messaging.kafka.message.key": "1:10", "messaging.consumer.group.name": p.Cfg.Worker.Group,
			"order.no": orderNo, "order.outcome": "CREATED"},
		server: {"http.route": "/v1/orders", "order.no": orderNo},
	} {
		for k, v := range want {
			if got := attr(sp, attribute.Key(k)); got != v {
				t.Errorf("%s: %s = %q, want %q", sp.Name(), k, got, v)
			}
		}
	}
	if attr(process, "messaging.destination.partition.id") == "" || attr(process, "messaging.kafka.offset") == "" ||
		attr(process, "messaging.destination.partition.id") != attr(send, "messaging.destination.partition.id") ||
		attr(process, "messaging.kafka.offset") != attr(send, "messaging.kafka.offset") {
		t.Errorf("send span (%v) and process span (%v) disagree on partition/offset", send.Attributes(), process.Attributes())
	}

	// The Redis script ran inside the request's trace.
	reserve := rec.where(func(sp sdktrace.ReadOnlySpan) bool {
		return sp.SpanContext().TraceID() == tid && strings.HasPrefix(sp.Name(), "redis eval") && sp.Parent().SpanID() == server.SpanContext().SpanID()
	})
	if len(reserve) == 0 { // evalsha, and eval after a NOSCRIPT
		t.Errorf("no redis script span under the server span")
	}
	// The batch span is linked from the message span and links to the message.
	batch := rec.where(func(sp sdktrace.ReadOnlySpan) bool { return hasLink(process, sp.SpanContext()) })
	if len(batch) != 1 || !hasLink(batch[0], send.SpanContext()) {
		t.Errorf("batch span %q does not link the message's context", names(batch))
	}
	// Every span of the trace is about this order.
	for _, sp := range rec.where(func(sp sdktrace.ReadOnlySpan) bool { return sp.SpanContext().TraceID() == tid }) {
		if attr(sp, telemetry.AttrRequestID) != rid {
			t.Errorf("span %s of the order's trace lacks order.request_id: %v", sp.Name(), sp.Attributes())
		}
	}

	// A poison message: its process span continues the producer's trace and
	// records the error.
	pctx, producer := otel.Tracer("test").Start(context.Background(), "test producer")
	bad := kafka.Message{Key: []byte("1:10"), Value: []byte(`{"requestId":"bad-1","orderNo":"x"}`),
		Headers: []kafka.Header{{Key: event.HeaderRequestID, Value: []byte("bad-1")}}}
	event.Inject(pctx, &bad)
	producer.End()
	w := event.NewWriter(event.WriterConfig{Brokers: p.Kafka.Brokers, Topic: p.Cfg.Kafka.Topic})
	defer w.Close()
	mustWrite(t, context.Background(), w, bad)
	dead := rec.waitOne(t, "the dead letter's process span", named("process "+p.Cfg.Kafka.Topic, trace.SpanKindConsumer, "bad-1"))
	if dead.SpanContext().TraceID() != producer.SpanContext().TraceID() {
		t.Errorf("dead letter's span is not in the producer's trace")
	}
	if dead.Status().Code != codes.Error || len(dead.Events()) == 0 || dead.Events()[0].Name != "exception" ||
		attr(dead, telemetry.AttrOutcome) != "DEAD_LETTERED" {
		t.Errorf("dead letter's span: status %v, events %v, attrs %v", dead.Status(), dead.Events(), dead.Attributes())
	}
}

// testTraceContinuesCallersTrace: a caller's traceparent header is the
// parent of the gateway's server span, and the worker's span joins the same
// trace; locate reports that trace id.
func testTraceContinuesCallersTrace(t *testing.T, e engine) {
	rec := mustRecordSpans(t)
	p := mustPipeline(t, e, both, nil)
	p.mustSale(t, 2, 1, map[int64]int64{20: 5})
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
		rid     = "caller-1"
	)
	r := p.do(t, http.MethodPost, "/v1/orders", "application/json",
		orderBody{RequestID: rid, UserID: 8, ActivityID: 2, ItemID: 20, Quantity: 1},
		"traceparent", "00-"+traceID+"-"+spanID+"-01")
	if r.Status != http.StatusAccepted {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	server := rec.waitOne(t, "the server span", named("POST /v1/orders", trace.SpanKindServer, rid))
	if server.SpanContext().TraceID().String() != traceID || server.Parent().SpanID().String() != spanID || !server.Parent().IsRemote() {
		t.Errorf("server span %s has parent %s, want the caller's %s/%s", server.SpanContext().TraceID(), server.Parent().SpanID(), traceID, spanID)
	}
	process := rec.waitOne(t, "the worker's process span", named("process "+p.Cfg.Kafka.Topic, trace.SpanKindConsumer, rid))
	if process.SpanContext().TraceID().String() != traceID {
		t.Errorf("worker span in trace %s, want %s", process.SpanContext().TraceID(), traceID)
	}
	rep := mustLocate(t, p, rid)
	if rep.TraceID != traceID || rep.Status != "UNPAID" && rep.Status != "PENDING" {
		t.Errorf("locate: trace %q status %s", rep.TraceID, rep.Status)
	}
}

// scrape reads the pipeline's /metrics into series → value.
func scrape(tb testing.TB, url string) map[string]float64 {
	tb.Helper()
	_, raw, err := get(tb, url+"/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			tb.Fatalf("metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// testMetricsMoveWhenOrdersFlow: /metrics has every series the contract
// names, and they move as orders are created, rejected and closed.
func testMetricsMoveWhenOrdersFlow(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "closer"}, func(c *config) {
		c.Closer.CloseAfter = 3 * time.Second
		c.Closer.Interval = 200 * time.Millisecond
	})
	p.mustSale(t, 3, 1, map[int64]int64{30: 5, 31: 5})
	before := scrape(t, p.URL)
	series := []string{
		`orderpipe_http_requests_total{code="202",route="POST /v1/orders"}`,
		`orderpipe_reserve_seconds_count`, `orderpipe_produce_seconds_count`, `orderpipe_produce_batch_messages_count`,
		`orderpipe_worker_batch_size_count`, `orderpipe_worker_consumer_lag_messages`, `orderpipe_orders_created_total`,
		`orderpipe_orders_rejected_total{reason="DB_STOCK_MISMATCH"}`, `orderpipe_orders_rejected_total{reason="DUPLICATE_LIVE_ORDER"}`,
		`orderpipe_worker_dlq_total`, `orderpipe_compensations_pending`, `orderpipe_compensations_applied_total`,
		`orderpipe_orders_closed_total`, `orderpipe_breaker_state{name="gateway-redis"}`, `orderpipe_breaker_state{name="gateway-kafka"}`,
		`orderpipe_breaker_state{name="worker-postgres"}`,
	}
	for _, s := range series[1:] {
		if _, ok := before[s]; !ok {
			t.Errorf("/metrics lacks %s", s)
		}
	}

	// Two orders; the second is refused by Postgres (its stock was taken
	// behind Redis's back) and given back.
	ordertest.SetStock(t, p.DB.Pool, 3, 31, 0)
	for i, item := range []int64{30, 31} {
		p.mustAccept(t, orderBody{RequestID: fmt.Sprintf("m-%d", i), UserID: 9, ActivityID: 3, ItemID: item, Quantity: 1})
	}
	var after map[string]float64
	testenv.WaitFor(t, 30*time.Second, "orders created, rejected and closed", func() bool {
		after = scrape(t, p.URL)
		return after[`orderpipe_orders_closed_total`] >= 1 && after[`orderpipe_compensations_applied_total`] >= 2
	})
	for s, want := range map[string]float64{
		series[0]: 2, `orderpipe_reserve_seconds_count`: 2, `orderpipe_produce_seconds_count`: 2,
		// One order after the other: a produce request each, of one event.
		`orderpipe_produce_batch_messages_count`: 2, `orderpipe_produce_batch_messages_sum`: 2,
		`orderpipe_orders_created_total`: 1, `orderpipe_orders_rejected_total{reason="DB_STOCK_MISMATCH"}`: 1,
		`orderpipe_orders_closed_total`: 1, `orderpipe_compensations_applied_total`: 2,
	} {
		if got := after[s] - before[s]; got != want {
			t.Errorf("%s moved by %v, want %v", s, got, want)
		}
	}
	if after[`orderpipe_worker_batch_size_count`] < 1 {
		t.Errorf("no batch observed")
	}
}

// mustLocate runs `orderpipe locate --json` and decodes the report.
func mustLocate(tb testing.TB, p *pipeline, args ...string) locate.Report {
	tb.Helper()
	var out bytes.Buffer
	err := runLocate(context.Background(), p.Cfg, append(args, "--json"), &out)
	var code setting.ExitCode
	if err != nil && !errors.As(err, &code) {
		tb.Fatalf("locate %v: %v", args, err)
	}
	var rep locate.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		tb.Fatalf("locate %v: %v: %s", args, err, out.Bytes())
	}
	if (rep.Status == locate.StatusUnknown) != (code == 1) {
		tb.Errorf("locate %v: status %s, exit %d", args, rep.Status, code)
	}
	return rep
}

// testLocate: `orderpipe locate` tells an unknown requestId, a reservation
// only in the journal, a created order with its trace, a rejection with its
// reason, and a closed order with its applied compensation.
func testLocate(t *testing.T, e engine) {
	mustRecordSpans(t)
	p := mustPipeline(t, e, both, func(c *config) { c.Worker.RedriveAfter = time.Hour })
	p.mustSale(t, 4, 2, map[int64]int64{40: 5, 41: 5})
	ctx := context.Background()
	wantStatus := func(rid, status string) {
		t.Helper()
		testenv.WaitFor(t, 20*time.Second, rid+" "+status, func() bool { return mustLocate(t, p, rid).Status == status })
	}

	// Closed: created, then closed by a closer pass.
	if r := p.order(t, orderBody{RequestID: "loc-closed", UserID: 1, ActivityID: 4, ItemID: 40, Quantity: 1}); r.Status != http.StatusAccepted {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	wantStatus("loc-closed", "UNPAID")
	c := closer.New(closer.Config{CloseAfter: time.Millisecond}, closer.Deps{Orders: p.Orders, Stock: p.Stock})
	if res, err := c.RunOnce(ctx); err != nil || res.Closed != 1 {
		t.Fatalf("closer: %+v %v", res, err)
	}
	// Created.
	r := p.mustAccept(t, orderBody{RequestID: "loc-created", UserID: 2, ActivityID: 4, ItemID: 40, Quantity: 2})
	wantStatus("loc-created", "UNPAID")
	// Rejected: Postgres has no stock left that Redis still sells.
	ordertest.SetStock(t, p.DB.Pool, 4, 41, 0)
	if r := p.order(t, orderBody{RequestID: "loc-rejected", UserID: 3, ActivityID: 4, ItemID: 41, Quantity: 1}); r.Status != http.StatusAccepted {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	wantStatus("loc-rejected", "REJECTED")
	// Pending: reserved in Redis by a gateway that died before producing.
	ev := event.OrderRequested{RequestID: "loc-pending", OrderNo: "4-40-pending", UserID: 4, ActivityID: 4, ItemID: 40, Quantity: 1,
		ReservedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if res, err := p.Stock.Reserve(ctx, stock.Reservation{Item: stock.Item{ActivityID: 4, ItemID: 40}, RequestID: ev.RequestID,
		OrderNo: ev.OrderNo, UserID: ev.UserID, Quantity: 1, Fingerprint: "fp", Event: ev.Marshal()}); err != nil || res.Outcome != stock.Reserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}

	unknown := mustLocate(t, p, "loc-unknown")
	if unknown.Status != locate.StatusUnknown || len(unknown.Redis) != 0 || unknown.Processed != nil || unknown.ItemsSearched != 2 {
		t.Errorf("unknown: %+v", unknown)
	}

	pending := mustLocate(t, p, "loc-pending")
	if pending.Status != "PENDING" || pending.OrderNo != ev.OrderNo || len(pending.Redis) != 1 || pending.Redis[0].Journal == nil ||
		pending.Redis[0].Dedup == nil || !pending.Redis[0].LimitHeld || pending.Processed != nil || pending.Timeline.ReservedAt == nil ||
		pending.Redis[0].Dedup.Published || pending.Redis[0].Dedup.Claimed || !strings.Contains(pending.Where, "being produced") {
		t.Errorf("pending, never produced: %+v", pending)
	}
	// Once Kafka acknowledged its event (the gateway's mark), locate says so.
	if n, err := p.Stock.MarkPublished(ctx, stock.Item{ActivityID: 4, ItemID: 40}, []stock.Ref{{RequestID: ev.RequestID, OrderNo: ev.OrderNo}}); err != nil || n != 1 {
		t.Fatalf("marking loc-pending published: %d %v", n, err)
	}
	if got := mustLocate(t, p, "loc-pending"); len(got.Redis) != 1 || got.Redis[0].Dedup == nil || !got.Redis[0].Dedup.Published ||
		!strings.Contains(got.Where, "in Kafka (acknowledged)") {
		t.Errorf("pending, in Kafka: %+v", got)
	}
	// Narrowed to the item, and to another item (where it is not).
	if got := mustLocate(t, p, "loc-pending", "--activity", "4", "--item", "40"); got.Status != "PENDING" || got.ItemsSearched != 1 {
		t.Errorf("pending on its item: %+v", got)
	}
	if got := mustLocate(t, p, "--activity", "4", "--item", "41", "loc-pending"); got.Status != locate.StatusUnknown {
		t.Errorf("pending on another item: %+v", got)
	}

	// The worker acks the journal entry right after its commit.
	testenv.WaitFor(t, 10*time.Second, "loc-created's journal entry acked", func() bool {
		rep := mustLocate(t, p, "loc-created")
		return len(rep.Redis) == 1 && rep.Redis[0].Journal == nil
	})
	created := mustLocate(t, p, "loc-created")
	if created.Status != "UNPAID" || created.OrderNo != r.Str("orderNo") || created.Quantity != 2 || created.Order == nil ||
		created.Processed == nil || created.Processed.Outcome != "CREATED" || created.Timeline.CreatedAt == nil ||
		len(created.Redis) != 1 || created.Redis[0].Journal != nil || !created.Redis[0].LimitHeld || len(created.TraceID) != 32 ||
		created.Redis[0].Dedup == nil || !created.Redis[0].Dedup.Published || !created.Redis[0].Dedup.Claimed {
		t.Errorf("created: %+v", created)
	}

	rejected := mustLocate(t, p, "loc-rejected")
	if rejected.Status != "REJECTED" || rejected.Reason != "DB_STOCK_MISMATCH" || len(rejected.Compensations) != 1 ||
		rejected.Order != nil {
		t.Errorf("rejected: %+v", rejected)
	}
	testenv.WaitFor(t, 10*time.Second, "the rejection's compensation applied", func() bool {
		rep := mustLocate(t, p, "loc-rejected")
		return len(rep.Compensations) == 1 && rep.Compensations[0].Status == "APPLIED"
	})

	closed := mustLocate(t, p, "loc-closed")
	if closed.Status != "CLOSED" || closed.Reason != "PAYMENT_TIMEOUT" || closed.Timeline.ClosedAt == nil || closed.Timeline.PaidAt != nil || len(closed.Compensations) != 1 ||
		closed.Compensations[0].Reason != "CLOSED_UNPAID" || closed.Compensations[0].Status != "APPLIED" ||
		len(closed.Redis) != 1 || closed.Redis[0].LimitHeld || !strings.HasPrefix(closed.Redis[0].Fate, "released:") {
		t.Errorf("closed: %+v", closed)
	}

	// Its orders.status events: committed with each change, pending until
	// a relay (none runs here) publishes them.
	if evs := closed.StatusEvents; len(evs) != 2 || evs[0].Version != 1 || evs[0].Status != "UNPAID" || evs[1].Version != 2 ||
		evs[1].Status != "CLOSED" || evs[1].Reason != "PAYMENT_TIMEOUT" || evs[1].State != "PENDING" {
		t.Errorf("closed's status events: %+v", evs)
	}
	p.assertStatusEvents(t, 4) // publishes them as a relay would, and checks I7
	if evs := mustLocate(t, p, "loc-closed").StatusEvents; len(evs) != 2 || evs[0].State != "PUBLISHED" || evs[1].State != "PUBLISHED" ||
		evs[1].PublishedAt == nil {
		t.Errorf("closed's status events once published: %+v", evs)
	}

	// The text block says the same for a human.
	var out bytes.Buffer
	if err := runLocate(ctx, p.Cfg, []string{"loc-rejected"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"status        REJECTED (DB_STOCK_MISMATCH)", "processed_requests: REJECTED DB_STOCK_MISMATCH",
		"APPLIED DB_STOCK_MISMATCH", "trace         ", "orders.status v1 REJECTED DB_STOCK_MISMATCH of "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := runLocate(ctx, p.Cfg, []string{"loc-unknown"}, &out); err == nil || !strings.Contains(out.String(), "UNKNOWN") {
		t.Errorf("unknown: err %v, report:\n%s", err, out.String())
	}
}
