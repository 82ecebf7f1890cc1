package order

import (
	"context"
	"time"
)

// ProcessedRequest is a decided request (created or rejected).
type ProcessedRequest struct {
	RequestID  string
	OrderNo    string
	UserID     int64
	ActivityID int64
	ItemID     int64
	Quantity   int
	ReservedAt time.Time
}

// ProcessedSince lists an item's requests decided within the last `within`
// (by the database clock): the ones whose Redis dedup records may still be
// needed for replays.
func (s *Store) ProcessedSince(ctx context.Context, activityID, itemID int64, within time.Duration) ([]ProcessedRequest, error) {
	return queryAll[ProcessedRequest](ctx, s.pool, "listing processed requests", `SELECT request_id, order_no, user_id, activity_id, item_id, quantity, reserved_at
		FROM processed_requests WHERE activity_id = $1 AND item_id = $2 AND processed_at > now() - $3::interval`,
		activityID, itemID, within)
}
