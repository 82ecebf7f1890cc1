// Package reconciler checks invariant I5 for every preheated activity item:
// Redis stock = DB stock − the reservations in flight, the sale window in
// Redis is the activity's, and the limit markers match the live orders. With
// Fix it repairs Redis from Postgres (Postgres is the truth), one item at a
// time, under the fix lock and its fencing token.
//
// A check is exact, never tolerance-based: it holds the item's stock row FOR
// UPDATE (no order of the item can commit meanwhile) while one Lua script
// reads stock, journal, fates and markers atomically, so work merely in flight
// is never reported as drift, even in the middle of a sale. It never writes
// Postgres (beyond the lock's fence) and never touches orders or requests.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"orderpipe/pkg/clock"
	"orderpipe/pkg/event"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// FixLockName is the lock that keeps fixes to one runner; the hash tag keeps
// its keys in one slot on Redis Cluster.
const FixLockName = "{reconciler}:fix"

// Config is the reconciler's configuration.
type Config struct {
	// Interval is the loop period of Run (RECONCILE_INTERVAL).
	Interval time.Duration
	// Fix repairs the drifted items after each check.
	Fix bool
	// LockTTL is the fix lock's lifetime (renewed by its watchdog);
	// LockWait how long a fix waits for another fixer to finish: by default
	// longer than LockTTL, since a fixer that died, or whose release a Redis
	// failover lost, holds the lock until it expires, and the fix that a
	// failover calls for must outlast that rather than fail.
	LockTTL  time.Duration
	LockWait time.Duration
	// RowLockTimeout bounds the wait for an item's stock row; Attempts is
	// how often an item is tried before it is reported as an error.
	RowLockTimeout time.Duration
	Attempts       int
}

func (c *Config) defaults() {
	setting.DefaultTo(&c.Interval, intervalVar.Duration())
	setting.DefaultTo(&c.LockTTL, 30*time.Second)
	setting.DefaultTo(&c.LockWait, c.LockTTL+5*time.Second)
	setting.DefaultTo(&c.RowLockTimeout, 5*time.Second)
	setting.DefaultTo(&c.Attempts, 3)
}

// Deps are the reconciler's collaborators.
type Deps struct {
	Orders  *order.Store
	Stock   *stock.Store
	Locker  *lock.Locker
	Metrics *telemetry.Metrics
	Log     *slog.Logger
	// ReportFunc, when set, receives the result of every pass of Run.
	ReportFunc func(Result)
}

// Reconciler compares Redis with Postgres.
type Reconciler struct {
	cfg  Config
	deps Deps

	mu     sync.Mutex
	gauged map[stock.Item]bool // items that have drift series, to drop them when they leave
}

// New builds a reconciler.
func New(cfg Config, deps Deps) *Reconciler {
	cfg.defaults()
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	return &Reconciler{cfg: cfg, deps: deps, gauged: map[stock.Item]bool{}}
}

// ItemReport is what one check found for one item.
type ItemReport struct {
	ActivityID int64 `json:"activityId"`
	ItemID     int64 `json:"itemId"`
	// RestoredDedup counts dedup records a fix rebuilt (requests decided in
	// the last 24 h whose record Redis had lost), so retries replay.
	RestoredDedup int64 `json:"restoredDedup,omitempty"`
	// RedisStock is nil when the stock key is missing or not a number (StockKey says which).
	RedisStock *int64 `json:"redisStock"`
	StockKey   string `json:"stockKey"` // ok, missing, invalid
	DBStock    int64  `json:"dbStock"`
	// InFlight is the units reserved in Redis that Postgres has not settled:
	// InFlightReservations journal entries plus PendingCompensations
	// compensations whose release has not run.
	InFlight             int64 `json:"inFlight"`
	InFlightReservations int   `json:"inFlightReservations"`
	PendingCompensations int   `json:"pendingCompensations"`
	// ExpectedRedisStock = DBStock − InFlight; Drift = RedisStock − that
	// (a missing key counts as 0): +5 means Redis would sell 5 units too many.
	ExpectedRedisStock int64  `json:"expectedRedisStock"`
	Drift              int64  `json:"drift"`
	Sale               string `json:"sale"` // ok, missing, differs (window or cap)
	// Buckets is the item's stock buckets when more than one; InTransit the
	// units a mover took from a bucket and has not yet given to another
	// (counted in InFlight).
	Buckets   int   `json:"buckets,omitempty"`
	InTransit int64 `json:"inTransit,omitempty"`
	// Users whose marker is missing (they hold a live order), extra (no live
	// order, nothing in flight), or held by a request that is neither their
	// live order nor in flight.
	MissingMarkers []int64 `json:"missingMarkers"`
	ExtraMarkers   []int64 `json:"extraMarkers"`
	WrongMarkers   []int64 `json:"wrongMarkers"`
	// MarkerIndex is "ok" when the item's markers were read from its marker
	// index, "incomplete" when the index does not vouch for every marker
	// (markers set by an older binary, or an index Redis lost) and the pass
	// scanned the keyspace for them instead; a fix completes it. Not drift.
	MarkerIndex       string `json:"markerIndex,omitempty"`
	UnreadableEntries int    `json:"unreadableJournalEntries,omitempty"`
	Error             string `json:"error,omitempty"`
}

