package main

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// testKillSwitchEndsTheSale: POST /admin/v1/activities/{id}/end stops the
// sale on the next request (NOT_ON_SALE), records the end in Postgres as
// Redis has it (the reconciler sees no drift), is idempotent, and leaves the
// orders already accepted to go on: they are persisted and can be paid.
func testKillSwitchEndsTheSale(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	p.mustSale(t, 1, 1, map[int64]int64{10: 100, 11: 50})
	var accepted []string
	for u := int64(1); u <= 5; u++ {
		r := p.mustAccept(t, orderBody{RequestID: fmt.Sprintf("before-end-%d", u), UserID: u, ActivityID: 1, ItemID: 10, Quantity: 1})
		accepted = append(accepted, r.Str("orderNo"))
	}

	if r := p.do(t, http.MethodPost, "/admin/v1/activities/1/end", "", nil); r.Status != http.StatusUnauthorized {
		t.Errorf("end without the admin token: %d %v, want 401", r.Status, r.Body)
	}
	api, ctx := p.api(), contractCtx(t, "end")
	var ce *client.Error
	if _, err := api.EndActivity(ctx, 99); !errors.As(err, &ce) || ce.Status != http.StatusNotFound || ce.Code != "ACTIVITY_NOT_FOUND" {
		t.Errorf("end of an unknown activity: %v, want 404 ACTIVITY_NOT_FOUND", err)
	}
	before := time.Now()
	ended, err := api.EndActivity(ctx, 1)
	if err != nil {
		t.Fatalf("end: %v", err)
	}
	ends := ended.EndsAt
	if ends.Before(before.Add(-time.Second)) || ends.After(time.Now().Add(time.Second)) {
		t.Errorf("endsAt after the end: %s, want about now", ends)
	}
	// From the next reserve on, on every item.
	for _, item := range []int64{10, 11} {
		r := p.order(t, orderBody{RequestID: fmt.Sprintf("after-end-%d", item), UserID: 100, ActivityID: 1, ItemID: item, Quantity: 1})
		if r.Status != http.StatusNotFound || r.Code() != "NOT_ON_SALE" {
			t.Errorf("order for item %d after the end: %d %v, want 404 NOT_ON_SALE", item, r.Status, r.Body)
		}
	}
	// Idempotent: a repeat answers the first end.
	if again, err := api.EndActivity(ctx, 1); err != nil || !again.EndsAt.Equal(ends) {
		t.Errorf("a repeated end: endsAt %s (%v), want the first end %s", again.EndsAt, err, ends)
	}
	a, err := p.Orders.GetActivity(t.Context(), 1)
	if err != nil || !a.EndsAt.Equal(ends) {
		t.Errorf("Postgres's end %v (%v), want the answered %v", a.EndsAt, err, ends)
	}

	// The accepted orders go on: persisted, and payable.
	it := stock.Item{ActivityID: 1, ItemID: 10}
	p.waitDrained(t, it)
	for _, no := range accepted {
		p.waitStatus(t, no, order.StatusUnpaid)
	}
	if _, err := p.api().Pay(contractCtx(t, "pay"), accepted[0]); err != nil {
		t.Errorf("paying an order accepted before the end: %v", err)
	}
	p.assertInvariants(t, it)
	if code, out := p.reconcile(t, "--once"); code != 0 {
		t.Errorf("reconciler after the end: exit %d, want 0 (Redis's window and Postgres's agree)\n%s", code, out)
	}
}

// testKillSwitchBeforeTheStart: a sale ended before it starts never sells,
// and its window stays valid (start before end) in both stores.
func testKillSwitchBeforeTheStart(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	starts := time.Now().Add(time.Hour)
	p.mustSaleWindow(t, 2, starts, starts.Add(time.Hour), map[int64]int64{20: 10})
	if _, err := p.api().EndActivity(contractCtx(t, "end"), 2); err != nil {
		t.Fatalf("end: %v", err)
	}
	a, err := p.Orders.GetActivity(t.Context(), 2)
	if err != nil || !a.StartsAt.Before(a.EndsAt) || a.EndsAt.After(time.Now()) {
		t.Fatalf("window after ending a sale not yet started: %v – %v (%v), want start < end ≤ now", a.StartsAt, a.EndsAt, err)
	}
	if code, out := p.reconcile(t, "--once"); code != 0 {
		t.Errorf("reconciler after the end: exit %d, want 0\n%s", code, out)
	}
}

