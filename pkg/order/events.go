package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// This file is the outbox of orders.status (table order_events): every
// state change of an order writes its event row in the transaction that
// makes the change (writeEvents, called by DecideBatch, Pay, Cancel and
// CloseExpired), and the relay (worker/relay) publishes the rows through
// RelayEvents, which never hands it a row whose transaction did not commit
// and hands it an order's rows one at a time, in version order.

// Close reasons: why a CLOSED order was closed (orders.close_reason, the
// reason of its orders.status event and of GET).
const (
	ReasonPaymentTimeout = "PAYMENT_TIMEOUT"
	ReasonCancelled      = "CANCELLED"
)

// statusChange is one order state change, written to the outbox.
type statusChange struct {
	OrderNo     string
	RequestID   string
	UserID      int64
	ActivityID  int64
	ItemID      int64
	Quantity    int
	Status      string
	Reason      string
	Version     int
	TraceParent string    // "" ⇒ the trace of the order's first event still kept, if any
	PayBy       time.Time // UNPAID: the payment deadline; zero ⇒ none
}

// FormatPayBy is how a payBy is written wherever it is shown (the gateway's
// answers, GET and the UNPAID event): RFC 3339 in UTC, as encoding/json
// writes a time.Time, so the same instant is the same text everywhere.
func FormatPayBy(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// writeEvents writes the outbox rows of changes made in tx. The payload is
// the orders.status.v1 value, its time the database's (the clock the
// order's own times use). A row that exists already (a change written
// again: an event of a rejection re-decided after a redelivery) is kept as
// it is.
func writeEvents(ctx context.Context, tx pgx.Tx, changes []statusChange) error {
	if len(changes) == 0 {
		return nil
	}
	n := len(changes)
	nos, rids, sts, whys, tps := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	pays := make([]string, n)
	users, acts, items := make([]int64, n), make([]int64, n), make([]int64, n)
	qs, vs := make([]int32, n), make([]int32, n)
	for i, c := range changes {
		nos[i], rids[i], sts[i], whys[i], tps[i] = c.OrderNo, c.RequestID, c.Status, c.Reason, c.TraceParent
		users[i], acts[i], items[i], qs[i], vs[i] = c.UserID, c.ActivityID, c.ItemID, int32(c.Quantity), int32(c.Version)
		if !c.PayBy.IsZero() {
			pays[i] = FormatPayBy(c.PayBy)
		}
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO order_events (order_no, version, status, reason, payload, traceparent)
		SELECT o, v, st, NULLIF(why, ''),
			jsonb_strip_nulls(jsonb_build_object('orderNo', o, 'requestId', r, 'userId', u, 'activityId', a, 'itemId', i,
				'quantity', q, 'status', st, 'reason', NULLIF(why, ''), 'payBy', NULLIF(pb, ''), 'version', v,
				'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))),
			COALESCE(NULLIF(tp, ''), (SELECT e.traceparent FROM order_events e
				WHERE e.order_no = o AND e.traceparent IS NOT NULL ORDER BY e.version LIMIT 1))
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::int[], $7::text[], $8::text[],
			$9::int[], $10::text[], $11::text[]) AS x(o, r, u, a, i, q, st, why, v, tp, pb)
		ORDER BY o, v
		ON CONFLICT (order_no, version) DO NOTHING`, nos, rids, users, acts, items, qs, sts, whys, vs, tps, pays)
	if err != nil {
		return fmt.Errorf("writing status events: %w", err)
	}
	return nil
}

// traceParentOf is the W3C traceparent of ctx's span ("" without one): the
// trace a change's event continues.
func traceParentOf(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// StatusEvent is an outbox row of orders.status.
type StatusEvent struct {
	ID          int64
	OrderNo     string
	Version     int
	Status      string
	Reason      string
	Payload     []byte // the orders.status.v1 value (JSON)
	TraceParent string
	CreatedAt   time.Time
	PublishedAt *time.Time
}

// relayQuery hands the relay its candidates: the limit oldest unpublished
// rows no other relay holds (the partial index, in id order), and of those
// the rows whose order's previous version is not unpublished — version 1,
// or version n-1 published or pruned (the relay publishes an order's
// versions in order, so then every older one is too). The previous version
// is found by its (order_no, version) key alone: with "published_at IS NULL"
// in the probe, a planner whose statistics said the outbox had no
// unpublished rows (taken while it was drained) walked the whole partial
// index for each candidate, 500 × the backlog per call: 2.3 s a call
// behind by 30 000 events, and behind a closed loop at c=500 the 20 s pass
// timeout. The cost is the limit's, not the backlog's. A candidate held back is locked until the call ends,
// unpublished; its previous version, with a lower id, is a candidate here or
// held by another relay, so it is published first and the row follows in a
// later call.
const relayQuery = `
		SELECT id, order_no, version, status, COALESCE(reason, ''), payload::text::bytea, COALESCE(traceparent, ''), created_at, published_at
		FROM (SELECT id, order_no, version, status, reason, payload, traceparent, created_at, published_at
			FROM order_events
			WHERE published_at IS NULL
			ORDER BY id
			LIMIT $1
			FOR UPDATE SKIP LOCKED) e
		WHERE e.version = 1
			OR (SELECT p.published_at IS NULL FROM order_events p
				WHERE p.order_no = e.order_no AND p.version = e.version - 1) IS NOT TRUE
		ORDER BY id`

// RelayEvents hands publish up to limit unpublished events, at most one per
// order — the lowest unpublished version of each, oldest first — and marks
// published the ones whose IDs publish returns, all in one transaction
// that holds the rows' locks while publish runs. So:
//   - a row is only ever seen once its transaction committed;
//   - replicas never publish the same row at once (FOR UPDATE SKIP LOCKED),
//     and never an order's next version before its previous one is marked
//     published: while a replica holds version n, version n+1 is not the
//     lowest unpublished one, so no other replica takes it;
//   - a publish whose marks are lost (a crash, Postgres gone) is repeated,
//     in the same order: at least once, never reordered.
//
// publish may return some IDs with an error: those are marked, the rest
// stay for the next call. It returns how many were marked.
func (s *Store) RelayEvents(ctx context.Context, limit int, publish func(context.Context, []StatusEvent) ([]int64, error)) (int, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("beginning relay tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	evs, err := queryAll[StatusEvent](ctx, tx, "reading unpublished status events", relayQuery, limit)
	if err != nil {
		return 0, err
	}
	if len(evs) == 0 {
		return 0, nil
	}
	ids, perr := publish(ctx, evs)
	if len(ids) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE order_events SET published_at = now() WHERE id = ANY($1)`, ids); err != nil {
			return 0, errors.Join(perr, fmt.Errorf("marking status events published: %w", err))
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, errors.Join(perr, fmt.Errorf("committing published status events: %w", err))
		}
	}
	if perr != nil {
		return len(ids), fmt.Errorf("publishing status events: %w", perr)
	}
	return len(ids), nil
}

// PruneEvents deletes up to limit events published more than olderThan ago
// (database clock) and returns how many it deleted. Unpublished rows are
// never pruned.
func (s *Store) PruneEvents(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return s.prune(ctx, "order_events", "published_at", "published status events", olderThan, limit)
}

// prune deletes up to limit rows of table whose done column (a time, NULL
// while the row's work is not done) is more than olderThan ago, oldest
// first, and returns how many it deleted; what names the rows in an error.
func (s *Store) prune(ctx context.Context, table, done, what string, olderThan time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+table+` WHERE id IN (
		SELECT id FROM `+table+` WHERE `+done+` < now() - $1::interval ORDER BY `+done+` LIMIT $2)`, olderThan, limit)
	if err != nil {
		return 0, fmt.Errorf("pruning %s: %w", what, err)
	}
	return tag.RowsAffected(), nil
}