// Drifted reports whether Redis disagrees with Postgres for the item.
func (r ItemReport) Drifted() bool {
	return r.Error == "" && (r.Drift != 0 || r.StockKey != "ok" || r.Sale != "ok" ||
		len(r.MissingMarkers)+len(r.ExtraMarkers)+len(r.WrongMarkers) > 0)
}

// Item is the item the report is about.
func (r ItemReport) Item() stock.Item { return stock.Item{ActivityID: r.ActivityID, ItemID: r.ItemID} }

// Report is one pass over every preheated item.
type Report struct {
	CheckedAt time.Time    `json:"checkedAt"`
	Items     []ItemReport `json:"items"`
}

// Drifted counts the drifted items.
func (r Report) Drifted() int {
	n := 0
	for _, it := range r.Items {
		if it.Drifted() {
			n++
		}
	}
	return n
}

// Errors counts the items that could not be checked.
func (r Report) Errors() int {
	n := 0
	for _, it := range r.Items {
		if it.Error != "" {
			n++
		}
	}
	return n
}

// Result is one pass: what the check found and, when fixing, what the fix
// found and repaired under the lock and the check that followed.
type Result struct {
	Found    Report       `json:"found"`
	Fixed    []ItemReport `json:"fixed,omitempty"`
	FixError string       `json:"fixError,omitempty"`
	After    *Report      `json:"after,omitempty"`
}

// Final is the last check of the pass.
func (r Result) Final() Report {
	if r.After != nil {
		return *r.After
	}
	return r.Found
}

// Exit codes of a pass.
const (
	ExitClean = 0 // no drift
	ExitDrift = 1 // drift found and not (all) fixed
	ExitError = 2 // could not run, or some item could not be checked
)

// ExitCode is 1 if drift remains, else 2 if anything could not run, else 0.
func (r Result) ExitCode() int {
	f := r.Final()
	switch {
	case f.Drifted() > 0:
		return ExitDrift
	case f.Errors() > 0 || r.FixError != "":
		return ExitError
	}
	return ExitClean
}

