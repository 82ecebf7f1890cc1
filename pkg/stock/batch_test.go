package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/testenv"
)

// pipelineLog records every pipeline a client sends: the scripts' SHA1s.
type pipelineLog struct {
	mu   sync.Mutex
	shas [][]string
}

func (*pipelineLog) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (l *pipelineLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var shas []string
		for _, c := range cmds {
			if args := c.Args(); len(args) > 1 {
				shas = append(shas, fmt.Sprint(args[1]))
			}
		}
		l.mu.Lock()
		l.shas = append(l.shas, shas)
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (l *pipelineLog) sent() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.shas)
}

// largest is the size of the largest pipeline sent.
func (l *pipelineLog) largest() int {
	n := 0
	for _, p := range l.sent() {
		n = max(n, len(p))
	}
	return n
}

// logged is a Store on a Redis key prefix of its own with units of one
// item preheated, and the log of its pipelines.
func logged(t *testing.T, units int64) (testenv.Redis, *pipelineLog, *Store, Item) {
	t.Helper()
	r := testenv.MustRedis(t)
	log := &pipelineLog{}
	r.Client.AddHook(log)
	s, it := preheated(t, r.Client, r.Prefix, units)
	return r, log, s, it
}

func preheated(t *testing.T, rdb redis.UniversalClient, prefix string, units int64) (*Store, Item) {
	t.Helper()
	s := New(rdb, prefix)
	it := Item{ActivityID: 9, ItemID: 1}
	now := time.Now()
	if _, err := s.Preheat(context.Background(), Sale{Item: it, Stock: units, StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Cap: 1}); err != nil {
		t.Fatal(err)
	}
	return s, it
}

func reservation(it Item, n int) Reservation {
	id := fmt.Sprint(n)
	return Reservation{Item: it, RequestID: "r" + id, OrderNo: "o" + id, UserID: int64(n), Quantity: 1, Fingerprint: "fp" + id,
		Event: []byte(`{"requestId":"r` + id + `"}`)}
}

// TestConcurrentReservesShareOnePipeline: a crowd of concurrent reserves
// goes out in shared pipelines, and each script still decides on its own:
// exactly the stock is reserved, each once.
func TestConcurrentReservesShareOnePipeline(t *testing.T) {
	t.Parallel()
	r, log, s, it := logged(t, 500)
	var reserved, soldOut atomic.Int64
	var wg sync.WaitGroup
	for n := 1; n <= 2000; n++ {
		wg.Go(func() {
			res, err := s.Reserve(context.Background(), reservation(it, n))
			switch {
			case err != nil:
				t.Errorf("reserve %d: %v", n, err)
			case res.Outcome == Reserved:
				reserved.Add(1)
			case res.Outcome == SoldOut:
				soldOut.Add(1)
			default:
				t.Errorf("reserve %d: %s", n, res.Outcome)
			}
		})
	}
	wg.Wait()
	if reserved.Load() != 500 || soldOut.Load() != 1500 {
		t.Fatalf("reserved %d, sold out %d; want 500 and 1500", reserved.Load(), soldOut.Load())
	}
	k := s.keys(it)
	if left, _ := r.Client.Get(context.Background(), k.Stock).Int64(); left != 0 {
		t.Errorf("stock left %d", left)
	}
	if n, _ := r.Client.HLen(context.Background(), k.Journal).Result(); n != 500 {
		t.Errorf("journal holds %d entries, want 500", n)
	}
	if n := log.largest(); n < 2 {
		t.Errorf("2000 concurrent reserves never shared a pipeline (largest %d)", n)
	}
}

