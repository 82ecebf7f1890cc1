// Package ordertest lets tests reach behind an order.Store: put a row in a
// state the order path would never leave it in, as an operator's mistake or
// an older binary would. Its helpers run on the pool the test already holds
// (the one it gave order.NewStore), as the store hands its pool to nobody.
// It is for tests and the test tools only; a change of tables changes it
// together with package order.
package ordertest

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is the part of a *pgxpool.Pool the helpers use: the pool of the
// store's database, as the test holds it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Unpreheat records the item as never preheated, whatever Redis holds.
func Unpreheat(tb TB, db DB, activityID, itemID int64) {
	tb.Helper()
	_, err := db.Exec(context.Background(),
		`UPDATE item_stock SET preheated_at = NULL WHERE activity_id = $1 AND item_id = $2`, activityID, itemID)
	if err != nil {
		tb.Fatalf("unpreheating %d:%d: %v", activityID, itemID, err)
	}
}

// SetStock overwrites the item's stock in Postgres (initial stock unchanged),
// as a stock Redis does not know of would.
func SetStock(tb TB, db DB, activityID, itemID, stock int64) {
	tb.Helper()
	_, err := db.Exec(context.Background(),
		`UPDATE item_stock SET stock = $3 WHERE activity_id = $1 AND item_id = $2`, activityID, itemID, stock)
	if err != nil {
		tb.Fatalf("setting the stock of %d:%d: %v", activityID, itemID, err)
	}
}

// SetBuckets overwrites the item's bucket count in Postgres, as a layout
// Redis was not loaded by would.
func SetBuckets(tb TB, db DB, activityID, itemID int64, buckets int) {
	tb.Helper()
	_, err := db.Exec(context.Background(),
		`UPDATE item_stock SET buckets = $3 WHERE activity_id = $1 AND item_id = $2`, activityID, itemID, buckets)
	if err != nil {
		tb.Fatalf("setting the buckets of %d:%d: %v", activityID, itemID, err)
	}
}

// CountOrders counts the order rows, whatever their status.
func CountOrders(tb TB, db DB) int {
	tb.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		tb.Fatalf("counting orders: %v", err)
	}
	return n
}
