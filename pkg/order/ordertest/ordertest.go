// Package ordertest lets tests reach behind an order.Store: put a row in a
// state the order path would never leave it in, as an operator's mistake or
// an older binary would. It is for tests only; a change of tables changes it
// together with package order.
package ordertest

import (
	"context"

	"orderpipe/pkg/order"
	"orderpipe/pkg/order/internal/handle"
)

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Unpreheat records the item as never preheated, whatever Redis holds.
func Unpreheat(tb TB, st *order.Store, activityID, itemID int64) {
	tb.Helper()
	_, err := handle.Pool(st).Exec(context.Background(),
		`UPDATE item_stock SET preheated_at = NULL WHERE activity_id = $1 AND item_id = $2`, activityID, itemID)
	if err != nil {
		tb.Fatalf("unpreheating %d:%d: %v", activityID, itemID, err)
	}
}

// SetStock overwrites the item's stock in Postgres (initial stock unchanged),
// as a stock Redis does not know of would.
func SetStock(tb TB, st *order.Store, activityID, itemID, stock int64) {
	tb.Helper()
	_, err := handle.Pool(st).Exec(context.Background(),
		`UPDATE item_stock SET stock = $3 WHERE activity_id = $1 AND item_id = $2`, activityID, itemID, stock)
	if err != nil {
		tb.Fatalf("setting the stock of %d:%d: %v", activityID, itemID, err)
	}
}

// SetBuckets overwrites the item's bucket count in Postgres, as a layout
// Redis was not loaded by would.
func SetBuckets(tb TB, st *order.Store, activityID, itemID int64, buckets int) {
	tb.Helper()
	_, err := handle.Pool(st).Exec(context.Background(),
		`UPDATE item_stock SET buckets = $3 WHERE activity_id = $1 AND item_id = $2`, activityID, itemID, buckets)
	if err != nil {
		tb.Fatalf("setting the buckets of %d:%d: %v", activityID, itemID, err)
	}
}

// CountOrders counts the order rows, whatever their status.
func CountOrders(tb TB, st *order.Store) int {
	tb.Helper()
	var n int
	if err := handle.Pool(st).QueryRow(context.Background(), `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		tb.Fatalf("counting orders: %v", err)
	}
	return n
}
