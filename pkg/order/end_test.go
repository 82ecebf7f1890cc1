package order_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"orderpipe/pkg/order"
)

// TestEndActivityIsOffByTheDatabasesClock: the kill switch's end is never
// after the database's now, so SaleNow (which reads that clock) says the
// sale is off at once, even when the caller's clock runs ahead of it; and a
// repeat never moves the end later.
func TestEndActivityIsOffByTheDatabasesClock(t *testing.T) {
	t.Parallel()
	s := mustStore(t)
	ctx := context.Background()
	if err := s.MarkPreheated(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	if sale, err := s.SaleNow(ctx, 1); err != nil || !sale.OnSale(10) {
		t.Fatalf("before the kill switch: on sale %+v, %v", sale, err)
	}
	ahead := time.Now().Add(10 * time.Minute) // a gateway whose clock runs ahead
	a, err := s.EndActivity(ctx, 1, ahead)
	if err != nil {
		t.Fatal(err)
	}
	if !a.EndsAt.Before(ahead) || a.EndsAt.After(time.Now().Add(time.Second)) {
		t.Errorf("ends at %v; want the database's now, not the caller's %v", a.EndsAt, ahead)
	}
	if sale, err := s.SaleNow(ctx, 1); err != nil || sale.OnSale(10) || !sale.Preheated[10] {
		t.Errorf("after the kill switch: on sale %+v, %v", sale, err)
	}
	again, err := s.EndActivity(ctx, 1, ahead.Add(time.Hour))
	if err != nil || !again.EndsAt.Equal(a.EndsAt) {
		t.Errorf("a repeat ends at %v (%v); want the first end %v", again.EndsAt, err, a.EndsAt)
	}
}

// TestEndWaitsWhileAWindowIsWritten: while a preheat arms the window it
// read (WithSaleWindow) or the reconciler writes an item's (WithItemLocked),
// the kill switch's end in Postgres waits, so it is ordered wholly after
// that write into Redis (and its own Redis step then ends what was
// written); once it has committed, the next read is the ended window.
func TestEndWaitsWhileAWindowIsWritten(t *testing.T) {
	t.Parallel()
	s := mustStore(t)
	ctx := context.Background()
	for id, name := range map[int64]string{2: "WithItemLocked", 3: "WithSaleWindow"} {
		err := s.UpsertActivity(ctx, order.Activity{ID: id, Name: name, StartsAt: time.Now().Add(-time.Hour),
			EndsAt: time.Now().Add(time.Hour), PerUserLimit: 1, Items: []order.ItemStock{{ItemID: 10, InitialStock: 5}}})
		if err != nil {
			t.Fatal(err)
		}
		hold := func(fn func(ends time.Time)) error {
			if name == "WithSaleWindow" {
				return s.WithSaleWindow(ctx, id, func(_ context.Context, a order.Activity) error { fn(a.EndsAt); return nil })
			}
			return s.WithItemLocked(ctx, id, 10, order.LockOptions{}, func(_ context.Context, li *order.LockedItem) error {
				fn(li.EndsAt)
				return nil
			})
		}
		in, release, held := make(chan time.Time), make(chan struct{}), make(chan error, 1)
		go func() { held <- hold(func(ends time.Time) { in <- ends; <-release }) }()
		readEnds := <-in
		ended := make(chan error, 1)
		go func() { _, err := s.EndActivity(ctx, id, time.Now()); ended <- err }()
		var endErr error
		endDone := false
		select {
		case endErr = <-ended:
			endDone = true
			t.Errorf("%s: the end committed (%v) while the window %v read under it was being written", name, endErr, readEnds)
		case <-time.After(300 * time.Millisecond):
		}
		close(release)
		if err := <-held; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !endDone {
			endErr = <-ended
		}
		if endErr != nil {
			t.Fatalf("%s: end: %v", name, endErr)
		}
		if err := hold(func(ends time.Time) {
			if ends.After(time.Now()) {
				t.Errorf("%s after the end: the window ends %v, want the end", name, ends)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEndedActivityKeepsItsWindow: once the kill switch ended an activity,
// an update that would move its window is ErrSaleEnded and changes
// nothing, whether it comes after the end or waited for the row while the
// end committed; one that repeats the ended window may change the rest.
func TestEndedActivityKeepsItsWindow(t *testing.T) {
	t.Parallel()
	s := mustStore(t)
	ctx := context.Background()
	a, err := s.GetActivity(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ended, err := s.EndActivity(ctx, 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	later := a
	later.EndsAt = time.Now().Add(3 * time.Hour)
	if err := s.UpsertActivity(ctx, later); !errors.Is(err, order.ErrSaleEnded) {
		t.Fatalf("an update with a later end after the end: %v, want ErrSaleEnded", err)
	}
	earlier := a
	earlier.StartsAt, earlier.EndsAt = ended.StartsAt.Add(-time.Hour), ended.EndsAt
	if err := s.UpsertActivity(ctx, earlier); !errors.Is(err, order.ErrSaleEnded) {
		t.Fatalf("an update with an earlier start after the end: %v, want ErrSaleEnded", err)
	}
	if now, err := s.GetActivity(ctx, 1); err != nil || !now.EndsAt.Equal(ended.EndsAt) || !now.StartsAt.Equal(ended.StartsAt) {
		t.Fatalf("window after the refused updates %v – %v (%v), want the ended %v – %v", now.StartsAt, now.EndsAt, err, ended.StartsAt, ended.EndsAt)
	}
	same := ended
	same.Name = "renamed after the end"
	if err := s.UpsertActivity(ctx, same); err != nil {
		t.Fatalf("an update that keeps the ended window: %v", err)
	}
	if now, err := s.GetActivity(ctx, 1); err != nil || now.Name != same.Name || !now.EndsAt.Equal(ended.EndsAt) {
		t.Errorf("after renaming: %q ends %v (%v)", now.Name, now.EndsAt, err)
	}
	// A repeated end after an update still answers the first end.
	if again, err := s.EndActivity(ctx, 1, time.Now()); err != nil || !again.EndsAt.Equal(ended.EndsAt) {
		t.Errorf("a repeated end: %v (%v), want %v", again.EndsAt, err, ended.EndsAt)
	}
}
