package ordertest

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"orderpipe/pkg/order"
)

// CompensationRow is one row of the compensation outbox, applied or not.
type CompensationRow struct {
	order.Compensation
	Applied   bool   // applied_at is set
	Attempts  int    // failed tries to apply it
	LastError string // of the last failed try, "" when none
}

// Compensations reads every row of the compensation outbox, by id.
func Compensations(tb TB, db DB) []CompensationRow {
	tb.Helper()
	rows, err := db.Query(context.Background(), `SELECT id, request_id, order_no, activity_id, item_id, user_id, quantity,
		reason, COALESCE(limit_owner, ''), applied_at IS NOT NULL, attempts, COALESCE(last_error, '') FROM redis_compensations ORDER BY id`)
	if err != nil {
		tb.Fatalf("reading the compensations: %v", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (CompensationRow, error) {
		var c CompensationRow
		err := row.Scan(&c.ID, &c.RequestID, &c.OrderNo, &c.ActivityID, &c.ItemID, &c.UserID, &c.Quantity,
			&c.Reason, &c.LimitOwner, &c.Applied, &c.Attempts, &c.LastError)
		return c, err
	})
	if err != nil {
		tb.Fatalf("reading the compensations: %v", err)
	}
	return out
}

// ResizeStock puts n as the item's stock and initial stock in Postgres, whatever Redis holds.
func ResizeStock(tb TB, db DB, activityID, itemID, n int64) {
	tb.Helper()
	_, err := db.Exec(context.Background(),
		`UPDATE item_stock SET stock = $3, initial_stock = $3 WHERE activity_id = $1 AND item_id = $2`, activityID, itemID, n)
	if err != nil {
		tb.Fatalf("resizing the stock of %d:%d: %v", activityID, itemID, err)
	}
}

// AgeOrders puts the orders' creation (created_at and reserved_at, which
// the closer and payBy go by) age in the past, as if made that long ago.
func AgeOrders(tb TB, db DB, age time.Duration, orderNos ...string) {
	tb.Helper()
	_, err := db.Exec(context.Background(),
		`UPDATE orders SET created_at = now() - $1::interval, reserved_at = now() - $1::interval WHERE order_no = ANY($2)`, age, orderNos)
	if err != nil {
		tb.Fatalf("aging orders %v: %v", orderNos, err)
	}
}