// Run checks (and with Fix, repairs) every Interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context) error {
	if m := r.deps.Metrics; m != nil {
		m.ReconcilerInterval.Set(r.cfg.Interval.Seconds())
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		res, err := r.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			r.deps.Log.Warn("reconciler pass failed", "err", err)
		case r.deps.ReportFunc != nil:
			r.deps.ReportFunc(res)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce checks every preheated item; with Fix, it then repairs the drifted
// ones under the fix lock and checks again. The error is for a pass that
// could not run at all; an item that could not be checked carries its own.
// The pass is one trace: a span per pass, a child span per item checked.
func (r *Reconciler) RunOnce(ctx context.Context) (res Result, err error) {
	ctx, span := telemetry.Tracer().Start(ctx, "reconciler pass")
	defer func() {
		if span.IsRecording() {
			f := res.Final()
			span.SetAttributes(attribute.Bool("reconciler.fix", r.cfg.Fix), attribute.Int("reconciler.items", len(f.Items)),
				attribute.Int("reconciler.drifted", f.Drifted()), attribute.Int("reconciler.item_errors", f.Errors()),
				attribute.Int("reconciler.repaired", len(res.Fixed)))
			if res.FixError != "" {
				telemetry.RecordError(span, errors.New(res.FixError))
			}
		}
		telemetry.RecordError(span, err)
		span.End()
	}()
	return r.runOnce(ctx)
}

func (r *Reconciler) runOnce(ctx context.Context) (Result, error) {
	found, err := r.pass(ctx, nil, nil)
	if err != nil {
		r.count("error")
		return Result{}, err
	}
	res := Result{Found: found}
	if r.cfg.Fix {
		var todo []stock.Item
		for _, it := range found.Items {
			// An incomplete marker index costs every pass a keyspace scan;
			// the fix, having scanned, completes it.
			if it.Drifted() || it.Error != "" || it.MarkerIndex == "incomplete" {
				todo = append(todo, it.Item())
			}
		}
		if len(todo) > 0 {
			res.Fixed, err = r.fix(ctx, todo)
			if err != nil {
				res.FixError = err.Error()
				if ctx.Err() != nil {
					// Stopped (SIGTERM, a CronJob's deadline): not a fault
					// to page on; the pass's result still says it failed.
					r.deps.Log.InfoContext(ctx, "fixing drift stopped: shutting down", "err", err)
				} else {
					r.deps.Log.ErrorContext(ctx, "fixing drift", "err", err)
				}
			}
			after, err := r.pass(ctx, nil, nil)
			if err != nil {
				r.count("error")
				return res, err
			}
			res.After = &after
		}
	}
	r.observe(res)
	return res, nil
}

// fix repairs items under the fix lock; each item's repair runs in a
// transaction that first checks the lock's fencing token, so a fixer that
// lost the lock cannot write.
func (r *Reconciler) fix(ctx context.Context, items []stock.Item) ([]ItemReport, error) {
	var fixed []ItemReport
	// After a Redis data loss the lock's fencing counter restarts low, and
	// Postgres would refuse every token below the newest it recorded: the
	// fix that the loss calls for could never run.
	recorded, err := r.deps.Orders.RecordedFence(ctx, FixLockName)
	if err != nil {
		return nil, err
	}
	if raised, err := r.deps.Locker.RaiseFence(ctx, FixLockName, recorded); err != nil {
		return nil, err
	} else if raised {
		r.deps.Log.Warn("fencing counter of the fix lock was below the token Postgres recorded (Redis lost it): raised",
			"lock", FixLockName, "recorded", recorded)
	}
	err = r.deps.Locker.Do(ctx, FixLockName, r.cfg.LockTTL, func(ctx context.Context, l *lock.Lock) error {
		rep, err := r.pass(ctx, items, l)
		for _, it := range rep.Items {
			if it.Drifted() {
				r.deps.Log.Warn("repaired drift", itemAttrs(it)...)
			}
			if it.Error != "" {
				err = errors.Join(err, fmt.Errorf("fixing %s: %s", it.Item(), it.Error))
			}
		}
		fixed = rep.Items
		return err
	}, lock.WithMaxWait(r.cfg.LockWait))
	return fixed, err
}

// pass checks the preheated items (only those listed, if any); with l it
// fixes them under that lock.
func (r *Reconciler) pass(ctx context.Context, only []stock.Item, l *lock.Lock) (Report, error) {
	rep := Report{CheckedAt: clock.Now().UTC(), Items: []ItemReport{}}
	// The last minute before the keys expire is left alone: an expiry racing
	// with the check is not drift.
	items, err := r.deps.Orders.PreheatedItems(ctx, stock.StockGrace-time.Minute)
	if err != nil {
		return rep, err
	}
	if only != nil {
		items = slices.DeleteFunc(items, func(si order.SaleItem) bool {
			return !slices.Contains(only, stock.Item{ActivityID: si.ActivityID, ItemID: si.ItemID})
		})
	}
	// Read before any row is locked (a scan can be long): a marker created
	// after the read began belongs to a reservation in flight or to a live
	// order, whose markers are read anyway.
	markers, err := r.readMarkers(ctx, items)
	if err != nil {
		return rep, err
	}
	for _, si := range items {
		it := stock.Item{ActivityID: si.ActivityID, ItemID: si.ItemID}
		var ir ItemReport
		for attempt := 1; ; attempt++ {
			ir, err = r.tracedItem(ctx, si, markers, l)
			if err == nil || attempt >= r.cfg.Attempts || ctx.Err() != nil || errors.Is(err, lock.ErrStaleFence) {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
		if err != nil {
			ir = ItemReport{ActivityID: it.ActivityID, ItemID: it.ItemID, Error: err.Error()}
		}
		rep.Items = append(rep.Items, ir)
	}
	return rep, nil
}

// tracedItem is item in its own span.
func (r *Reconciler) tracedItem(ctx context.Context, si order.SaleItem, markers markerView, l *lock.Lock) (rep ItemReport, err error) {
	name := "reconcile item"
	if l != nil {
		name = "repair item"
	}
	ctx, span := telemetry.Tracer().Start(ctx, name)
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int64("order.activity_id", si.ActivityID), attribute.Int64("order.item_id", si.ItemID),
				attribute.Int64("reconciler.drift", rep.Drift), attribute.Bool("reconciler.drifted", rep.Drifted()))
		}
		telemetry.RecordError(span, err)
		span.End()
	}()
	if si.Buckets > 1 {
		return r.bucketedItem(ctx, si, markers, l)
	}
	return r.item(ctx, si, markers, l)
}

