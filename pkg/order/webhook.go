package order

import (
	"context"
	"fmt"
	"time"
)

// This file is the webhook side of the orders.status outbox: the
// deliverer (worker/delivery) copies each committed order_events row into one
// webhook_deliveries row per endpoint (QueueWebhooks), claims due rows of
// one endpoint under a lease (ClaimWebhooks) and records each attempt's
// outcome (FinishWebhooks); `orderpipe webhooks` lists and replays the
// deliveries that gave up. The relay reads the same outbox through its own
// column (published_at): neither ever waits for the other.

// QueueWebhooks queues, for each of endpoints, up to limit outbox events
// not queued yet (oldest first), and marks them queued; it returns how many
// events it read (limit: maybe more are waiting). One statement, so a
// delivery row exists only for a committed event, and an order's version n
// is queued no sooner than version n-1 (a snapshot that sees n sees n-1, and
// n-1's lower id puts it first under the limit). A replica racing another
// inserts nothing twice (ON CONFLICT). An event the relay holds locked at
// that moment is queued but left unmarked (SKIP LOCKED, so neither waits for
// the other); the next call queues it again, which inserts nothing. read
// is how many events it read, marked how many of them it marked.
func (s *Store) QueueWebhooks(ctx context.Context, endpoints []string, limit int, retryFor time.Duration) (read, marked int, err error) {
	if len(endpoints) == 0 {
		return 0, 0, nil
	}
	err = s.pool.QueryRow(ctx, `
		WITH e AS (
			SELECT id, order_no, version, status, payload, created_at FROM order_events
			WHERE webhook_queued_at IS NULL ORDER BY id LIMIT $2
		), queued AS (
			INSERT INTO webhook_deliveries (endpoint, order_no, version, status, payload, event_created_at, retry_until)
			SELECT ep, e.order_no, e.version, e.status, e.payload, e.created_at, now() + $3::interval
			FROM e CROSS JOIN unnest($1::text[]) AS ep
			ORDER BY e.id, ep
			ON CONFLICT (endpoint, order_no, version) DO NOTHING
		), marked AS (
			UPDATE order_events o SET webhook_queued_at = now()
			WHERE o.id IN (SELECT l.id FROM order_events l WHERE l.id IN (SELECT id FROM e) FOR NO KEY UPDATE SKIP LOCKED)
			RETURNING o.id
		)
		SELECT (SELECT count(*) FROM e), (SELECT count(*) FROM marked)`, endpoints, limit, retryFor).Scan(&read, &marked)
	if err != nil {
		return 0, 0, fmt.Errorf("queueing webhook deliveries: %w", err)
	}
	return read, marked, nil
}

// WebhookDelivery is a claimed delivery: one event for one endpoint.
type WebhookDelivery struct {
	ID             int64
	Endpoint       string
	OrderNo        string
	Version        int
	Status         string
	Payload        []byte // the orders.status.v1 value (JSON)
	EventCreatedAt time.Time
	Attempts       int   // this attempt's number since queued or replayed
	LeaseNo        int64 // the claim's fencing token, for FinishWebhooks
}

// ClaimWebhooks claims up to limit due deliveries of endpoint for lease:
// pending ones whose next attempt has come, and of those only the ones no
// lower version of whose order is pending for this endpoint (so one order
// has at most one event in flight per endpoint, and version n goes out only
// once n-1 was delivered or gave up). A claim pushes next_attempt_at to the
// lease's end, so no other replica takes the row until the lease has run
// out; FOR UPDATE SKIP LOCKED keeps two claims at once apart. Oldest due
// first.
func (s *Store) ClaimWebhooks(ctx context.Context, endpoint string, limit int, lease time.Duration) ([]WebhookDelivery, error) {
	return queryAll[WebhookDelivery](ctx, s.pool, "claiming webhook deliveries", `
		WITH c AS (
			SELECT d.id FROM webhook_deliveries d
			WHERE d.endpoint = $1 AND d.delivered_at IS NULL AND d.failed_at IS NULL AND d.next_attempt_at <= now()
				AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p
					WHERE p.endpoint = d.endpoint AND p.order_no = d.order_no AND p.version < d.version
						AND p.delivered_at IS NULL AND p.failed_at IS NULL)
			ORDER BY d.next_attempt_at, d.id
			LIMIT $2
			FOR UPDATE SKIP LOCKED
		)
		UPDATE webhook_deliveries d SET next_attempt_at = now() + $3::interval, attempts = d.attempts + 1,
			lease_no = d.lease_no + 1, last_attempt_at = now()
		FROM c WHERE d.id = c.id
		RETURNING d.id, d.endpoint, d.order_no, d.version, d.status, d.payload::text::bytea, d.event_created_at, d.attempts, d.lease_no`,
		endpoint, limit, lease)
}

