package order

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	rows, err := s.pool.Query(ctx, `SELECT request_id, order_no, user_id, activity_id, item_id, quantity, reserved_at
		FROM processed_requests WHERE activity_id = $1 AND item_id = $2 AND processed_at > now() - $3::interval`,
		activityID, itemID, within)
	if err != nil {
		return nil, fmt.Errorf("listing processed requests: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ProcessedRequest])
	if err != nil {
		return nil, fmt.Errorf("listing processed requests: %w", err)
	}
	return out, nil
}