// EventBacklog counts the unpublished status events and gives the age of
// the oldest (database clock; 0 when none): one waiting long means the relay
// has not published for that long.
func (s *Store) EventBacklog(ctx context.Context) (n int64, oldest time.Duration, err error) {
	return s.backlog(ctx, "order_events WHERE published_at IS NULL", "unpublished status events")
}

// EventsOf lists an order's status events still kept (published ones are
// pruned after the retention), in version order.
func (s *Store) EventsOf(ctx context.Context, orderNo string) ([]StatusEvent, error) {
	return queryAll[StatusEvent](ctx, s.pool, "reading status events of "+orderNo, `
		SELECT id, order_no, version, status, COALESCE(reason, ''), payload::text::bytea, COALESCE(traceparent, ''), created_at, published_at
		FROM order_events WHERE order_no = $1 ORDER BY version, id`, orderNo)
}

// OrderHistory is what an order's orders.status events must be, read from
// its state in Postgres (Want: "UNPAID", "PAID", "CLOSED <reason>",
// "REJECTED <reason>", in version order), beside the outbox rows still kept
// for it. The invariant checkers (I7) compare them with the topic.
type OrderHistory struct {
	OrderNo string
	Want    []string
	Rows    []StatusEvent
}

// StatusHistories returns the history of every order and rejected
// reservation of an activity, by orderNo; outbox rows of the activity that
// belong to no decided order come back with an empty Want.
func (s *Store) StatusHistories(ctx context.Context, activityID int64) (map[string]*OrderHistory, error) {
	type state struct {
		OrderNo, Status, Reason string
	}
	states, err := queryAll[state](ctx, s.pool, "reading order states", `
		SELECT order_no, status, COALESCE(close_reason, '') FROM orders WHERE activity_id = $1
		UNION ALL
		SELECT order_no, 'REJECTED', reason FROM processed_requests WHERE activity_id = $1 AND outcome = 'REJECTED'
		UNION ALL
		SELECT order_no, 'REJECTED', reason FROM rejected_reservations WHERE activity_id = $1`, activityID)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*OrderHistory, len(states))
	for _, st := range states {
		h := &OrderHistory{OrderNo: st.OrderNo}
		switch st.Status {
		case StatusUnpaid:
			h.Want = []string{StatusUnpaid}
		case StatusPaid:
			h.Want = []string{StatusUnpaid, StatusPaid}
		case StatusClosed:
			h.Want = []string{StatusUnpaid, StatusClosed + " " + st.Reason}
		case StatusRejected:
			h.Want = []string{StatusRejected + " " + st.Reason}
		}
		out[st.OrderNo] = h
	}
	rows, err := queryAll[StatusEvent](ctx, s.pool, "reading status events", `
		SELECT id, order_no, version, status, COALESCE(reason, ''), payload::text::bytea, COALESCE(traceparent, ''), created_at, published_at
		FROM order_events WHERE payload->>'activityId' = $1::bigint::text ORDER BY order_no, version, id`, activityID)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		h := out[r.OrderNo]
		if h == nil {
			h = &OrderHistory{OrderNo: r.OrderNo}
			out[r.OrderNo] = h
		}
		h.Rows = append(h.Rows, r)
	}
	return out, nil
}