// TestConcurrentMarksSharePipelines: the gateway marks every accepted
// reservation published, one call each; concurrent calls go out in shared
// pipelines, and each still marks only its own record, and only while it
// holds that orderNo.
func TestConcurrentMarksSharePipelines(t *testing.T) {
	t.Parallel()
	r, log, s, it := logged(t, 1000)
	ctx := context.Background()
	for n := 1; n <= 1000; n++ {
		if res, err := s.Reserve(ctx, reservation(it, n)); err != nil || res.Outcome != Reserved {
			t.Fatalf("reserve %d: %v %v", n, res.Outcome, err)
		}
	}
	var wg sync.WaitGroup
	for n := 1; n <= 1000; n++ {
		wg.Go(func() {
			orderNo := "o" + fmt.Sprint(n)
			want := int64(1)
			if n%10 == 0 {
				orderNo, want = "another", 0 // a record that holds another orderNo is left alone
			}
			if got, err := s.MarkPublished(ctx, it, []Ref{{RequestID: "r" + fmt.Sprint(n), OrderNo: orderNo}}); err != nil || got != want {
				t.Errorf("mark %d: %d %v, want %d", n, got, err, want)
			}
		})
	}
	wg.Wait()
	k := s.keys(it)
	for n := 1; n <= 1000; n++ {
		pub, err := r.Client.HGet(ctx, k.Req("r"+fmt.Sprint(n)), "published").Result()
		if want := n%10 != 0; (err == nil && pub == "1") != want {
			t.Fatalf("record r%d published=%q (%v), want marked %v", n, pub, err, want)
		}
	}
	if n := log.largest(); n < 2 {
		t.Errorf("1000 concurrent marks never shared a pipeline (largest %d)", n)
	}
	if _, err := s.MarkPublished(cancelled(), it, []Ref{{RequestID: "r1", OrderNo: "o1"}}); !errors.Is(err, ErrNotSent) {
		t.Errorf("mark with a cancelled context: %v, want ErrNotSent", err)
	}
}

// TestMarkRidesWithTheNextReserve: a mark (a lazy call) waits, up to its
// linger, for the next reserve and goes out in the same pipeline; a mark
// that no reserve follows goes out alone once its linger is over.
func TestMarkRidesWithTheNextReserve(t *testing.T) {
	t.Parallel()
	r, log, s, it := logged(t, 10)
	ctx := context.Background()
	if res, err := s.Reserve(ctx, reservation(it, 1)); err != nil || res.Outcome != Reserved {
		t.Fatalf("reserve 1: %v %v", res.Outcome, err)
	}
	k := s.keys(it)
	// The first reserve's sender may still be finishing after its answer:
	// a call queued then leaves with it at once. Wait until it is gone.
	testenv.WaitFor(t, 10*time.Second, "the first reserve's sender to finish", func() bool {
		s.reserves.mu.Lock()
		defer s.reserves.mu.Unlock()
		return s.reserves.running == 0
	})
	marked := make(chan error, 1)
	go func() {
		// A linger no test outlasts: only the reserve below can send it.
		marked <- s.reserves.runLazy(ctx, publishScript, time.Hour, []string{k.Req("r1")}, "o1").Err()
	}()
	testenv.WaitFor(t, 10*time.Second, "the mark to be queued", func() bool { return len(s.queued()) > 0 })
	if res, err := s.Reserve(ctx, reservation(it, 2)); err != nil || res.Outcome != Reserved {
		t.Fatalf("reserve 2: %v %v", res.Outcome, err)
	}
	if err := <-marked; err != nil {
		t.Fatalf("mark: %v", err)
	}
	both := []string{publishScript.Hash(), reserveScript.Hash()}
	if got := log.sent(); !slices.ContainsFunc(got, func(p []string) bool { return slices.Equal(p, both) }) {
		t.Errorf("pipelines %v; want the mark and the reserve in one", got)
	}

	// Alone: sent after markLinger, within the context's time.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := s.MarkPublished(lctx, it, []Ref{{RequestID: "r2", OrderNo: "o2"}}); err != nil || n != 1 {
		t.Fatalf("a mark alone: %d %v; want it sent once its linger is over", n, err)
	}
	if pub := r.Client.HGet(ctx, k.Req("r2"), "published").Val(); pub != "1" {
		t.Errorf("r2 published=%q after its mark", pub)
	}
}

