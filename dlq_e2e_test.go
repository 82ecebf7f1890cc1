package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/gateway/client"
	"orderpipe/pkg/event"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
	"orderpipe/worker/dlq"
)

// dlqMaxValue is the worker's cut of a dead letter's value (worker.MaxDeadLetterValue).
const dlqMaxValue = 64 << 10

// dlqRun runs `orderpipe dlq args...` in process: exit code, stdout, stderr.
func dlqRun(tb testing.TB, cfg config, args ...string) (int, string, string) {
	tb.Helper()
	var out, errOut bytes.Buffer
	err := runDLQ(context.Background(), cfg, args, &out, &errOut)
	var code setting.ExitCode
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &code):
		return int(code), out.String(), errOut.String()
	}
	tb.Fatalf("dlq %v: %v", args, err)
	return -1, "", ""
}

type dlqList struct {
	Topic   string       `json:"topic"`
	Letters []dlq.Letter `json:"letters"`
}

type dlqReplayOut struct {
	Topic   string       `json:"topic"`
	To      string       `json:"to"`
	Results []dlq.Result `json:"results"`
	Error   string       `json:"error"`
}

func mustDLQList(tb testing.TB, cfg config) dlqList {
	tb.Helper()
	code, out, errOut := dlqRun(tb, cfg, "list", "--json", "--limit", "0")
	var l dlqList
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
		tb.Fatalf("dlq list: exit %d\n%s\n%s", code, out, errOut)
	}
	return l
}

func mustDLQReplay(tb testing.TB, cfg config, wantCode int, args ...string) dlqReplayOut {
	tb.Helper()
	code, out, errOut := dlqRun(tb, cfg, append([]string{"replay", "--json"}, args...)...)
	var r dlqReplayOut
	if code != wantCode || json.Unmarshal([]byte(out), &r) != nil {
		tb.Fatalf("dlq replay %v: exit %d, want %d\n%s\n%s", args, code, wantCode, out, errOut)
	}
	return r
}

