package stock_test

import (
	"context"
	"testing"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
)

// TestCorruptJournalEntryIsItsRequests: a journal entry that is not a JSON
// object (a write to Redis gone wrong) is still its request's reservation,
// as the claim takes it: a retry is not shown its orderNo (not decided,
// not durable), the ack and the release drop it — no script fails on it.
func TestCorruptJournalEntryIsItsRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, entry := range []string{"not json", "5", "null", `"a string"`, `{"orderNo":`} {
		t.Run(entry, func(t *testing.T) {
			f := mustFixture(t, 5, 1)
			if res := f.reserve(t, "r", "o1", 1, 1, "fp"); res.Outcome != stock.Reserved {
				t.Fatalf("reserve: %+v", res)
			}
			stocktest.SetJournalEntry(t, f.sr, f.item, "r", entry)
			if res, err := f.s.Reserve(ctx, stock.Reservation{Item: f.item, RequestID: "r", OrderNo: "o2", UserID: 1, Quantity: 1,
				Fingerprint: "fp", Event: []byte(`{}`)}); err != nil || res.Outcome != stock.InProgress {
				t.Errorf("a retry: %+v %v; want IN_PROGRESS (the entry is not decided)", res, err)
			}
			if n, err := f.s.Ack(ctx, f.item, []stock.Ref{{RequestID: "r", OrderNo: "o1"}}); err != nil || n != 1 {
				t.Errorf("ack: %d %v; want the entry dropped", n, err)
			}
			stocktest.SetJournalEntry(t, f.sr, f.item, "r", entry)
			f.mustRelease(t, "release", stock.Compensation, f.release("r", "o1", 1), stock.Released)
			if f.stock(t) != 5 || f.r.Client.HLen(ctx, f.keys.Journal).Val() != 0 {
				t.Errorf("stock %d, journal %d entries; want 5 and none", f.stock(t), f.r.Client.HLen(ctx, f.keys.Journal).Val())
			}
		})
	}
}
