package worker

import (
	"context"
	"encoding/json"
	"fmt"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// pointerKey is what a message names: a reservation of one item (bucket).
type pointerKey struct {
	it  stock.Item
	ref stock.Ref
}

// pointer is a reservation named by one or more messages of a batch.
type pointer struct {
	key  pointerKey
	msgs []int                 // every message of the batch that named it
	dead []int                 // those of msgs that were dead-lettered
	msg  *event.OrderRequested // the first valid message's event, if any
}

type decision int

const (
	decideNothing      decision = iota // an invalid message whose reservation is decided or unknown
	decideGhost                        // the gateway gave the reservation back
	decideInvalidEntry                 // the reservation's own entry is invalid: it can never become an order
	decideOrder                        // to be decided in Postgres
)

// decide says what becomes of a reservation its messages named, from what
// the claim found in the journal:
//   - the gateway aborted it: nothing (a ghost);
//   - the journal holds its entry: it is decided from that entry, whatever
//     the messages say; an entry that is itself invalid is released;
//   - the journal no longer holds it (acked, or lost with Redis): a valid
//     message whose orderNo names its own item is decided as it says
//     (Postgres's idempotency row makes a decided one a duplicate; Redis may
//     have lost an undecided one); any other message changes nothing.
func (w *Worker) decide(ctx context.Context, p *pointer, c stock.Claim) (order.Request, decision) {
	if c.Status == stock.ClaimReleased {
		return order.Request{}, decideGhost
	}
	held := c.Status == stock.ClaimOK
	if c.Entry != nil {
		ev, err := event.Decode(c.Entry)
		if err != nil || ev.RequestID != p.key.ref.RequestID || ev.OrderNo != p.key.ref.OrderNo ||
			ev.ActivityID != p.key.it.ActivityID || ev.ItemID != p.key.it.ItemID || ev.Bucket != p.key.it.Bucket {
			w.deps.Log.WarnContext(ctx, "the journal entry of a reservation is invalid; releasing it",
				"request_id", p.key.ref.RequestID, "order_no", p.key.ref.OrderNo, "err", err)
			return order.Request{}, decideInvalidEntry
		}
		if p.msg != nil && *p.msg != ev || len(p.dead) > 0 {
			w.deps.Log.WarnContext(ctx, "a message disagrees with its reservation's journal entry; deciding from the entry",
				"request_id", ev.RequestID, "order_no", ev.OrderNo)
		}
		return requestOf(ev, held), decideOrder
	}
	if p.msg == nil {
		return order.Request{}, decideNothing
	}
	// No journal entry to check the message against: at least it must be a
	// reservation the gateway could have made. Its orderNo names its item
	// (event.ParseOrderNo), so a copy moved to another item cannot become an
	// order there.
	if !p.msg.NamesItself() {
		w.deps.Log.WarnContext(ctx, "an event whose orderNo names another item; not the gateway's, changes nothing",
			"request_id", p.msg.RequestID, "order_no", p.msg.OrderNo, "activity_id", p.msg.ActivityID, "item_id", p.msg.ItemID)
		return order.Request{}, decideNothing
	}
	return requestOf(*p.msg, held), decideOrder
}

func requestOf(ev event.OrderRequested, held bool) order.Request {
	return order.Request{RequestID: ev.RequestID, OrderNo: ev.OrderNo, UserID: ev.UserID, ActivityID: ev.ActivityID,
		ItemID: ev.ItemID, Quantity: ev.Quantity, ReservedAt: ev.ReservedAt, Bucket: ev.Bucket, Held: held}
}

// invalidEntry is a claimed reservation whose journal entry is not a valid
// event: the worker can never make an order of it.
type invalidEntry struct {
	it    stock.Item
	ref   stock.Ref
	entry []byte
	ctx   context.Context
}

// releaseInvalid gives back reservations whose own journal entry is invalid.
// What is given back (the quantity, whose marker is freed) is read from that
// entry; an entry too broken to say it is left to the reconciler, which
// rebuilds Redis from Postgres.
func (w *Worker) releaseInvalid(invalid []invalidEntry) error {
	for _, v := range invalid {
		var e struct {
			UserID   int64 `json:"userId"`
			Quantity int   `json:"quantity"`
		}
		if err := json.Unmarshal(v.entry, &e); err != nil || e.UserID < 1 || e.Quantity < 1 || e.Quantity > 100 {
			w.deps.Log.WarnContext(v.ctx, "a journal entry too broken to release; left to the reconciler",
				"request_id", v.ref.RequestID, "order_no", v.ref.OrderNo)
			continue
		}
		if _, err := w.deps.Stock.Release(v.ctx, stock.Compensation, stock.Release{Item: v.it, Ref: v.ref, UserID: e.UserID, Quantity: e.Quantity}); err != nil {
			return fmt.Errorf("releasing a reservation with an invalid journal entry: %w", err)
		}
	}
	return nil
}