// WebhookOutcome is what one claimed attempt came to.
type WebhookOutcome struct {
	ID      int64
	LeaseNo int64
	// Delivered: a 2xx answer.
	Delivered bool
	// HTTPStatus of the answer, 0 when none came.
	HTTPStatus int
	// Error says why an attempt failed.
	Error string
	// RetryIn is the backoff before the next attempt of a failed one.
	RetryIn time.Duration
}

// WebhookResult counts what FinishWebhooks recorded.
type WebhookResult struct {
	Delivered, Retried, Failed int
	// Stale are outcomes of claims whose lease had run out and whose row
	// another claim took over (or a replay reset): not recorded.
	Stale int
}

// FinishWebhooks records the outcomes of claimed attempts: a delivery is
// done; a failure is retried after its RetryIn (never later than the row's
// retry_until, so the last attempt falls on it), or, when it failed at or
// after retry_until, ends as failed. An outcome whose lease_no no longer
// matches (the lease ran out and another claim took the row) is dropped.
func (s *Store) FinishWebhooks(ctx context.Context, outs []WebhookOutcome) (WebhookResult, error) {
	var res WebhookResult
	if len(outs) == 0 {
		return res, nil
	}
	n := len(outs)
	ids, leases, codes := make([]int64, n), make([]int64, n), make([]int32, n)
	oks, errs, waits := make([]bool, n), make([]string, n), make([]float64, n)
	for i, o := range outs {
		ids[i], leases[i], codes[i], oks[i], errs[i], waits[i] = o.ID, o.LeaseNo, int32(o.HTTPStatus), o.Delivered, o.Error, o.RetryIn.Seconds()
	}
	type row struct {
		Delivered, Failed bool
	}
	rows, err := queryAll[row](ctx, s.pool, "recording webhook attempts", `
		UPDATE webhook_deliveries d SET
			last_status = NULLIF(x.code, 0),
			last_error = NULLIF(x.err, ''),
			delivered_at = CASE WHEN x.ok THEN now() END,
			failed_at = CASE WHEN NOT x.ok AND now() >= d.retry_until THEN now() END,
			next_attempt_at = CASE WHEN x.ok THEN d.next_attempt_at
				ELSE LEAST(now() + x.wait * interval '1 second', d.retry_until) END
		FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::bool[], $5::text[], $6::float8[]) AS x(id, lease, code, ok, err, wait)
		WHERE d.id = x.id AND d.lease_no = x.lease AND d.delivered_at IS NULL AND d.failed_at IS NULL
		RETURNING d.delivered_at IS NOT NULL, d.failed_at IS NOT NULL`, ids, leases, codes, oks, errs, waits)
	if err != nil {
		return res, err
	}
	for _, r := range rows {
		switch {
		case r.Delivered:
			res.Delivered++
		case r.Failed:
			res.Failed++
		default:
			res.Retried++
		}
	}
	res.Stale = n - len(rows)
	return res, nil
}

// WebhookBacklog is one endpoint's deliveries not done yet.
type WebhookBacklog struct {
	Endpoint string
	Pending  int64
	// Oldest is the age of the oldest pending delivery's event (database
	// clock), or of the oldest event not queued yet if that is older; 0
	// when nothing waits.
	Oldest time.Duration
	// Failed counts the deliveries that gave up and were not replayed.
	Failed int64
}

// WebhookBacklogs is the backlog of each of endpoints (each listed, even
// with nothing pending).
func (s *Store) WebhookBacklogs(ctx context.Context, endpoints []string) ([]WebhookBacklog, error) {
	type row struct {
		Endpoint string
		Pending  int64
		Secs     float64
		Failed   int64
	}
	rows, err := queryAll[row](ctx, s.pool, "counting webhook deliveries", `
		WITH unqueued AS (SELECT min(created_at) AS oldest FROM order_events WHERE webhook_queued_at IS NULL)
		SELECT ep,
			(SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint = ep AND d.delivered_at IS NULL AND d.failed_at IS NULL),
			COALESCE(EXTRACT(EPOCH FROM now() - LEAST(
				(SELECT min(d.event_created_at) FROM webhook_deliveries d
					WHERE d.endpoint = ep AND d.delivered_at IS NULL AND d.failed_at IS NULL),
				(SELECT oldest FROM unqueued))), 0)::float8,
			(SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint = ep AND d.failed_at IS NOT NULL)
		FROM unnest($1::text[]) AS ep`, endpoints)
	if err != nil {
		return nil, err
	}
	out := make([]WebhookBacklog, len(rows))
	for i, r := range rows {
		out[i] = WebhookBacklog{Endpoint: r.Endpoint, Pending: r.Pending, Failed: r.Failed,
			Oldest: ageOf(r.Secs)}
	}
	return out, nil
}

