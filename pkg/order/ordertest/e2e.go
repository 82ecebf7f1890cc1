package ordertest

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Totals are the order tables' totals over every activity.
type Totals struct {
	Orders, Decisions, Compensations int64 // rows of orders, processed_requests, redis_compensations
	Stock, Versions                  int64 // item_stock's stock and version, summed
}

// CountAll reads the Totals of the order tables, of every activity.
func CountAll(tb TB, db DB) Totals {
	tb.Helper()
	var t Totals
	err := db.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM orders), (SELECT count(*) FROM processed_requests), (SELECT count(*) FROM redis_compensations),
		(SELECT COALESCE(sum(stock), 0) FROM item_stock), (SELECT COALESCE(sum(version), 0) FROM item_stock)`).
		Scan(&t.Orders, &t.Decisions, &t.Compensations, &t.Stock, &t.Versions)
	if err != nil {
		tb.Fatalf("counting the order tables: %v", err)
	}
	return t
}

// CountSales counts the activities rows and the item_stock rows, of every activity.
func CountSales(tb TB, db DB) (activities, items int64) {
	tb.Helper()
	err := db.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM activities), (SELECT count(*) FROM item_stock)`).Scan(&activities, &items)
	if err != nil {
		tb.Fatalf("counting activities and items: %v", err)
	}
	return activities, items
}

// MarkHold holds the statement that marks an item preheated, so a test can cut the link while it is in flight.
type MarkHold struct {
	db DB
	tx pgx.Tx // holds the lock the mark waits on
}

// HoldPreheatMark puts a trigger making item_stock's first preheated_at wait on an advisory lock it takes; defer Close.
func HoldPreheatMark(tb TB, db DB) *MarkHold {
	tb.Helper()
	ctx := context.Background()
	if _, err := db.Exec(ctx, `
		CREATE FUNCTION test_hold_mark() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock(hashtext(current_database())); RETURN NEW; END $$;
		CREATE TRIGGER test_hold_mark BEFORE UPDATE OF preheated_at ON item_stock FOR EACH ROW
			WHEN (OLD.preheated_at IS NULL AND NEW.preheated_at IS NOT NULL) EXECUTE FUNCTION test_hold_mark()`); err != nil {
		tb.Fatalf("putting the preheat mark's hold: %v", err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		tb.Fatalf("beginning the hold's transaction: %v", err)
	}
	h := &MarkHold{db: db, tx: tx}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext(current_database()))`); err != nil {
		h.Close()
		tb.Fatalf("taking the hold's lock: %v", err)
	}
	return h
}

// Waiting reads which backend's statement waits on the hold's lock (ok false: none yet).
func (h *MarkHold) Waiting() (pid int32, ok bool) {
	err := h.db.QueryRow(context.Background(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&pid)
	return pid, err == nil
}

// Release gives up the hold's lock: the statement waiting on it goes on.
func (h *MarkHold) Release(tb TB) {
	tb.Helper()
	if err := h.tx.Rollback(context.Background()); err != nil {
		tb.Fatalf("releasing the hold's lock: %v", err)
	}
}

// Drop takes the hold's trigger off item_stock: marks no longer wait.
func (h *MarkHold) Drop(tb TB) {
	tb.Helper()
	if _, err := h.db.Exec(context.Background(), `DROP TRIGGER test_hold_mark ON item_stock`); err != nil {
		tb.Fatalf("dropping the preheat mark's hold: %v", err)
	}
}

// Close gives the hold's connection back to the pool (the lock with it).
func (h *MarkHold) Close() { h.tx.Rollback(context.Background()) } //nolint:errcheck // closed already after Release

// CountOrdersAmong counts the order rows, whatever their status, among orderNos.
func CountOrdersAmong(tb TB, db DB, orderNos []string) int {
	tb.Helper()
	var n int
	err := db.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE order_no = ANY($1)`, orderNos).Scan(&n)
	if err != nil {
		tb.Fatalf("counting orders among %d: %v", len(orderNos), err)
	}
	return n
}

// CountLive counts the live orders (UNPAID or PAID) of every activity.
func CountLive(tb TB, db DB) int64 {
	tb.Helper()
	var n int64
	err := db.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE status IN ('UNPAID', 'PAID')`).Scan(&n)
	if err != nil {
		tb.Fatalf("counting live orders: %v", err)
	}
	return n
}

// RowHold holds an order's row locked (FOR UPDATE in an open transaction),
// so a pay or cancel of it waits in Postgres while a test looks.
type RowHold struct {
	db DB
	tx pgx.Tx
}

// HoldOrderRow locks orderNo's row until Release.
func HoldOrderRow(tb TB, db DB, orderNo string) *RowHold {
	tb.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		tb.Fatalf("beginning the row hold: %v", err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM orders WHERE order_no = $1 FOR UPDATE) x`, orderNo).Scan(&n); err != nil || n != 1 {
		tx.Rollback(ctx) //nolint:errcheck
		tb.Fatalf("locking order %s: %d rows, %v", orderNo, n, err)
	}
	return &RowHold{db: db, tx: tx}
}

// Waiting reports whether an UPDATE of orders in this database waits on a
// lock (the held row's pay or cancel).
func (h *RowHold) Waiting() bool {
	var n int
	err := h.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE NOT l.granted AND a.datname = current_database() AND a.query LIKE '%UPDATE orders%'`).Scan(&n)
	return err == nil && n > 0
}

// Release ends the hold: the waiting statement goes on.
func (h *RowHold) Release() { h.tx.Rollback(context.Background()) } //nolint:errcheck