// item checks one item (fixes it when l is set) while holding its stock row.
func (r *Reconciler) item(ctx context.Context, si order.SaleItem, markers markerView, l *lock.Lock) (ItemReport, error) {
	it := stock.Item{ActivityID: si.ActivityID, ItemID: si.ItemID}
	markerUsers := markers.users[it]
	opts := order.LockOptions{LockTimeout: r.cfg.RowLockTimeout}
	if l != nil {
		opts.FenceFunc = func(ctx context.Context, tx order.Execer) error { return l.CheckFence(ctx, tx) }
	}
	rep := ItemReport{ActivityID: it.ActivityID, ItemID: it.ItemID, MarkerIndex: markers.state(it)}
	if l != nil {
		// Before the fix puts the sale back on: a retry that arrives once it
		// is on sale again must find its dedup record and replay.
		if err := r.restoreDedup(ctx, it, &rep); err != nil {
			return rep, err
		}
	}
	err := r.deps.Orders.WithItemLocked(ctx, it.ActivityID, it.ItemID, opts, func(ctx context.Context, li *order.LockedItem) error {
		// Read under the lock: an entry created as an order must be known
		// as such, and no entry journaled from now on can be.
		rids, err := r.deps.Stock.JournalIDs(ctx, it)
		if err != nil {
			return err
		}
		created, err := li.CreatedAmong(ctx, rids)
		if err != nil {
			return err
		}
		users := make([]int64, 0, len(li.Live)+len(markerUsers))
		for u := range li.Live {
			users = append(users, u)
		}
		users = append(users, markerUsers...)
		slices.Sort(users)
		users = slices.Compact(users)
		e := expected(li, li.Stock, created, li.Pending, users)
		e.Scanned = markers.scanned[it]
		check := r.deps.Stock.Check
		if l != nil {
			check = r.deps.Stock.Fix
		}
		o, err := check(ctx, it, e)
		if err != nil {
			return err
		}
		decode(o, li.Stock, &rep)
		return nil
	})
	return rep, err
}

// expected is what Postgres, read under the item's row lock, says the item
// (one bucket of it) holds in Redis.
func expected(li *order.LockedItem, dbStock int64, created map[string]string, comps []order.Compensation, users []int64) stock.Expected {
	e := stock.Expected{Stock: dbStock, StartsAt: li.StartsAt, EndsAt: li.EndsAt, Cap: li.PerUserLimit,
		Created: created, Users: users, Live: li.Live}
	for _, c := range comps {
		e.Pending = append(e.Pending, stock.Pending{Ref: stock.Ref{RequestID: c.RequestID, OrderNo: c.OrderNo}, Quantity: c.Quantity})
	}
	return e
}