// WebhookFailure is a delivery that gave up (or one looked up for a
// replay).
type WebhookFailure struct {
	ID             int64
	Endpoint       string
	OrderNo        string
	Version        int
	Status         string
	Attempts       int
	LastStatus     int // 0: no answer
	LastError      string
	EventCreatedAt time.Time
	FailedAt       time.Time
	Replays        int
}

const failureColumns = `id, endpoint, order_no, version, status, attempts, COALESCE(last_status, 0), COALESCE(last_error, ''),
	event_created_at, failed_at, replays`

// FailedWebhooks lists the deliveries that gave up and were not replayed,
// oldest first; limit 0: all.
func (s *Store) FailedWebhooks(ctx context.Context, limit int) ([]WebhookFailure, error) {
	lim := any(nil)
	if limit > 0 {
		lim = limit
	}
	return queryAll[WebhookFailure](ctx, s.pool, "listing failed webhook deliveries", `
		SELECT `+failureColumns+` FROM (
			SELECT * FROM webhook_deliveries WHERE failed_at IS NOT NULL ORDER BY failed_at DESC, id DESC LIMIT $1) f
		ORDER BY failed_at, id`, lim)
}

// WebhookEvent names an event: an order's version.
type WebhookEvent struct {
	OrderNo string
	Version int
}

// ReplayWebhooks makes the failed deliveries of events (all of them when
// events is nil) pending again, due now, with a fresh retry window of
// retryFor; an event's deliveries to endpoints other than endpoint are left
// alone when endpoint is set. It returns the deliveries it reset. A
// replayed version is again pending, so the later versions of its order
// still pending wait for it (version order holds from then on); one
// delivered already went out before it: a receiver keeps the highest
// version it saw.
func (s *Store) ReplayWebhooks(ctx context.Context, events []WebhookEvent, endpoint string, retryFor time.Duration) ([]WebhookFailure, error) {
	all := events == nil
	nos, vs := make([]string, len(events)), make([]int32, len(events))
	for i, e := range events {
		nos[i], vs[i] = e.OrderNo, int32(e.Version)
	}
	return queryAll[WebhookFailure](ctx, s.pool, "replaying failed webhook deliveries", `
		WITH f AS (
			SELECT * FROM webhook_deliveries
			WHERE failed_at IS NOT NULL AND ($4::text = '' OR endpoint = $4)
				AND ($3::bool OR (order_no, version) IN (SELECT * FROM unnest($1::text[], $2::int[])))
			FOR UPDATE
		), reset AS (
			UPDATE webhook_deliveries d SET failed_at = NULL, attempts = 0, next_attempt_at = now(),
				retry_until = now() + $5::interval, replays = d.replays + 1
			FROM f WHERE d.id = f.id
		)
		SELECT `+failureColumns+` FROM f ORDER BY failed_at, id`, nos, vs, all, endpoint, retryFor)
}

// PruneWebhooks deletes up to limit deliveries delivered more than
// olderThan ago and returns how many it deleted. Pending and failed ones
// are never pruned.
func (s *Store) PruneWebhooks(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return s.prune(ctx, "webhook_deliveries", "delivered_at", "delivered webhooks", olderThan, limit)
}

// WebhookDeliveriesOf lists an order's deliveries still kept, by endpoint
// and version (`orderpipe webhooks list --order-no`, tests).
func (s *Store) WebhookDeliveriesOf(ctx context.Context, orderNo string) ([]WebhookState, error) {
	return queryAll[WebhookState](ctx, s.pool, "reading webhook deliveries of "+orderNo, `
		SELECT endpoint, order_no, version, status, attempts, COALESCE(last_status, 0), delivered_at, failed_at
		FROM webhook_deliveries WHERE order_no = $1 ORDER BY endpoint, version`, orderNo)
}

// WebhookState is a delivery's state.
type WebhookState struct {
	Endpoint    string
	OrderNo     string
	Version     int
	Status      string
	Attempts    int
	LastStatus  int
	DeliveredAt *time.Time
	FailedAt    *time.Time
}