// testMovedWindowIsNotOnSaleUntilPreheated: a PUT that moves a preheated
// sale's start into the past opens it in Postgres only; until a preheat
// writes the new window into Redis an order is 404 NOT_ON_SALE (Redis's
// window is the one that sells), nothing reserved, with one warning that
// says so — not the 503 and the clock error a real disagreement of the
// clocks gets. After the preheat the sale sells.
func testMovedWindowIsNotOnSaleUntilPreheated(t *testing.T, e engine) {
	t.Parallel()
	var logs syncBuffer
	p := mustPipelineLogging(t, e, components{"gateway", "worker"}, nil, &logs)
	ends := time.Now().Add(2 * time.Hour)
	p.mustSaleWindow(t, 1, time.Now().Add(time.Hour), ends, map[int64]int64{10: 100})
	it := stock.Item{ActivityID: 1, ItemID: 10}
	stockBefore := p.redisStock(t, it)
	moved := client.ActivityUpsert{Name: "sale 1", StartsAt: time.Now().Add(-time.Minute).UTC(), EndsAt: ends.UTC(), PerUserLimit: 1,
		Items: []client.ItemUpsert{{ItemID: 10, Stock: 100}}}
	if _, err := p.api().PutActivity(contractCtx(t, "admin"), 1, moved); err != nil {
		t.Fatalf("PUT with an earlier startsAt: %v", err)
	}
	for u := int64(1); u <= 3; u++ {
		r := p.order(t, orderBody{RequestID: fmt.Sprintf("before-preheat-%d", u), UserID: u, ActivityID: 1, ItemID: 10, Quantity: 1})
		if r.Status != http.StatusNotFound || r.Code() != "NOT_ON_SALE" {
			t.Fatalf("order between the PUT and the preheat: %d %v, want 404 NOT_ON_SALE", r.Status, r.Body)
		}
	}
	if got := p.redisStock(t, it); got != stockBefore {
		t.Errorf("Redis stock %d after the refused orders, want %d (nothing reserved)", got, stockBefore)
	}
	out := logs.String()
	if !strings.Contains(out, "sale window in Redis is not the activity's") || strings.Contains(out, "check the clocks") {
		t.Errorf("the gateway's log, want the window warning and no clock error:\n%s", out)
	}
	if err := p.preheat(t, 1); err != nil {
		t.Fatalf("preheat: %v", err)
	}
	if r := p.order(t, orderBody{RequestID: "after-preheat", UserID: 9, ActivityID: 1, ItemID: 10, Quantity: 1}); r.Status != http.StatusAccepted {
		t.Fatalf("order after the preheat: %d %v, want 202", r.Status, r.Body)
	}
}