// restoreDedup rebuilds lost dedup records of recently decided requests, so
// a client retrying an accepted request after a Redis failover gets its
// first answer back instead of a new reservation that Postgres would refuse.
func (r *Reconciler) restoreDedup(ctx context.Context, it stock.Item, rep *ItemReport) error {
	decided, err := r.deps.Orders.ProcessedSince(ctx, it.ActivityID, it.ItemID, stock.DedupLifetime)
	if err != nil {
		return err
	}
	recs := make([]stock.Decided, len(decided))
	for i, d := range decided {
		ev := event.OrderRequested{RequestID: d.RequestID, OrderNo: d.OrderNo, UserID: d.UserID, ActivityID: d.ActivityID,
			ItemID: d.ItemID, Quantity: d.Quantity, ReservedAt: d.ReservedAt.UTC()}
		recs[i] = stock.Decided{RequestID: d.RequestID, OrderNo: d.OrderNo, Event: ev.Marshal(),
			Fingerprint: stock.Fingerprint(d.UserID, d.ActivityID, d.ItemID, d.Quantity)}
	}
	// A replay reports the remaining stock of its first answer; that number
	// is lost with the record, and 0 is the honest lower bound.
	rep.RestoredDedup, err = r.deps.Stock.RestoreDedup(ctx, it, recs, 0)
	return err
}

// decode fills rep from what the check observed.
func decode(o stock.Observed, dbStock int64, rep *ItemReport) {
	rep.DBStock = dbStock
	rep.StockKey = o.StockKey
	if o.StockKey == "ok" {
		n := o.Stock
		rep.RedisStock = &n
	}
	rep.InFlight = o.InFlight
	rep.InFlightReservations = o.Entries
	rep.PendingCompensations = o.Compensations
	rep.Sale = o.Sale
	rep.MissingMarkers, rep.WrongMarkers, rep.ExtraMarkers = o.Missing, o.Wrong, o.Extra
	rep.UnreadableEntries = o.Unreadable
	rep.ExpectedRedisStock = dbStock - rep.InFlight
	rep.Drift = o.Stock - rep.ExpectedRedisStock
}

// markerView is the users holding a limit marker, per item bucket, as the
// pass read them: from each bucket's marker index, or, for the buckets whose
// index does not vouch for every marker, from a keyspace scan (scanned).
type markerView struct {
	users   map[stock.Item][]int64
	scanned map[stock.Item]bool
}

// state is the item's MarkerIndex: "incomplete" when any of its buckets
// was scanned.
func (v markerView) state(base stock.Item) string {
	for it := range v.scanned {
		if it.ActivityID == base.ActivityID && it.ItemID == base.ItemID {
			return "incomplete"
		}
	}
	return "ok"
}

// readMarkers reads the markers of the items' buckets from their marker
// indexes, so a pass costs what the items hold, not what Redis holds. Only
// when an index does not vouch for itself does the pass scan the keyspace
// (once, for all such buckets), as every pass did before there was an index.
func (r *Reconciler) readMarkers(ctx context.Context, items []order.SaleItem) (markerView, error) {
	v := markerView{users: map[stock.Item][]int64{}, scanned: map[stock.Item]bool{}}
	for _, si := range items {
		for b := range max(si.Buckets, 1) {
			it := stock.Item{ActivityID: si.ActivityID, ItemID: si.ItemID, Bucket: b}
			users, complete, err := r.deps.Stock.Markers(ctx, it)
			if err != nil {
				return v, err
			}
			v.users[it] = users
			if !complete {
				v.scanned[it] = true
			}
		}
	}
	if len(v.scanned) == 0 {
		return v, nil
	}
	found, err := r.deps.Stock.ScanMarkers(ctx)
	if err != nil {
		return v, err
	}
	for it := range v.scanned {
		// The index's own members too: a marker deleted since the scan
		// passed its key is still checked (and, if stale, dropped by a fix).
		v.users[it] = append(v.users[it], found[it]...)
	}
	return v, nil
}