// replaysOnOrderTopic counts the events on the order topic that replay the
// dead letter at pos.
func replaysOnOrderTopic(tb testing.TB, cfg config, pos dlq.Position) int {
	tb.Helper()
	ctx := context.Background()
	r := dlq.Reader{Client: &kafka.Client{Addr: kafka.TCP(cfg.Kafka.Brokers...), Timeout: 10 * time.Second}, Topic: cfg.Kafka.Topic}
	parts, err := r.Partitions(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	want := fmt.Sprintf("%s/%d/%d", cfg.Kafka.DLQTopic, pos.Partition, pos.Offset)
	n := 0
	if err := r.Scan(ctx, parts, func(l dlq.Letter) error {
		for _, h := range l.Headers {
			if h.Key == dlq.HeaderReplayOf && h.Value == want {
				n++
			}
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return n
}

// testDLQListShowReplay is `orderpipe dlq` end to end on a running pipeline
// (kfake, real Postgres and Redis): the worker dead-letters poison messages;
// list and show give their error, source partition and offset, size and
// truncation; a dead letter that is valid now (dead-lettered by a worker
// whose decoder had a bug, since fixed) is replayed once — the worker turns it
// into an order — and never again, however often or concurrently replay
// runs; letters the schema still refuses are refused (exit 1), as are unknown
// positions; a Postgres that cannot be reached is exit 2.
func testDLQListShowReplay(t *testing.T, e engine) {
	t.Parallel()
	// REDRIVE_AFTER long: only the replay may publish the stranded reservation.
	p := mustPipeline(t, e, both, func(c *config) { c.Worker.RedriveAfter = time.Hour })
	it := stock.Item{ActivityID: 3, ItemID: 30}
	p.mustSale(t, 3, 1, map[int64]int64{30: 5})
	ctx := context.Background()

	// Nothing yet.
	if l := mustDLQList(t, p.Cfg); l.Topic != p.Cfg.Kafka.DLQTopic || len(l.Letters) != 0 {
		t.Fatalf("empty dead-letter topic listed %+v", l)
	}

	// Poison on the order topic: garbage, an event the schema refuses
	// (quantity 0), and one over the dead letter's 64 KiB.
	w := &kafka.Writer{Addr: kafka.TCP(p.Cfg.Kafka.Brokers...), Topic: p.Cfg.Kafka.Topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	big := `{"requestId":"big","pad":"` + strings.Repeat("x", 70<<10) + `"}`
	poison := []kafka.Message{
		{Key: []byte("3:30"), Value: []byte("not json at all")},
		{Key: []byte("3:30"), Value: []byte(`{"requestId":"zero-q","orderNo":"3-30-zz","userId":1,"activityId":3,"itemId":30,"quantity":0,"reservedAt":"2026-11-29T10:00:00Z"}`)},
		{Key: []byte("3:30"), Value: []byte(big)},
	}
	mustWrite(t, ctx, w, poison...)
	var list dlqList
	testenv.WaitFor(t, 30*time.Second, "three dead letters", func() bool {
		list = mustDLQList(t, p.Cfg)
		return len(list.Letters) == 3
	})
	byReq := map[string]dlq.Letter{}
	for _, l := range list.Letters {
		if l.Error == "" || l.SourcePartition < 0 || l.SourceOffset < 0 || l.Invalid == "" || l.Replay != nil {
			t.Errorf("dead letter %s: error %q, source %d:%d, invalid %q, replay %v: want its error, source, still invalid, not replayed",
				l.Position, l.Error, l.SourcePartition, l.SourceOffset, l.Invalid, l.Replay)
		}
		switch {
		case l.Truncated:
			byReq["big"] = l // cut, it names nothing
		case l.RequestID == "":
			byReq["garbage"] = l
		default:
			byReq[l.RequestID] = l
		}
	}
	if l, ok := byReq["big"]; !ok || l.OriginalSize != len(big) || l.OriginalSize <= dlqMaxValue {
		t.Errorf("the oversized dead letter: found %v, original size %d (want %d)", ok, l.OriginalSize, len(big))
	}
	if l := byReq["zero-q"]; l.OrderNo != "3-30-zz" || !strings.Contains(l.Error, "quantity") || l.OriginalSize != len(poison[1].Value) {
		t.Errorf("the schema-refused dead letter %s: order %q, error %q", l.Position, l.OrderNo, l.Error)
	}
	if l, ok := byReq["garbage"]; !ok || l.OriginalSize != len(poison[0].Value) {
		t.Errorf("the garbage dead letter: found %v, size %d", ok, l.OriginalSize)
	}

	// The source headers point at the poison message on the order topic.
	zero := byReq["zero-q"]
	src, err := dlq.Reader{Client: &kafka.Client{Addr: kafka.TCP(p.Cfg.Kafka.Brokers...)}, Topic: p.Cfg.Kafka.Topic}.
		Read(ctx, dlq.Position{Partition: zero.SourcePartition, Offset: zero.SourceOffset})
	if err != nil || !bytes.Equal(src.Value, poison[1].Value) {
		t.Errorf("source %d:%d of the order topic holds %q (%v), want the poison message", zero.SourcePartition, zero.SourceOffset, src.Value, err)
	}

	// show: text and JSON.
	code, out, _ := dlqRun(t, p.Cfg, "show", zero.Position.String())
	for _, want := range []string{"error:", "quantity", fmt.Sprintf("partition:offset %d:%d", zero.SourcePartition, zero.SourceOffset),
		"still invalid", "replayed:    no", "zero-q", "source-offset:"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("dlq show %s: exit %d, output lacks %q:\n%s", zero.Position, code, want, out)
		}
	}
	code, out, _ = dlqRun(t, p.Cfg, "show", zero.Position.String(), "--json")
	var shown struct {
		dlq.Letter
		Value   string       `json:"value"`
		Headers []dlq.Header `json:"headers"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.Value != string(poison[1].Value) || len(shown.Headers) < 4 ||
		shown.SourceOffset != zero.SourceOffset {
		t.Errorf("dlq show --json: exit %d\n%s", code, out)
	}
	for _, at := range []string{"0:999999", "99:0"} { // past the log's end; a partition the topic lacks
		if code, _, errOut := dlqRun(t, p.Cfg, "show", at); code != 1 || !strings.Contains(errOut, "no dead letter") {
			t.Errorf("dlq show %s: exit %d, %s, want 1 and no dead letter", at, code, errOut)
		}
	}

	// Refused: the schema still refuses them; nothing is published.
	r := mustDLQReplay(t, p.Cfg, 1, zero.Position.String(), byReq["big"].Position.String())
	if len(r.Results) != 2 || r.Results[0].Outcome != dlq.StillInvalid || r.Results[1].Outcome != dlq.StillInvalid ||
		!strings.Contains(r.Results[1].Reason, "truncated") {
		t.Errorf("replay of invalid letters: %+v", r)
	}
	if r := mustDLQReplay(t, p.Cfg, 1, "0:999999"); len(r.Results) != 1 || r.Results[0].Outcome != dlq.NotFound {
		t.Errorf("replay of an empty position: %+v", r)
	}

	// A reservation whose event a worker with a decoder bug dead-lettered
	// (and, its journal entry failing the same decoder, did not release):
	// reserved in Redis, its event only on the dead-letter topic.
	dw := &kafka.Writer{Addr: kafka.TCP(p.Cfg.Kafka.Brokers...), Topic: p.Cfg.Kafka.DLQTopic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer dw.Close()
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	stranded := func(rid string, user int64) (event.OrderRequested, []byte) {
		now := time.Now()
		ev := event.OrderRequested{RequestID: rid, OrderNo: fmt.Sprintf("3-30-%x", now.UnixNano()), UserID: user, ActivityID: 3, ItemID: 30,
			Quantity: 1, ReservedAt: now.UTC().Truncate(time.Microsecond)}
		value := ev.Marshal()
		if res, err := p.Stock.Reserve(ctx, stock.Reservation{Item: it, RequestID: ev.RequestID, OrderNo: ev.OrderNo, UserID: ev.UserID,
			Quantity: 1, Fingerprint: stock.Fingerprint(ev.UserID, 3, 30, 1), Event: value}); err != nil || res.Outcome != stock.Reserved {
			t.Fatalf("reserving: %+v %v", res, err)
		}
		mustWrite(t, ctx, dw, kafka.Message{Key: []byte(ev.Key()), Value: value, Headers: []kafka.Header{
			{Key: event.HeaderSchema, Value: []byte(event.SchemaV1)}, {Key: "traceparent", Value: []byte(tp)},
			{Key: event.HeaderError, Value: []byte("schema: reservedAt: a decoder bug")},
			{Key: event.HeaderSourcePartition, Value: []byte("1")}, {Key: event.HeaderSourceOffset, Value: []byte(fmt.Sprint(12345 + user))},
			{Key: event.HeaderOriginalSize, Value: []byte(fmt.Sprint(len(value)))},
			{Key: event.HeaderSignature, Value: []byte(event.Signature(value))}, // the gateway's, kept
		}})
		p.mu.Lock()
		p.accepted[ev.OrderNo] = ev.RequestID // checked by assertInvariants (I4)
		p.mu.Unlock()
		return ev, value
	}
	p.mu.Lock()
	p.accepted = map[string]string{}
	p.mu.Unlock()
	ev, value := stranded("fixed-1", 77)
	list = mustDLQList(t, p.Cfg)
	var fixed dlq.Letter
	for _, l := range list.Letters {
		if l.RequestID == "fixed-1" {
			fixed = l
		}
	}
	if fixed.Invalid != "" || fixed.SourcePartition != 1 || fixed.SourceOffset != 12345+77 || len(list.Letters) != 4 {
		t.Fatalf("the fixed letter: %+v (of %d)", fixed, len(list.Letters))
	}
	code, out, _ = dlqRun(t, p.Cfg, "list")
	if code != 0 || !strings.Contains(out, "4 dead letter(s)") || !strings.Contains(out, "fixed-1") || !strings.Contains(out, "1:12422") {
		t.Errorf("dlq list (text): exit %d\n%s", code, out)
	}

	// Replay: published once, and the worker makes it an order.
	r = mustDLQReplay(t, p.Cfg, 0, fixed.Position.String())
	if len(r.Results) != 1 || r.Results[0].Outcome != dlq.Replayed || r.Results[0].OrderNo != ev.OrderNo || r.To != p.Cfg.Kafka.Topic {
		t.Fatalf("replay: %+v", r)
	}
	p.waitStatus(t, ev.OrderNo, client.StatusUnpaid) // the replayed event became an order
	p.assertSettled(t, it, 4, "one replayed order of 5")
	// The replay carried the trace context and says what it replays.
	var replayed dlq.Letter
	rr := dlq.Reader{Client: &kafka.Client{Addr: kafka.TCP(p.Cfg.Kafka.Brokers...)}, Topic: p.Cfg.Kafka.Topic}
	parts, err := rr.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rr.Scan(ctx, parts, func(l dlq.Letter) error {
		if l.RequestID == "fixed-1" {
			replayed = l
		}
		return nil
	})
	hdr := map[string]string{}
	for _, h := range replayed.Headers {
		hdr[h.Key] = h.Value
	}
	if !bytes.Equal(replayed.Value, value) || string(replayed.Key) != ev.Key() || hdr["traceparent"] != tp ||
		hdr[event.HeaderRequestID] != "fixed-1" || hdr[event.HeaderSchema] != event.SchemaV1 || hdr[event.HeaderError] != "" {
		t.Errorf("replayed message: key %q headers %v value %q", replayed.Key, hdr, replayed.Value)
	}

	// Never twice: again by position, with --all, and several at once.
	if r := mustDLQReplay(t, p.Cfg, 0, fixed.Position.String()); len(r.Results) != 1 || r.Results[0].Outcome != dlq.AlreadyReplayed ||
		r.Results[0].ReplayedAt.IsZero() {
		t.Errorf("second replay: %+v", r)
	}
	// A second stranded event, replayed by three runs of --all at once: one
	// publishes it, the others find it replayed (or skip it); the invalid
	// letters are refused by each (exit 1).
	ev2, _ := stranded("fixed-2", 78)
	var fixed2 dlq.Letter
	for _, l := range mustDLQList(t, p.Cfg).Letters {
		if l.RequestID == "fixed-2" {
			fixed2 = l
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[dlq.Outcome]int{}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := mustDLQReplay(t, p.Cfg, 1, "--all")
			mu.Lock()
			defer mu.Unlock()
			for _, res := range r.Results {
				switch {
				case res.Outcome == dlq.StillInvalid:
				case res.Position == fixed2.Position && (res.Outcome == dlq.Replayed || res.Outcome == dlq.AlreadyReplayed):
					outcomes[res.Outcome]++
				default:
					t.Errorf("replay --all: %+v", res)
				}
			}
		}()
	}
	wg.Wait()
	if outcomes[dlq.Replayed] != 1 {
		t.Errorf("concurrent replays of one letter: %v, want exactly one REPLAYED", outcomes)
	}
	for _, l := range []dlq.Letter{fixed, fixed2} {
		if n := replaysOnOrderTopic(t, p.Cfg, l.Position); n != 1 {
			t.Errorf("dead letter %s published %d times, want once", l.Position, n)
		}
	}
	p.waitStatus(t, ev2.OrderNo, client.StatusUnpaid) // the second replayed event too
	p.assertSettled(t, it, 3, "two replayed orders of 5")
	code, out, _ = dlqRun(t, p.Cfg, "replay", fixed.Position.String(), fixed2.Position.String())
	if code != 0 || !strings.Contains(out, "ALREADY_REPLAYED") || !strings.Contains(out, "0 replayed, 2 already replayed, 0 still invalid, 0 not found") {
		t.Errorf("dlq replay (text) of replayed letters: exit %d\n%s", code, out)
	}
	t.Logf("dlq replay:\n%s", out)
	code, out, _ = dlqRun(t, p.Cfg, "list")
	t.Logf("dlq list:\n%s", out)
	code, out, _ = dlqRun(t, p.Cfg, "show", fixed.Position.String())
	t.Logf("dlq show:\n%s", out)
	if code != 0 || !strings.Contains(out, "replayed:    20") || !strings.Contains(out, "now:         valid") {
		t.Errorf("dlq show of the replayed letter: exit %d\n%s", code, out)
	}

	// Could not run: exit 2, for every subcommand.
	down := p.Cfg
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	down.Database.URL = "postgres://postgres@" + closed + "/orderpipe?sslmode=disable&connect_timeout=2"
	for _, args := range [][]string{{"list"}, {"show", "0:0"}, {"replay", "--all"}} {
		if code, _, errOut := dlqRun(t, down, args...); code != 2 || !strings.Contains(errOut, "could not run") {
			t.Errorf("dlq %v with Postgres unreachable: exit %d, %s", args, code, errOut)
		}
	}
	kafkaDown := p.Cfg
	kafkaDown.Kafka.Brokers = []string{closed}
	if code, _, errOut := dlqRun(t, kafkaDown, "show", "0:0"); code != 2 || !strings.Contains(errOut, "connection refused") {
		t.Errorf("dlq show with Kafka down: exit %d, %s, want 2 naming the refused connection", code, errOut)
	}
	noKafka := p.Cfg
	noKafka.Kafka.Brokers = nil
	if code, _, _ := dlqRun(t, noKafka, "list"); code != 2 {
		t.Errorf("dlq list without KAFKA_BROKERS: exit %d", code)
	}
}