// queued is the calls waiting for a pipeline.
func (s *Store) queued() []*call {
	s.reserves.mu.Lock()
	defer s.reserves.mu.Unlock()
	return slices.Clone(s.reserves.queue)
}

func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestQueuedReserveIsNeverSentOnceItsContextEnds: with every pipeline busy,
// a call waits in the queue; if its context ends there it fails with
// ErrNotSent, and the pipelines that send the queue later skip it — so a
// 503 built on ErrNotSent really reserved nothing.
func TestQueuedReserveIsNeverSentOnceItsContextEnds(t *testing.T) {
	t.Parallel()
	r := testenv.MustRedis(t)
	s, it := preheated(t, r.Client, r.Prefix, 10)
	b := s.reserves
	b.mu.Lock()
	b.running = maxPipelines // as if every pipeline were in flight
	b.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := s.Reserve(ctx, reservation(it, 1))
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued reserve whose context ended: %v, want ErrNotSent", err)
	}
	b.mu.Lock()
	queued := len(b.queue)
	b.running = maxPipelines - 1 // one pipeline finished: the next call sends the queue
	b.mu.Unlock()
	if queued != 1 {
		t.Fatalf("%d calls queued, want the abandoned one", queued)
	}
	if res, err := s.Reserve(context.Background(), reservation(it, 2)); err != nil || res.Outcome != Reserved {
		t.Fatalf("next reserve: %v %v", res, err)
	}
	k := s.keys(it)
	if left, _ := r.Client.Get(context.Background(), k.Stock).Int64(); left != 9 {
		t.Errorf("stock %d after one reserve, want 9: the abandoned call was sent", left)
	}
	if n, _ := r.Client.Exists(context.Background(), k.Req("r1")).Result(); n != 0 {
		t.Error("the abandoned call left a dedup record")
	}
	// A context already over is refused before it is queued.
	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := s.Reserve(done, reservation(it, 3)); !errors.Is(err, ErrNotSent) {
		t.Errorf("reserve with a cancelled context: %v, want ErrNotSent", err)
	}
}

// TestReserveAfterScriptCacheFlush: a pipeline refused with NOSCRIPT (Redis
// restarted or flushed its scripts) is sent again with EVAL, once.
func TestReserveAfterScriptCacheFlush(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedisServer(t) // private: flushing scripts must not touch the shared Redis
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	s, it := preheated(t, rdb, "", 10)
	if res, err := s.Reserve(context.Background(), reservation(it, 1)); err != nil || res.Outcome != Reserved {
		t.Fatalf("first reserve: %v %v", res, err)
	}
	if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Reserve(context.Background(), reservation(it, 2)); err != nil || res.Outcome != Reserved || res.Remaining != 8 {
		t.Fatalf("reserve after SCRIPT FLUSH: %+v %v, want RESERVED with 8 left", res, err)
	}
	if res, err := s.Reserve(context.Background(), reservation(it, 2)); err != nil || res.Outcome != Replayed {
		t.Fatalf("retry after SCRIPT FLUSH: %+v %v, want REPLAYED (the script ran once)", res, err)
	}
}

// On Redis Cluster a pipeline is split over the nodes by slot and WAIT,
// which names no key, would go to any of them: refused, not half-done.
func TestWaitForReplicasRefusedOnCluster(t *testing.T) {
	t.Parallel()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	if err := New(cc, "").WaitForReplicas(ReplicaWait{Replicas: 1, Timeout: 50 * time.Millisecond}); !errors.Is(err, ErrWaitOnCluster) {
		t.Errorf("WaitForReplicas on a cluster client: %v, want ErrWaitOnCluster", err)
	}
	if err := New(cc, "").WaitForReplicas(ReplicaWait{}); err != nil {
		t.Errorf("no wait on a cluster client: %v", err)
	}
}