// observe records the pass in the metrics and the log.
func (r *Reconciler) observe(res Result) {
	final := res.Final()
	result := "clean"
	switch {
	case final.Drifted() > 0:
		result = "drift"
	case final.Errors() > 0 || res.FixError != "":
		result = "error"
	case res.Found.Drifted() > 0:
		// The gauges show what is left after the pass (nothing); that
		// there was drift to repair stays visible here and in repairs.
		result = "repaired"
	}
	r.count(result)
	repaired := map[stock.Item]bool{}
	if m := r.deps.Metrics; m != nil {
		for _, it := range res.Fixed {
			if it.Drifted() {
				m.ReconcilerRepairs.WithLabelValues(strconv.FormatInt(it.ActivityID, 10), strconv.FormatInt(it.ItemID, 10)).Inc()
				repaired[it.Item()] = true
			}
		}
		if result != "error" {
			m.ReconcilerLastSuccess.Set(float64(time.Now().UnixNano()) / 1e9)
		}
	}
	for _, it := range final.Items {
		switch {
		case it.Error != "":
			r.deps.Log.Warn("reconciler could not check item", "activity_id", it.ActivityID, "item_id", it.ItemID, "err", it.Error)
		case it.Drifted():
			r.deps.Log.Warn("drift between redis and postgres", itemAttrs(it)...)
		}
	}
	m := r.deps.Metrics
	if m == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[stock.Item]bool{}
	for _, it := range final.Items {
		if it.Error != "" {
			continue
		}
		a, i := strconv.FormatInt(it.ActivityID, 10), strconv.FormatInt(it.ItemID, 10)
		m.ReconcilerDrift.WithLabelValues(a, i).Set(float64(it.Drift))
		m.ReconcilerMarkerDrift.WithLabelValues(a, i).Set(float64(len(it.MissingMarkers) + len(it.ExtraMarkers) + len(it.WrongMarkers)))
		// A lost sale (Redis lost its keys: orders answered 503) or stock
		// key can leave the unit drift at 0: a gauge of its own.
		m.ReconcilerSaleDrift.WithLabelValues(a, i).Set(b2f(it.Sale != "ok" || it.StockKey != "ok"))
		// Exported at 0 from the first pass on, so increase() sees the
		// first repair of the item.
		m.ReconcilerRepairs.WithLabelValues(a, i)
		// The same as a gauge of this pass alone: what a pushed --once run
		// can show (its counters start again at every run).
		m.ReconcilerLastPassRepaired.WithLabelValues(a, i).Set(b2f(repaired[it.Item()]))
		seen[it.Item()] = true
	}
	for it := range r.gauged {
		if !seen[it] {
			a, i := strconv.FormatInt(it.ActivityID, 10), strconv.FormatInt(it.ItemID, 10)
			m.ReconcilerDrift.DeleteLabelValues(a, i)
			m.ReconcilerMarkerDrift.DeleteLabelValues(a, i)
			m.ReconcilerSaleDrift.DeleteLabelValues(a, i)
			m.ReconcilerRepairs.DeleteLabelValues(a, i)
			m.ReconcilerLastPassRepaired.DeleteLabelValues(a, i)
		}
	}
	r.gauged = seen
}

func (r *Reconciler) count(result string) {
	if m := r.deps.Metrics; m != nil {
		m.ReconcilerPasses.WithLabelValues(result).Inc()
		failed := 0.0
		if result == "error" {
			failed = 1
		}
		m.ReconcilerLastPassError.Set(failed)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func itemAttrs(it ItemReport) []any {
	var redisStock any // nil: the JSON log's null, as in the report
	if it.RedisStock != nil {
		redisStock = *it.RedisStock // the number, not the pointer's address (a text handler prints that)
	}
	return []any{"activity_id", it.ActivityID, "item_id", it.ItemID, "stock_key", it.StockKey, "redis_stock", redisStock,
		"db_stock", it.DBStock, "in_flight", it.InFlight, "drift", it.Drift, "sale", it.Sale,
		"missing_markers", len(it.MissingMarkers), "extra_markers", len(it.ExtraMarkers), "wrong_markers", len(it.WrongMarkers)}
}
