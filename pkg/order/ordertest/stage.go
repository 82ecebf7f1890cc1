package ordertest

import (
	"context"

	"orderpipe/pkg/order"
)

// PutOrder writes an order row of the activity as the worker would have
// decided it (status, paid_at and closed_at from o; a CLOSED order closed
// as CANCELLED) and its CREATED processed_requests row, for a checker's
// test that stages a state by hand.
func PutOrder(tb TB, db DB, activityID int64, o order.SnapshotOrder) {
	tb.Helper()
	ctx := context.Background()
	_, err := db.Exec(ctx, `INSERT INTO orders (order_no, request_id, user_id, activity_id, item_id, quantity, status,
		reserved_at, paid_at, closed_at, close_reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7, now(), CASE WHEN $8 THEN now() END, CASE WHEN $9 THEN now() END,
			CASE WHEN $7 = 'CLOSED' THEN 'CANCELLED' END)`,
		o.OrderNo, o.RequestID, o.UserID, activityID, o.ItemID, o.Quantity, o.Status, o.Paid, o.Closed)
	if err != nil {
		tb.Fatalf("putting order %s: %v", o.OrderNo, err)
	}
	_, err = db.Exec(ctx, `INSERT INTO processed_requests (request_id, outcome, order_no, user_id, activity_id, item_id, quantity, reserved_at)
		VALUES ($1, 'CREATED', $2, $3, $4, $5, $6, now()) ON CONFLICT DO NOTHING`,
		o.RequestID, o.OrderNo, o.UserID, activityID, o.ItemID, o.Quantity)
	if err != nil {
		tb.Fatalf("putting the decision of %s: %v", o.RequestID, err)
	}
}

// PutRejected writes a REJECTED processed_requests row.
func PutRejected(tb TB, db DB, activityID, itemID, userID int64, requestID, orderNo, reason string) {
	tb.Helper()
	_, err := db.Exec(context.Background(), `INSERT INTO processed_requests
		(request_id, outcome, reason, order_no, user_id, activity_id, item_id, quantity, reserved_at)
		VALUES ($1, 'REJECTED', $2, $3, $4, $5, $6, 1, now())`, requestID, reason, orderNo, userID, activityID, itemID)
	if err != nil {
		tb.Fatalf("putting the rejection of %s: %v", requestID, err)
	}
}

// DropOrderRules takes away the orders table's own guards of I2, I3 and I6
// (the live-order index, the unique requestId, the paid-or-closed checks)
// in the store's database, so a checker's test can stage what they refuse:
// a checker must not rely on them. Only for a database of the test's own.
func DropOrderRules(tb TB, db DB) {
	tb.Helper()
	for _, stmt := range []string{
		`DROP INDEX IF EXISTS orders_one_live_per_user`,
		`ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_request_id_key, DROP CONSTRAINT IF EXISTS orders_check,
			DROP CONSTRAINT IF EXISTS orders_status_matches_times`,
	} {
		if _, err := db.Exec(context.Background(), stmt); err != nil {
			tb.Fatalf("dropping the orders table's rules: %v", err)
		}
	}
}

// PutPendingCompensation writes a compensation of the request not yet
// applied in Redis, as a crash between commit and release leaves one.
func PutPendingCompensation(tb TB, db DB, activityID, itemID, userID int64, requestID, orderNo string) {
	tb.Helper()
	_, err := db.Exec(context.Background(), `INSERT INTO redis_compensations
		(request_id, order_no, activity_id, item_id, user_id, quantity, reason) VALUES ($1, $2, $3, $4, $5, 1, 'DB_STOCK_MISMATCH')`,
		requestID, orderNo, activityID, itemID, userID)
	if err != nil {
		tb.Fatalf("putting a compensation of %s: %v", requestID, err)
	}
}
