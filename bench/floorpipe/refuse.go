package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The floor of a sold-out flood's refusal (-refuse): the trivial handler
// asks nobody, but the contract's refusal must ask Redis whether it knows
// the requestId (a retry gets its first answer on any replica) and whether
// the kill switch ended the sale (an ended sale answers NOT_ON_SALE). This
// is that one exchange and nothing else: read from the body (4 KiB at most)
// the three fields it needs, one EXISTS of the dedup record and one HEXISTS
// of the sale's tombstone, coalesced across concurrent requests into one
// pipeline at most every checkGap (the gateway's own spacing), then a fixed
// 409 SOLD_OUT. No verdict, limiter, breaker, metrics or tracing.

// checkGap is the least time between two pipelines, as the gateway's.
const checkGap = 300 * time.Microsecond

var (
	soldOut   = []byte(`{"error":{"code":"SOLD_OUT","message":"not enough stock"}}` + "\n")
	notOnSale = []byte(`{"error":{"code":"NOT_ON_SALE","message":"the sale has ended"}}` + "\n")
)

// check is one request's question and, once done is closed, its answer.
type check struct {
	key, sale            string
	known, ended, failed bool
	done                 chan struct{}
}

type refuser struct {
	rdb    *redis.Client
	prefix string
	asks   chan *check
	alone  bool // each request its own pipeline, not coalesced
}

// needles are the members field is asked for on every request.
var needles = map[string][]byte{"requestId": []byte(`"requestId":`), "activityId": []byte(`"activityId":`), "itemId": []byte(`"itemId":`)}

var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// field is the raw value of the top-level member name in a compact JSON
// object as the load tool sends it (a string keeps its quotes): the floor
// reads the three fields it needs and validates nothing else, the least
// any reading of the body can cost.
func field(body []byte, name string) []byte {
	needle, ok := needles[name]
	if !ok {
		needle = []byte(`"` + name + `":`)
	}
	i := bytes.Index(body, needle)
	if i < 0 {
		return nil
	}
	v := body[i+len(needle):]
	end := bytes.IndexAny(v, ",}")
	if len(v) > 0 && v[0] == '"' {
		end = bytes.IndexByte(v[1:], '"') + 2
	}
	if end <= 0 {
		return nil
	}
	return v[:end]
}

func (f *refuser) order(w http.ResponseWriter, r *http.Request) {
	buf := bufs.Get().(*[]byte)
	defer bufs.Put(buf)
	n, err := io.ReadFull(r.Body, (*buf)[:cap(*buf)])
	body := (*buf)[:n]
	rid, act, item := field(body, "requestId"), field(body, "activityId"), field(body, "itemId")
	if err != io.ErrUnexpectedEOF && err != io.EOF || len(rid) < 3 || rid[0] != '"' || len(act) == 0 || len(item) == 0 {
		http.Error(w, `{"error":{"code":"INVALID_REQUEST"}}`, http.StatusBadRequest)
		return
	}
	tag := "{a" + string(act) + ":i" + string(item) + "}"
	c := &check{key: f.prefix + "req:" + tag + ":" + string(rid[1:len(rid)-1]), sale: f.prefix + "sale:" + tag, done: make(chan struct{})}
	if f.alone {
		f.exec(r.Context(), []*check{c})
	} else {
		f.asks <- c
		<-c.done
	}
	answer := soldOut
	switch {
	case c.failed || c.known:
		// A known requestId would run the script: the floor decides only
		// new ones.
		http.Error(w, `{"error":{"code":"UNAVAILABLE"}}`, http.StatusServiceUnavailable)
		return
	case c.ended:
		answer = notOnSale
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(answer)))
	w.WriteHeader(http.StatusConflict)
	w.Write(answer) //nolint:errcheck
}

// send takes the checks that wait, one pipeline at a time, until ctx ends.
func (f *refuser) send(ctx context.Context) {
	var last time.Time
	for {
		var first *check
		select {
		case first = <-f.asks:
		case <-ctx.Done():
			return
		}
		if wait := checkGap - time.Since(last); wait > 0 {
			time.Sleep(wait)
		}
		batch := []*check{first}
		for more := true; more; {
			select {
			case c := <-f.asks:
				batch = append(batch, c)
			default:
				more = false
			}
		}
		last = time.Now()
		f.exec(ctx, batch)
	}
}

// exec sends one EXISTS of all the batch's dedup records and one HEXISTS
// per sale (the flood has one) in one pipeline and answers each check.
func (f *refuser) exec(ctx context.Context, batch []*check) {
	bySale := map[string][]*check{}
	for _, c := range batch {
		bySale[c.sale] = append(bySale[c.sale], c)
	}
	exists := make(map[string]*redis.IntCmd, len(bySale))
	ended := make(map[string]*redis.BoolCmd, len(bySale))
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sale, cs := range bySale {
			keys := make([]string, len(cs))
			for i, c := range cs {
				keys[i] = c.key
			}
			exists[sale] = p.Exists(ctx, keys...)
			ended[sale] = p.HExists(ctx, sale, "ended")
		}
		return nil
	})
	for sale, cs := range bySale {
		n, over := exists[sale].Val(), ended[sale].Val()
		for _, c := range cs {
			c.known, c.ended, c.failed = n > 0, over, err != nil
			close(c.done)
		}
	}
}

// runRefuse serves the refusal's floor on addr until ctx ends, with the
// trivial handler's server timeouts (they cost a deadline per request).
func runRefuse(ctx context.Context, addr, redisAddr, prefix string, alone bool) error {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	f := &refuser{rdb: rdb, prefix: prefix, asks: make(chan *check, 1024), alone: alone}
	go f.send(ctx)
	return serveOrders(ctx, addr, f.order, &http.Server{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second})
}
