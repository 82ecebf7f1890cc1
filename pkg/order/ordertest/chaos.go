package ordertest

import (
	"context"
	"time"
)

// The helpers of the chaos suite, which is not a test: they return errors,
// as a fault runs on while Postgres is cut.

// Flight is what Postgres still has in flight for a sale the chaos suite
// waits to drain.
type Flight struct {
	PendingCompensations int64 // of any activity, not yet applied in Redis
	Decided              int64 // processed_requests rows among the requestIds
	Unpaid               int64 // the activity's UNPAID orders
}

// InFlight reads the Flight of the activity and the requestIds in one
// statement, so its three counts are of one instant.
func InFlight(ctx context.Context, db DB, activityID int64, requestIDs []string) (Flight, error) {
	var f Flight
	err := db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM redis_compensations WHERE applied_at IS NULL),
		(SELECT count(*) FROM processed_requests WHERE request_id = ANY($1)),
		(SELECT count(*) FROM orders WHERE activity_id = $2 AND status = 'UNPAID')`, requestIDs, activityID).
		Scan(&f.PendingCompensations, &f.Decided, &f.Unpaid)
	return f, err
}

// Preheat is how far Postgres has an item's preheat.
type Preheat struct {
	Started     bool       // preheat_started_at is set: the layout is fixed
	PreheatedAt *time.Time // when it was first recorded preheated (nil: not yet)
	Buckets     int
}

// PreheatOf reads the item's Preheat.
func PreheatOf(ctx context.Context, db DB, activityID, itemID int64) (Preheat, error) {
	var p Preheat
	err := db.QueryRow(ctx, `SELECT preheat_started_at IS NOT NULL, preheated_at, buckets FROM item_stock
		WHERE activity_id = $1 AND item_id = $2`, activityID, itemID).Scan(&p.Started, &p.PreheatedAt, &p.Buckets)
	return p, err
}
