package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// syncBuffer is a log sink the pipeline's goroutines write to at once.
type syncBuffer struct{ testenv.SyncBuffer }

// lines are the JSON log lines written so far at level WARN or ERROR.
func (b *syncBuffer) warnings(t *testing.T) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec struct{ Level string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("a log line that is not JSON: %q", sc.Text())
		}
		if rec.Level == "WARN" || rec.Level == "ERROR" {
			out = append(out, sc.Text())
		}
	}
	return out
}

// testHealthyPipelineLogsNoWarnings: with every part healthy, an idle
// pipeline and one under a burst on one hot item — the other partitions
// carrying nothing, as in a flash sale — write no WARN or ERROR line. A
// warning is for an operator to act on; idle partitions are normal. Both
// shapes: the parts on the tests' broker (a real cluster in make
// test-kafka), and `orderpipe all` as make run starts it, its clients
// reaching its embedded broker through memory.
func testHealthyPipelineLogsNoWarnings(t *testing.T, e engine) {
	t.Run("Parts", func(t *testing.T) {
		var logs syncBuffer
		p := mustPipelineLogging(t, e, components{"gateway", "worker", "closer"}, func(c *config) { c.Kafka.Partitions = 8 }, &logs)
		quietThroughABurst(t, p, &logs, nil)
	})
	t.Run("MakeRun", func(t *testing.T) {
		if !e.inProcess {
			t.Skip("`all` with its embedded broker is the kfake engine: make e2e runs it")
		}
		var logs syncBuffer
		embed, addr := withEmbeddedBroker(t)
		p := mustPipelineLogging(t, e, components{"all"}, func(c *config) {
			embed(c)
			c.Kafka.Partitions = 8
		}, &logs)
		quietThroughABurst(t, p, &logs, func() { p.Cfg.Kafka.Brokers = []string{addr} })
	})
}

// quietThroughABurst sells to 3000 buyers on p, idle before and after, and
// fails on any WARN or ERROR line in logs; readTopics, when set, lets the
// invariant check reach the topics.
func quietThroughABurst(t *testing.T, p *pipeline, logs *syncBuffer, readTopics func()) {
	p.mustSale(t, 1, 1, map[int64]int64{10: 100000})
	time.Sleep(3 * time.Second) // idle: every partition's fetch waits out the broker's wait

	const buyers, clients = 3000, 32
	next := make(chan int64)
	go func() {
		for u := int64(1); u <= buyers; u++ {
			next <- u
		}
		close(next)
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := map[int]int{}
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range next {
				r := p.order(t, orderBody{RequestID: fmt.Sprintf("quiet-%d", u), UserID: u, ActivityID: 1, ItemID: 10, Quantity: 1})
				if r.Status != http.StatusAccepted {
					mu.Lock()
					bad[r.Status]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("a healthy pipeline answered other than 202: %v", bad)
	}
	it := stock.Item{ActivityID: 1, ItemID: 10}
	if readTopics != nil {
		readTopics()
	}
	p.waitDrained(t, it)
	time.Sleep(3 * time.Second) // idle again after the burst
	if w := logs.warnings(t); len(w) > 0 {
		n := min(len(w), 10)
		t.Errorf("a healthy pipeline logged %d WARN/ERROR lines; the first %d:\n%s", len(w), n, strings.Join(w[:n], "\n"))
	}
	p.assertInvariants(t, it)
}
