package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
)

// The worker's side of the contract (-contract): besides inserting the
// orders, the contract has the worker record each request in an
// idempotency table, take the item's stock in Postgres with a conditional
// update, and write the order's first status event (UNPAID) to an outbox in
// the same transaction; a relay then publishes each committed event to
// orders.status, acknowledged, and marks it published. This is that and
// nothing else, so `make run` can also be measured against the floor of
// everything the contract asks of an accepted order: no redelivery,
// rejection, compensation or retention machinery.

const statusTopic = "floor.orders.status"

// contractSchema is the floor's own tables: the idempotency table, the
// stock rows, the orders (one live order per user and item) and the outbox.
const contractSchema = `
CREATE TABLE IF NOT EXISTS floor_c_processed (request_id text PRIMARY KEY, order_no text NOT NULL);
CREATE TABLE IF NOT EXISTS floor_c_stock (activity_id bigint, item_id bigint, stock bigint NOT NULL,
	PRIMARY KEY (activity_id, item_id));
CREATE TABLE IF NOT EXISTS floor_c_orders (order_no text PRIMARY KEY, request_id text NOT NULL, user_id bigint,
	activity_id bigint, item_id bigint, quantity int, status text NOT NULL, created_at timestamptz);
CREATE UNIQUE INDEX IF NOT EXISTS floor_c_orders_live ON floor_c_orders (activity_id, item_id, user_id)
	WHERE status IN ('UNPAID', 'PAID');
CREATE TABLE IF NOT EXISTS floor_c_events (id bigserial PRIMARY KEY, order_no text NOT NULL, version int NOT NULL,
	payload jsonb NOT NULL, published_at timestamptz);
CREATE INDEX IF NOT EXISTS floor_c_events_unpublished ON floor_c_events (id) WHERE published_at IS NULL`

// statusEvent is the orders.status.v1 value of a new order.
type statusEvent struct {
	OrderNo    string    `json:"orderNo"`
	RequestID  string    `json:"requestId"`
	UserID     int64     `json:"userId"`
	ActivityID int64     `json:"activityId"`
	ItemID     int64     `json:"itemId"`
	Quantity   int64     `json:"quantity"`
	Status     string    `json:"status"`
	Version    int       `json:"version"`
	At         time.Time `json:"at"`
}

// decideContract is one batch's transaction: record the requests, then per
// item insert the new ones' orders, take their stock in one conditional
// update and write their UNPAID events.
func decideContract(ctx context.Context, tx pgx.Tx, evs []event, stock int64) error {
	ids, nos := make([]string, len(evs)), make([]string, len(evs))
	for i, e := range evs {
		ids[i], nos[i] = e.RequestID, e.OrderNo
	}
	rows, err := tx.Query(ctx, `INSERT INTO floor_c_processed (request_id, order_no)
		SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING RETURNING request_id`, ids, nos)
	if err != nil {
		return fmt.Errorf("recording requests: %w", err)
	}
	fresh, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("recording requests: %w", err)
	}
	isNew := make(map[string]bool, len(fresh))
	for _, id := range fresh {
		isNew[id] = true
	}
	byItem := map[[2]int64][]event{}
	for _, e := range evs {
		if isNew[e.RequestID] {
			k := [2]int64{e.ActivityID, e.ItemID}
			byItem[k] = append(byItem[k], e)
		}
	}
	for k, es := range byItem {
		if err := decideContractItem(ctx, tx, k, es, stock); err != nil {
			return err
		}
	}
	return nil
}

func decideContractItem(ctx context.Context, tx pgx.Tx, k [2]int64, es []event, stock int64) error {
	n := len(es)
	nos, ids, users, qs := make([]string, n), make([]string, n), make([]int64, n), make([]int64, n)
	payloads := make([]string, n)
	var total int64
	now := time.Now().UTC()
	for i, e := range es {
		nos[i], ids[i], users[i], qs[i] = e.OrderNo, e.RequestID, e.UserID, e.Quantity
		total += e.Quantity
		p, _ := json.Marshal(statusEvent{OrderNo: e.OrderNo, RequestID: e.RequestID, UserID: e.UserID, ActivityID: e.ActivityID,
			ItemID: e.ItemID, Quantity: e.Quantity, Status: "UNPAID", Version: 1, At: now})
		payloads[i] = string(p)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO floor_c_orders (order_no, request_id, user_id, activity_id, item_id, quantity, status, created_at)
		SELECT o, r, u, $5, $6, q, 'UNPAID', now() FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS x(o, r, u, q)
		ON CONFLICT DO NOTHING`, nos, ids, users, qs, k[0], k[1]); err != nil {
		return fmt.Errorf("inserting orders: %w", err)
	}
	// The stock row is made on an item's first batch, as the activity's PUT
	// would have made it.
	if _, err := tx.Exec(ctx, `INSERT INTO floor_c_stock VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, k[0], k[1], stock); err != nil {
		return fmt.Errorf("making the stock row: %w", err)
	}
	tag, err := tx.Exec(ctx, `UPDATE floor_c_stock SET stock = stock - $3 WHERE activity_id = $1 AND item_id = $2 AND stock >= $3`,
		k[0], k[1], total)
	if err != nil {
		return fmt.Errorf("taking stock: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("item %d/%d: Postgres has less stock than Redis sold", k[0], k[1])
	}
	if _, err := tx.Exec(ctx, `INSERT INTO floor_c_events (order_no, version, payload)
		SELECT o, 1, p::jsonb FROM unnest($1::text[], $2::text[]) AS x(o, p)`, nos, payloads); err != nil {
		return fmt.Errorf("writing status events: %w", err)
	}
	return nil
}

// relayStatus publishes the outbox's unpublished events, oldest first, up
// to 500 a transaction that holds their rows while the broker acks them,
// and marks them published; a drained outbox is looked at again after
// interval (the relay's default pause).
func relayStatus(ctx context.Context, pool *pgxpool.Pool, w *kafka.Writer, interval time.Duration) error {
	for ctx.Err() == nil {
		n, err := relayOnce(ctx, pool, w)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			log.Printf("floorpipe: relay: %v", err)
		}
		if n == 0 || err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}
	return ctx.Err()
}

func relayOnce(ctx context.Context, pool *pgxpool.Pool, w *kafka.Writer) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	rows, err := tx.Query(ctx, `SELECT id, order_no, payload::text FROM floor_c_events WHERE published_at IS NULL
		ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED`)
	if err != nil {
		return 0, err
	}
	var ids []int64
	var msgs []kafka.Message
	var id int64
	var no, payload string
	if _, err := pgx.ForEachRow(rows, []any{&id, &no, &payload}, func() error {
		ids = append(ids, id)
		msgs = append(msgs, kafka.Message{Key: []byte(no), Value: []byte(payload)})
		return nil
	}); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		return 0, fmt.Errorf("publishing %d events: %w", len(ids), err)
	}
	if _, err := tx.Exec(ctx, `UPDATE floor_c_events SET published_at = now() WHERE id = ANY($1)`, ids); err != nil {
		return 0, err
	}
	return len(ids), tx.Commit(ctx)
}
