package order

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// ProcessedSince lists an item's requests decided within the last `within`
// (by the database clock), created or rejected: the ones whose Redis dedup
// records may still be needed for replays. Of each Request, what
// processed_requests keeps is set: the ids, the quantity and ReservedAt.
func (s *Store) ProcessedSince(ctx context.Context, activityID, itemID int64, within time.Duration) ([]Request, error) {
	return collect(ctx, s.pool, pgx.RowToStructByNameLax[Request], "listing processed requests", `SELECT request_id, order_no, user_id, activity_id, item_id, quantity, reserved_at
		FROM processed_requests WHERE activity_id = $1 AND item_id = $2 AND processed_at > now() - $3::interval`,
		activityID, itemID, within)
}