// testEndedSaleStaysEnded: after the kill switch, a PUT that would move the
// window is 409 SALE_ENDED and changes nothing; one that repeats the ended
// window may rename the sale; a preheat arms the ended window; the
// reconciler's fix rebuilds it ended. No order is taken after the end.
func testEndedSaleStaysEnded(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	ctx := contractCtx(t, "admin")
	starts := time.Now().Add(-time.Minute)
	p.mustSaleWindow(t, 1, starts, time.Now().Add(time.Hour), map[int64]int64{10: 100})
	ended, err := p.api().EndActivity(ctx, 1)
	if err != nil {
		t.Fatalf("end: %v", err)
	}
	later := client.ActivityUpsert{Name: "sale 1", StartsAt: starts.UTC(), EndsAt: time.Now().Add(2 * time.Hour).UTC(), PerUserLimit: 1,
		Items: []client.ItemUpsert{{ItemID: 10, Stock: 100}}}
	_, err = p.api().PutActivity(ctx, 1, later)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Code != "SALE_ENDED" {
		t.Fatalf("PUT with a later endsAt after the end: %v, want 409 SALE_ENDED", err)
	}
	same := later
	same.Name, same.StartsAt, same.EndsAt = "sale 1, ended", ended.StartsAt, ended.EndsAt
	if _, err := p.api().PutActivity(ctx, 1, same); err != nil {
		t.Fatalf("PUT that keeps the ended window: %v, want 200", err)
	}
	a, err := p.Orders.GetActivity(t.Context(), 1)
	if err != nil || !a.EndsAt.Equal(ended.EndsAt) || a.Name != same.Name {
		t.Fatalf("Postgres after the PUTs: %q ends %v (%v), want %q ending %v", a.Name, a.EndsAt, err, same.Name, ended.EndsAt)
	}
	if err := p.preheat(t, 1); err != nil {
		t.Fatalf("preheat after the end: %v", err)
	}
	if code, out := p.reconcile(t, "--once", "--fix"); code != 0 {
		t.Fatalf("reconciler --fix after the end: exit %d\n%s", code, out)
	}
	if r := p.order(t, orderBody{RequestID: "after-end", UserID: 9, ActivityID: 1, ItemID: 10, Quantity: 1}); r.Status != http.StatusNotFound || r.Code() != "NOT_ON_SALE" {
		t.Fatalf("order after the end, a PUT and a preheat: %d %v, want 404 NOT_ON_SALE", r.Status, r.Body)
	}
}

// testEndStaysPulledUnderRacingPutAndPreheat: PUTs that move the window
// later and preheats race the kill switch, many times; whatever the
// order, once the end answered 200 and the racers are done, the sale takes
// no order and Postgres's end is the end answered.
func testEndStaysPulledUnderRacingPutAndPreheat(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, nil)
	ctx := contractCtx(t, "admin")
	const rounds, items = 25, 3
	for round := range rounds {
		id := int64(800 + round)
		starts := time.Now().Add(-time.Minute).UTC()
		a := client.ActivityUpsert{Name: fmt.Sprintf("race %d", round), StartsAt: starts, EndsAt: time.Now().Add(time.Hour).UTC(), PerUserLimit: 1}
		for i := int64(1); i <= items; i++ {
			a.Items = append(a.Items, client.ItemUpsert{ItemID: i, Stock: 10})
		}
		p.mustActivity(t, id, a.StartsAt, a.EndsAt, 1, map[int64]int64{1: 10, 2: 10, 3: 10})
		var wg sync.WaitGroup
		var ended client.Activity
		var endErr error
		racers := make(chan error, 8)
		for k := range 3 {
			wg.Add(2)
			go func() {
				defer wg.Done()
				moved := a
				moved.EndsAt = time.Now().Add(time.Duration(2+k) * time.Hour).UTC()
				_, err := p.api().PutActivity(ctx, id, moved)
				racers <- ignoreAnswered(err)
			}()
			go func() {
				defer wg.Done()
				_, err := p.api().Preheat(ctx, id)
				racers <- ignoreAnswered(err)
			}()
			if k == 1 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					endErr = client.RetryIdempotent(ctx, func() error {
						var err error
						ended, err = p.api().EndActivity(ctx, id)
						return err
					})
				}()
			}
		}
		wg.Wait()
		close(racers)
		for err := range racers {
			if err != nil {
				t.Fatalf("round %d: a racing PUT or preheat: %v", round, err)
			}
		}
		if endErr != nil {
			t.Fatalf("round %d: end: %v", round, endErr)
		}
		// The racers' ends moved nothing; one more of each after the end.
		late := a
		late.EndsAt = time.Now().Add(5 * time.Hour).UTC()
		if _, err := p.api().PutActivity(ctx, id, late); ignoreAnswered(err) != nil || err == nil {
			t.Fatalf("round %d: PUT with a later end after the end: %v, want 409 SALE_ENDED", round, err)
		}
		if _, err := p.api().Preheat(ctx, id); ignoreAnswered(err) != nil {
			t.Fatalf("round %d: preheat after the end: %v", round, err)
		}
		got, err := p.Orders.GetActivity(t.Context(), id)
		if err != nil || !got.EndsAt.Equal(ended.EndsAt) || got.EndsAt.After(time.Now()) {
			t.Fatalf("round %d: Postgres's end %v (%v), want the end answered %v", round, got.EndsAt, err, ended.EndsAt)
		}
		for item := int64(1); item <= items; item++ {
			r := p.order(t, orderBody{RequestID: fmt.Sprintf("race-%d-%d", round, item), UserID: int64(round*10) + item, ActivityID: id, ItemID: item, Quantity: 1})
			if r.Status != http.StatusNotFound || r.Code() != "NOT_ON_SALE" {
				t.Fatalf("round %d: order for item %d after the end: %d %v, want 404 NOT_ON_SALE", round, item, r.Status, r.Body)
			}
		}
	}
}

