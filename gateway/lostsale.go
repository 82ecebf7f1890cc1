package gateway

import (
	"context"
	"sync"
	"time"

	"orderpipe/pkg/stock"
)

// A reserve that finds no sale in Redis (or finds Redis's clock outside its
// window) is NOT_ON_SALE only if Postgres agrees. If the item was preheated
// and its sale window holds, Redis lost the sale's keys (a restart without
// persistence, a failover to a replica that had none of them), or a preheat
// stopped after Postgres recorded the item preheated and before it wrote
// the sale: the answer is 503 with nothing reserved, so the client retries
// with the same requestId once `orderpipe reconciler --fix` (or a new
// preheat) has put the sale back, instead of being told for good that the
// sale it bought from a moment ago does not exist.

// saleMemory is how long Postgres's answer about an item is reused, so a
// flood of requests for an item Redis lacks costs Postgres one query per
// item and period.
const saleMemory = time.Second

// saleMemoryMax bounds the remembered items (random item ids cannot grow it
// without bound): past it, everything is forgotten.
const saleMemoryMax = 4096

type saleAnswer struct {
	onSale bool
	err    error
	at     time.Time
}

type saleMemo struct {
	mu      sync.Mutex
	answers map[stock.Item]saleAnswer
}

// saleLost reports whether Postgres says item is on sale now (so its
// missing Redis keys were lost, or, with outsideWindow, Redis's clock
// disagrees with the database's about the window); an error means
// Postgres could not tell.
func (s *Server) saleLost(ctx context.Context, item stock.Item, outsideWindow bool) (bool, error) {
	if s.deps.Orders == nil {
		return false, nil
	}
	now := time.Now()
	s.sales.mu.Lock()
	a, ok := s.sales.answers[item]
	s.sales.mu.Unlock()
	if ok && now.Sub(a.at) < saleMemory {
		return a.onSale, a.err
	}
	a = saleAnswer{at: now}
	a.err = s.inPostgres(ctx, func(ctx context.Context) error {
		var err error
		a.onSale, err = s.deps.Orders.OnSaleNow(ctx, item.ActivityID, item.ItemID)
		return err
	})
	switch {
	case a.err != nil:
		s.deps.Log.ErrorContext(ctx, "no sale in Redis, and Postgres cannot tell whether there should be: answering 503",
			"activity_id", item.ActivityID, "item_id", item.ItemID, "err", a.err)
	case a.onSale && outsideWindow:
		s.deps.Log.ErrorContext(ctx, "sale outside its window by Redis's clock but inside it by the database's: answering 503; check the clocks (NTP) of Redis and Postgres",
			"activity_id", item.ActivityID, "item_id", item.ItemID)
	case a.onSale:
		s.deps.Log.ErrorContext(ctx, "sale missing in Redis but on sale in Postgres (Redis lost its keys, or a preheat stopped before putting it on sale): answering 503 until `orderpipe reconciler --once --fix` or a new preheat restores it",
			"activity_id", item.ActivityID, "item_id", item.ItemID)
	}
	s.sales.mu.Lock()
	if s.sales.answers == nil || len(s.sales.answers) >= saleMemoryMax {
		s.sales.answers = map[stock.Item]saleAnswer{}
	}
	s.sales.answers[item] = a
	s.sales.mu.Unlock()
	return a.onSale, a.err
}