// ignoreAnswered is nil for an answer a racer of the kill switch may get
// (409 SALE_ENDED; 503, a store call past its timeout on a busy machine,
// promises nothing), else err.
func ignoreAnswered(err error) error {
	var ce *client.Error
	if err == nil || errors.As(err, &ce) && (ce.Code == "SALE_ENDED" || ce.Status == http.StatusServiceUnavailable) {
		return nil
	}
	return err
}

// testKillSwitchDuringAPreheat: an end that answers 200 while a preheat of
// the same sale is still putting its items on sale ends them all — the
// preheat cannot arm a window the end has closed. (It did: the end found no
// sale in Redis yet, and the preheat then armed the window it had read
// before the end, so orders after the 200 were accepted.) Each round starts
// the end a little later into the preheat.
func testKillSwitchDuringAPreheat(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, nil)
	ctx := contractCtx(t, "admin")
	const items = 200
	for round, delay := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 8 * time.Millisecond,
		15 * time.Millisecond, 30 * time.Millisecond} {
		id := int64(700 + round)
		a := client.ActivityUpsert{Name: fmt.Sprintf("race %d", round), StartsAt: time.Now().Add(-time.Minute).UTC(),
			EndsAt: time.Now().Add(2 * time.Hour).UTC(), PerUserLimit: 1}
		for i := int64(1); i <= items; i++ {
			a.Items = append(a.Items, client.ItemUpsert{ItemID: i, Stock: 10})
		}
		if err := client.RetryIdempotent(ctx, func() error { _, err := p.api().PutActivity(ctx, id, a); return err }); err != nil {
			t.Fatalf("creating activity %d: %v", id, err)
		}
		preheated := make(chan error, 1)
		go func() { _, err := p.api().Preheat(ctx, id); preheated <- err }()
		time.Sleep(delay)
		_, endErr := p.api().EndActivity(ctx, id)
		preErr := <-preheated
		if endErr != nil {
			// A 503 (the preheat held the row past the end's Postgres
			// timeout on a busy machine) promises nothing; try again.
			if !client.IsRetriable(endErr) {
				t.Fatalf("round %d: end: %v", round, endErr)
			}
			if err := client.RetryIdempotent(ctx, func() error { _, err := p.api().EndActivity(ctx, id); return err }); err != nil {
				t.Fatalf("round %d: end retried: %v", round, err)
			}
		}
		for _, item := range []int64{1, items / 2, items} {
			r := p.order(t, orderBody{RequestID: fmt.Sprintf("race-%d-%d", round, item), UserID: int64(round*1000) + item, ActivityID: id, ItemID: item, Quantity: 1})
			if r.Status != http.StatusNotFound || r.Code() != "NOT_ON_SALE" {
				t.Errorf("round %d (end %s into the preheat, preheat err %v): order for item %d after the end answered 200: %d %v, want 404 NOT_ON_SALE",
					round, delay, preErr, item, r.Status, r.Body)
			}
		}
	}
}
