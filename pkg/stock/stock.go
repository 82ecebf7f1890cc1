// Package stock owns the Redis side of a sale: the key layout under one hash
// tag per activity item (internal/layout), and the Lua scripts that reserve,
// claim, acknowledge and release reservations, move stock between buckets,
// and check and fix an item against Postgres (reconcile.lua). Nothing else
// names a key or holds the client: the others call typed methods, tests go
// through stocktest. Every script touches keys of a single item only, so the
// layout works on Redis Cluster. It never talks to Postgres: Postgres is the
// truth and Redis a fast projection the reconciler can rebuild.
package stock

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/clock"
	"orderpipe/pkg/stock/internal/layout"
)

var (
	//go:embed reserve.lua
	reserveLua string
	//go:embed release.lua
	releaseLua string
	//go:embed claim.lua
	claimLua string
	//go:embed ack.lua
	ackLua string
	//go:embed restore.lua
	restoreLua string
	//go:embed publish.lua
	publishLua string
	//go:embed end.lua
	endLua string
	//go:embed load.lua
	loadLua string
	//go:embed arm.lua
	armLua string

	reserveScript = redis.NewScript(reserveLua)
	releaseScript = redis.NewScript(releaseLua)
	claimScript   = redis.NewScript(claimLua)
	ackScript     = redis.NewScript(ackLua)
	restoreScript = redis.NewScript(restoreLua)
	publishScript = redis.NewScript(publishLua)
	endScript     = redis.NewScript(endLua)
	loadScript    = redis.NewScript(loadLua)
	armScript     = redis.NewScript(armLua)
)

const (
	// DedupLifetime is the minimum life of a dedup record (the contract: ≥ 24 h).
	DedupLifetime = 24 * time.Hour
	// FateLifetime is how long the release guard and claims are remembered;
	// longer than any close-after an operator would configure.
	FateLifetime = 30 * 24 * time.Hour
	// StockGrace keeps the stock key after the sale ends (the contract: endsAt + 1h).
	StockGrace = time.Hour
	// MarkerLife is how long limit markers (and their index) live after the
	// sale ends; reserve.lua writes the same 86400 s.
	MarkerLife = 24 * time.Hour
)

// Item names one activity item, or one bucket of it: an item whose stock is
// split over B buckets (see buckets.go) has B sets of keys, bucket b > 0
// under its own hash tag; bucket 0 is the item's own layout.
type Item struct {
	ActivityID int64
	ItemID     int64
	Bucket     int
}

// Tag is the item's (bucket's) Redis Cluster hash tag: {a<a>:i<i>} for
// bucket 0, {a<a>:i<i>:b<b>} for bucket b > 0.
func (it Item) Tag() string {
	if it.Bucket > 0 {
		return fmt.Sprintf("{a%d:i%d:b%d}", it.ActivityID, it.ItemID, it.Bucket)
	}
	return fmt.Sprintf("{a%d:i%d}", it.ActivityID, it.ItemID)
}

// String is the item as "activity:item", the Kafka message key (the same
// for every bucket).
func (it Item) String() string { return fmt.Sprintf("%d:%d", it.ActivityID, it.ItemID) }

// IndexComplete is the MarkerIndex member that vouches for the index: written
// when the index started with the item's stock (Load of a fresh sale), or by
// the reconciler's fix after it found the item's markers by a keyspace scan.
// An index without it (markers set by a binary that kept none, or an index
// Redis lost) is read by a scan instead. Never a user id: those are numbers.
const IndexComplete = "*"

// Store runs the scripts against one Redis (or cluster).
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	// reserves pipelines the reserves, and the marks (MarkPublished) ride
	// along: the gateway marks every 202, one more call per order.
	reserves *batcher
	// wait, when Replicas > 0, is asked of every write a decision rests
	// on: the reserve (batcher.wait) and the worker's claim (ClaimEntries).
	wait ReplicaWait
}

// New returns a Store; prefix is prepended to every key (tests isolate with it).
func New(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix, reserves: &batcher{rdb: rdb, script: reserveScript}}
}

// ReplicaWait makes each reserve and each claim wait, on its connection,
// until Replicas replicas have acknowledged its writes or Timeout has passed
// (Redis's WAIT), so the gateway can tell a reservation that a failover
// would keep from one that lives on the primary alone, and the worker
// decides only reservations whose claim a failover would keep. Replicas 0
// is off.
type ReplicaWait struct {
	Replicas int
	Timeout  time.Duration
}

// ErrWaitOnCluster refuses a ReplicaWait on Redis Cluster: a pipeline there
// is split over the nodes by slot, and WAIT, which names no key, would go to
// any node and count the replication of writes it never saw.
var ErrWaitOnCluster = errors.New("waiting for replicas is not supported on Redis Cluster")

// WaitForReplicas sets the ReplicaWait of reserves and claims; call it
// before the store is used.
func (s *Store) WaitForReplicas(w ReplicaWait) error {
	if w.Replicas < 0 || w.Replicas > 0 && w.Timeout < time.Millisecond {
		return fmt.Errorf("replica wait %d within %s: want replicas ≥ 0 and a timeout of at least 1ms", w.Replicas, w.Timeout)
	}
	if _, ok := s.rdb.(*redis.ClusterClient); ok && w.Replicas > 0 {
		return ErrWaitOnCluster
	}
	s.reserves.wait, s.wait = w, w
	return nil
}

// ErrUnreplicated fails a claim (ClaimEntries) that fewer replicas than the
// store's ReplicaWait asks acknowledged in time: it holds on the primary
// alone, and a failover may lose it.
var ErrUnreplicated = errors.New("fewer Redis replicas than asked acknowledged the write in time")

// AwaitReplicas returns once every write the primary holds now is on the
// store's ReplicaWait replicas (at once when the wait is off), or fails
// with ErrUnreplicated: it writes a mark (it lives a minute) and WAITs on
// that connection; the mark comes after every earlier write in the one
// replication stream, so the WAIT covers them all. A caller that read
// something from Redis calls it before acting on what it read.
func (s *Store) AwaitReplicas(ctx context.Context) error {
	w := s.wait
	if w.Replicas == 0 {
		return nil
	}
	var wait *redis.Cmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, layout.WaitMark(s.prefix), "1", time.Minute)
		wait = p.Do(ctx, "wait", w.Replicas, w.Timeout.Milliseconds())
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnreplicated, err)
	}
	if acked, _ := wait.Int64(); acked < int64(w.Replicas) {
		return fmt.Errorf("%w: %d of %d replicas within %s", ErrUnreplicated, acked, w.Replicas, w.Timeout)
	}
	return nil
}

// runWaited runs a script; with the store's ReplicaWait on, WAIT follows it
// in one pipeline, on its connection, and fewer acknowledgements than asked
// fail the call with ErrUnreplicated. The script must write whenever its
// answer is to be relied on: WAIT counts what this connection last wrote, and
// a write covers every earlier one on the primary (one replication stream).
func (s *Store) runWaited(ctx context.Context, script *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	w := s.wait
	if w.Replicas == 0 {
		return script.Run(ctx, s.rdb, keys, args...), nil
	}
	run := func(send func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) (cmd, wait *redis.Cmd) {
		// The error is the first failed command's, read from cmd and wait.
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = send(ctx, p, keys, args...)
			wait = p.Do(ctx, "wait", w.Replicas, w.Timeout.Milliseconds())
			return nil
		})
		return cmd, wait
	}
	cmd, wait := run(script.EvalSha)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd, wait = run(script.Eval)
	}
	if cmd.Err() != nil {
		return cmd, nil
	}
	acked, err := wait.Int64()
	if err != nil {
		return cmd, fmt.Errorf("%w: WAIT failed: %w", ErrUnreplicated, err)
	}
	if acked < int64(w.Replicas) {
		return cmd, fmt.Errorf("%w: %d of %d replicas within %s", ErrUnreplicated, acked, w.Replicas, w.Timeout)
	}
	return cmd, nil
}

// keys are the item's (bucket's) Redis keys.
func (s *Store) keys(it Item) layout.Keys { return layout.For(s.prefix, it.Tag()) }

// Outcome is what the reserve script decided.
type Outcome string

const (
	Reserved             Outcome = "RESERVED"
	Replayed             Outcome = "REPLAYED"
	IdempotencyKeyReused Outcome = "IDEMPOTENCY_KEY_REUSED"
	NotOnSale            Outcome = "NOT_ON_SALE"
	OverCap              Outcome = "OVER_CAP"
	SoldOut              Outcome = "SOLD_OUT"
	AlreadyPurchased     Outcome = "ALREADY_PURCHASED"
	// ReleasedBefore: this orderNo was released before its reserve ran (a
	// late copy of the call); nothing changed.
	ReleasedBefore Outcome = "ABORTED"
	// InProgress: a retry of a request whose first attempt's event is not
	// durable yet (not acked by Kafka, not claimed, not in Postgres); its
	// orderNo must not be shown. Nothing changed.
	InProgress Outcome = "IN_PROGRESS"
	// NoRecord: a replay-only call (Reservation.ReplayOnly) found no
	// record of the requestId; nothing was reserved.
	NoRecord Outcome = "NO_RECORD"
	// WrongBuckets: the sale is split over another number of buckets than
	// Reservation.Buckets (the caller read the count before the sale was
	// armed); Remaining is the sale's count. Nothing changed.
	WrongBuckets Outcome = "WRONG_BUCKETS"
)

// Fingerprint identifies an order request's payload, so the reserve script
// tells a retry (same payload) from a reused requestId.
func Fingerprint(userID, activityID, itemID int64, quantity int) string {
	// "<user>|<activity>|<item>|<quantity>": stored in dedup records, so it
	// must never change.
	var buf [80]byte
	b := strconv.AppendInt(buf[:0], userID, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, activityID, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, itemID, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(quantity), 10)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:12])
}

// Reservation is one order request as the reserve script sees it.
type Reservation struct {
	Item
	RequestID   string
	OrderNo     string // used if the request is new
	UserID      int64
	Quantity    int
	Fingerprint string // of the payload, to tell a replay from a reused key
	Event       []byte // journaled and produced as is
	// TraceParent, when set, is kept in the dedup record (field "tp") so
	// the order's trace can be found from its requestId (orderpipe locate)
	// and linked from its release.
	TraceParent string
	// ReplayOnly answers a retry from its dedup record as usual (Replayed,
	// InProgress, IdempotencyKeyReused) and reserves nothing for a request
	// without one (NoRecord): the gateway's answer while the order queue is
	// known to be down.
	ReplayOnly bool
	// Buckets is the bucket count the caller routed the user by (Item.Bucket
	// is BucketOf(UserID, Buckets)); a sale split otherwise answers
	// WrongBuckets. 0: not checked (a caller that names the bucket itself).
	Buckets int
}

// ReserveResult is the script's answer. For Replayed it carries the first
// reservation's orderNo and remaining; for OverCap, Remaining is the cap.
type ReserveResult struct {
	Outcome   Outcome
	OrderNo   string
	Remaining int64
	// OutsideWindow, with NotOnSale: the sale is in Redis and Redis's
	// clock is outside its window (otherwise its keys are missing).
	OutsideWindow bool
	// OpensIn, with OutsideWindow: how long before the sale starts, by
	// Redis's clock, the script ran (0: the sale has ended).
	OpensIn time.Duration
	// Unreplicated: the store waits for replicas (WaitForReplicas) and fewer
	// than asked acknowledged this call's writes (and those its connection
	// made before) in time. What the script wrote, or read as written, is on
	// the primary alone, and a failover may lose it.
	Unreplicated bool
	// ReservedAt, with Replayed, is when the first attempt reserved (its
	// event's reservedAt; zero if the record's event does not say).
	ReservedAt time.Time
}

// Reserve runs the reserve script: one round trip, in a pipeline shared
// with the concurrent calls (see batcher). A context that ends before the
// call is sent fails it with ErrNotSent; one that ends later does not
// cancel it.
func (s *Store) Reserve(ctx context.Context, r Reservation) (ReserveResult, error) {
	k := s.keys(r.Item)
	cmd, acked := s.reserves.runAcked(ctx,
		[]string{k.Stock, k.Sale, k.Limit(r.UserID), k.Req(r.RequestID), k.Journal, k.Order(r.OrderNo), k.Fate(r.OrderNo),
			k.MarkerIndex()},
		r.RequestID, r.Fingerprint, r.OrderNo, r.Quantity, r.Event, int64(DedupLifetime/time.Second),
		r.TraceParent, r.UserID, replayOnlyArg(r.ReplayOnly), bucketsArg(r.Buckets),
	)
	res, err := cmd.Slice()
	if err != nil {
		return ReserveResult{}, fmt.Errorf("running reserve script: %w", err)
	}
	if len(res) != 3 && len(res) != 4 {
		return ReserveResult{}, fmt.Errorf("reserve script answered %d values", len(res))
	}
	out := ReserveResult{Unreplicated: acked < int64(s.reserves.wait.Replicas)}
	out.Outcome = Outcome(fmt.Sprint(res[0]))
	out.OrderNo = fmt.Sprint(res[1])
	if out.Outcome == NotOnSale {
		out.OutsideWindow, out.OrderNo = out.OrderNo == "window", ""
	}
	if n, ok := res[2].(int64); ok {
		out.Remaining = n
	}
	if len(res) == 4 {
		out.ReservedAt = reservedAt(fmt.Sprint(res[3]))
	}
	if out.Outcome == NotOnSale {
		out.OpensIn, out.Remaining = time.Duration(out.Remaining)*time.Millisecond, 0
	}
	return out, nil
}

// reservedAt is the reservedAt of a dedup record's event (zero if it has none).
func reservedAt(ev string) time.Time {
	var e struct {
		ReservedAt time.Time `json:"reservedAt"`
	}
	if json.Unmarshal([]byte(ev), &e) != nil {
		return time.Time{}
	}
	return e.ReservedAt
}

// replayOnlyArg is the reserve script's ARGV[9].
func replayOnlyArg(on bool) string {
	if on {
		return "1"
	}
	return ""
}

// bucketsArg is the reserve script's ARGV[10].
func bucketsArg(n int) string {
	if n <= 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// Ref names one reservation.
type Ref struct {
	RequestID string
	OrderNo   string
}

// Release describes a reservation to release (Store.Release).
type Release struct {
	Item
	Ref
	UserID   int64
	Quantity int
	// LimitOwner, when set, hands the user's marker to that requestId instead
	// of deleting it (the user still holds that live order).
	LimitOwner string
}

// ReleaseOutcome is what the release script did.
type ReleaseOutcome string

const (
	Released        ReleaseOutcome = "RELEASED"
	AlreadyReleased ReleaseOutcome = "ALREADY_RELEASED"
	// Claimed: an Unproduced release found the reservation owned by a
	// worker, or decided in Postgres and compensated since (its dedup record
	// kept); the event was delivered after all and the abort released nothing.
	Claimed ReleaseOutcome = "CLAIMED"
	// Shown: an Unproduced release found that a retry of the request was
	// already answered with this orderNo (200 replayed); nothing was released
	// and the journal entry is left for the redrive to publish.
	Shown ReleaseOutcome = "SHOWN"
	// NotReserved: an Unproduced release found no reservation of that
	// orderNo (the reserve whose reply was lost never ran); nothing changed.
	NotReserved ReleaseOutcome = "NOT_RESERVED"
)

// Cause is why a reservation is released, which decides what may stop it.
// Its value is the release script's mode.
type Cause string

const (
	// Unproduced: the gateway could not produce the reservation's event.
	// A worker that already claimed it, or a retry already shown its
	// orderNo, wins: nothing is released then (Claimed, Shown).
	Unproduced Cause = "abort"
	// Compensation: a compensation row asks for the release (Postgres
	// rejected, closed or cancelled the order); it always applies.
	Compensation Cause = "compensate"
)

// Release gives a reservation's stock, and the user's limit marker, back:
// the one release script, applied at most once per reservation however
// often it is called. With the store's ReplicaWait on, the release is
// acknowledged by the replicas before it is reported done: what a release
// answers is told to a client ("nothing was reserved") or marks a
// compensation applied, and a failover right after a release only the
// primary held would bring the reservation back — an order its client was
// told does not exist. Fewer acknowledgements than asked return the
// script's outcome with ErrUnreplicated: it holds on the primary alone,
// and the caller retries (the script is safe to run again).
func (s *Store) Release(ctx context.Context, cause Cause, r Release) (ReleaseOutcome, error) {
	if cause != Unproduced && cause != Compensation {
		return "", fmt.Errorf("releasing %s: unknown cause %q", r.RequestID, cause)
	}
	k := s.keys(r.Item)
	cmd, werr := s.runWaited(ctx, releaseScript,
		[]string{k.Stock, k.Limit(r.UserID), k.Journal, k.Fate(r.OrderNo), k.Req(r.RequestID), k.Order(r.OrderNo), k.MarkerIndex()},
		r.RequestID, r.OrderNo, r.Quantity, string(cause), r.LimitOwner, int64(FateLifetime/time.Second), r.UserID,
	)
	res, err := cmd.Text()
	if err != nil {
		return "", fmt.Errorf("running release script: %w", err)
	}
	if werr != nil {
		return ReleaseOutcome(res), fmt.Errorf("releasing %s: %w", r.RequestID, werr)
	}
	return ReleaseOutcome(res), nil
}

// ClaimStatus is the claim script's answer for one reservation.
type ClaimStatus string

const (
	ClaimOK       ClaimStatus = "CLAIMED"
	ClaimReleased ClaimStatus = "RELEASED"
	ClaimUnknown  ClaimStatus = "UNKNOWN"
)

// Claim takes ownership of reservations of one item, in refs order.
func (s *Store) Claim(ctx context.Context, it Item, refs []Ref) ([]ClaimStatus, error) {
	claims, err := s.ClaimEntries(ctx, it, refs)
	if err != nil {
		return nil, err
	}
	out := make([]ClaimStatus, len(claims))
	for i, c := range claims {
		out[i] = c.Status
	}
	return out, nil
}

// Claim is the claim script's answer for one reservation: its status and
// the journal entry the gateway wrote for it (nil when the journal no longer
// holds it: decided, or lost with Redis).
type Claim struct {
	Status ClaimStatus
	Entry  []byte
}

// ClaimEntries is Claim that also returns each reservation's journal entry:
// the truth of what was reserved, whatever the message that named it says.
// With a ReplicaWait (WaitForReplicas) it fails with ErrUnreplicated unless
// the claims are on that many replicas: a claim a failover loses would let
// the gateway's abort give back, on the promoted replica, a reservation the
// worker goes on to make an order of — and the retry a second orderNo.
func (s *Store) ClaimEntries(ctx context.Context, it Item, refs []Ref) ([]Claim, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	k := s.keys(it)
	keys := make([]string, 0, 2*len(refs)+1)
	args := make([]any, 0, 2*len(refs)+1)
	keys = append(keys, k.Journal)
	args = append(args, int64(FateLifetime/time.Second))
	for _, r := range refs {
		keys = append(keys, k.Fate(r.OrderNo), k.Req(r.RequestID))
		args = append(args, r.RequestID, r.OrderNo)
	}
	cmd, werr := s.runWaited(ctx, claimScript, keys, args...)
	res, err := cmd.StringSlice()
	if err != nil {
		return nil, fmt.Errorf("running claim script: %w", err)
	}
	if werr != nil {
		return nil, werr
	}
	if len(res) != 2*len(refs) {
		return nil, fmt.Errorf("claim script answered %d of %d", len(res)/2, len(refs))
	}
	out := make([]Claim, len(refs))
	for i := range out {
		out[i].Status = ClaimStatus(res[2*i])
		if e := res[2*i+1]; e != "" {
			out[i].Entry = []byte(e)
		}
	}
	return out, nil
}

// markLinger is how long a mark waits for a reserve to share a pipeline
// with (batcher.runLazy): at 1000 orders a second one comes every
// millisecond, and a retry waits for the mark at most this much longer.
const markLinger = 2 * time.Millisecond

// MarkPublished marks reservations of one item durable (their event is in
// Kafka), so a retry of their request is shown the orderNo; a record that no
// longer holds the orderNo is left alone. It returns how many it marked.
// The marks ride in the reserves' pipelines, waiting up to markLinger for
// one (see batcher); a call whose context ends before it is sent fails with
// ErrNotSent and marks nothing.
func (s *Store) MarkPublished(ctx context.Context, it Item, refs []Ref) (int64, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	k := s.keys(it)
	keys := make([]string, len(refs))
	args := make([]any, len(refs))
	for i, r := range refs {
		keys[i], args[i] = k.Req(r.RequestID), r.OrderNo
	}
	n, err := s.reserves.runLazy(ctx, publishScript, markLinger, keys, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("running publish script: %w", err)
	}
	return n, nil
}

// Ack drops the journal entries of committed orders of one item.
func (s *Store) Ack(ctx context.Context, it Item, refs []Ref) (int64, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 2*len(refs))
	for _, r := range refs {
		args = append(args, r.RequestID, r.OrderNo)
	}
	n, err := ackScript.Run(ctx, s.rdb, []string{s.keys(it).Journal}, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("running ack script: %w", err)
	}
	return n, nil
}

// Sale is what preheat loads for one item.
type Sale struct {
	Item
	Stock    int64
	StartsAt time.Time
	EndsAt   time.Time
	Cap      int // max quantity a user may order of this item
	// Buckets splits the stock over that many buckets (buckets.go); 0 or 1
	// is the plain layout.
	Buckets int
}

// ErrSaleOver is returned when preheating a sale that has ended.
var ErrSaleOver = errors.New("sale has ended")

// Preheat loads an item's stock and puts it on sale: Load, then Arm. The
// admin API's preheat records the item in Postgres between the two
// (gateway/admin.go); this is for callers that own the whole sale (tests,
// the load tool).
func (s *Store) Preheat(ctx context.Context, sale Sale) (loaded bool, err error) {
	if loaded, err = s.Load(ctx, sale); err != nil {
		return loaded, err
	}
	return loaded, s.Arm(ctx, sale)
}

// Load is a preheat's first Redis step: each bucket's stock key gets its
// share (Split) unless it holds one already, so a repeated preheat never
// overwrites a running sale's stock, and every key expires an hour after
// the sale ends; a fresh bucket's marker index starts complete (load.lua).
// It writes no sale hash: without one the reserve script answers
// NOT_ON_SALE, so a preheat that stops here sells nothing. It reports
// whether this call loaded any bucket. One script per bucket (they are
// separate slots), all in one pipeline.
func (s *Store) Load(ctx context.Context, sale Sale) (loaded bool, err error) {
	expireAt := sale.EndsAt.Add(StockGrace)
	if !expireAt.After(clock.Now()) {
		return false, ErrSaleOver
	}
	var calls []scriptCall
	for b, share := range Split(sale.Stock, sale.Buckets) {
		it := sale.Item
		it.Bucket = b
		k := s.keys(it)
		calls = append(calls, scriptCall{keys: []string{k.Stock, k.MarkerIndex()},
			args: []any{share, expireAt.Unix(), sale.EndsAt.Add(MarkerLife).Unix()}})
	}
	cmds, err := s.pipelined(ctx, loadScript, calls)
	if err != nil {
		return false, fmt.Errorf("loading %s: %w", sale.Item, err)
	}
	for b, c := range cmds {
		n, err := c.Int()
		if err != nil {
			return false, fmt.Errorf("loading %s bucket %d: %w", sale.Item, b, err)
		}
		loaded = loaded || n == 1
	}
	return loaded, nil
}

// Markers reads the item's (bucket's) marker index: the users it lists and
// whether it vouches for holding every marker (IndexComplete). Its cost is
// the index's size, whatever else Redis holds.
func (s *Store) Markers(ctx context.Context, it Item) (users []int64, complete bool, err error) {
	iter := s.rdb.SScan(ctx, s.keys(it).MarkerIndex(), 0, "", 1000).Iterator()
	for iter.Next(ctx) {
		v := iter.Val()
		if v == IndexComplete {
			complete = true
			continue
		}
		if u, err := strconv.ParseInt(v, 10, 64); err == nil {
			users = append(users, u)
		}
	}
	if err := iter.Err(); err != nil {
		return nil, false, fmt.Errorf("reading the marker index of %s: %w", it, err)
	}
	// SSCAN may return a member twice.
	slices.Sort(users)
	return slices.Compact(users), complete, nil
}

// Arm is a preheat's last step, once Postgres records the item preheated:
// it (re)writes each bucket's sale hash (window, cap, and the bucket count
// when more than one), which puts the bucket on sale. Bucket 0 goes last:
// a gateway learns the count from bucket 0's sale (Buckets), so by then
// every bucket is on sale. The count is the one Postgres fixed before Load
// and never changes afterwards, so a gateway may keep it for good.
func (s *Store) Arm(ctx context.Context, sale Sale) error { return s.ArmAll(ctx, []Sale{sale}) }

// ArmAll is Arm for several items in few round trips: every bucket b > 0
// of every item, then every bucket 0, each in pipelines of up to
// ScriptChunk sale hashes (ScriptRoundTrips). The preheat arms while it
// holds a lock on the activity's row that the kill switch waits for, so
// the round trips are what an end may wait behind. Each sale hash is
// written by one script (arm.lua), so it never lacks its expiry.
func (s *Store) ArmAll(ctx context.Context, sales []Sale) error {
	for _, last := range []bool{false, true} {
		var calls []scriptCall
		for _, sale := range sales {
			n := max(sale.Buckets, 1)
			count := ""
			if n > 1 {
				count = strconv.Itoa(n)
			}
			for b := range n {
				if (b == 0) != last {
					continue
				}
				it := sale.Item
				it.Bucket = b
				calls = append(calls, scriptCall{keys: []string{s.keys(it).Sale}, args: []any{sale.StartsAt.UnixMilli(),
					sale.EndsAt.UnixMilli(), sale.Cap, sale.EndsAt.Add(StockGrace).Unix(), count}})
			}
		}
		if _, err := s.pipelined(ctx, armScript, calls); err != nil {
			which := "buckets other than 0"
			if last {
				which = "bucket 0"
			}
			return fmt.Errorf("putting %d item(s) on sale, %s: %w", len(sales), which, err)
		}
	}
	return nil
}

// ScriptChunk is how many script calls one pipeline of Load, ArmAll or End
// carries.
const ScriptChunk = 1000

// ScriptRoundTrips is how many round trips ArmAll (and at most End)
// takes for the sales: a caller bounds each by its Redis timeout.
func ScriptRoundTrips(sales []Sale) int {
	var other, zero int
	for _, sale := range sales {
		other += max(sale.Buckets, 1) - 1
		zero++
	}
	return (other+ScriptChunk-1)/ScriptChunk + (zero+ScriptChunk-1)/ScriptChunk
}

// scriptCall is one call of a script in a pipeline.
type scriptCall struct {
	keys []string
	args []any
}

// pipelined runs the calls of script in pipelines of ScriptChunk, by
// EVALSHA (a pipeline refused for NOSCRIPT is sent again once the script is
// loaded: the scripts it runs are idempotent). Redis Cluster splits each
// pipeline by slot.
func (s *Store) pipelined(ctx context.Context, script *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
	out := make([]*redis.Cmd, 0, len(calls))
	for len(calls) > 0 {
		chunk := calls[:min(len(calls), ScriptChunk)]
		calls = calls[len(chunk):]
		var cmds []*redis.Cmd
		for try := 0; ; try++ {
			p := s.rdb.Pipeline()
			cmds = cmds[:0]
			for _, c := range chunk {
				cmds = append(cmds, script.EvalSha(ctx, p, c.keys, c.args...))
			}
			_, err := p.Exec(ctx)
			if err == nil {
				break
			}
			if try > 0 || !redis.HasErrorPrefix(err, "NOSCRIPT") {
				return nil, err
			}
			if err := script.Load(ctx, s.rdb).Err(); err != nil {
				return nil, fmt.Errorf("loading a script: %w", err)
			}
		}
		out = append(out, cmds...)
	}
	return out, nil
}

// End is the kill switch's Redis step: every bucket's sale window of the
// items ends at the earliest of its own end, at and Redis's now (a sale not
// yet started ends before its start), so from the next reserve script on no
// gateway sells them — every bucket of every item in pipelines of
// ScriptChunk calls, not one round trip each. It answers the earliest end
// the buckets now have, for the caller to record in Postgres so the two
// agree; ok is false when no bucket had a sale (never armed, or expired).
// Only ever moves an end earlier: idempotent. Each bucket keeps the end as
// a tombstone that a later arm (ArmAll) never arms past, a bucket with no
// sale yet too.
func (s *Store) End(ctx context.Context, sales []Sale, at time.Time) (ends time.Time, ok bool, err error) {
	var calls []scriptCall
	for _, sale := range sales {
		for b := range max(sale.Buckets, 1) {
			it := sale.Item
			it.Bucket = b
			calls = append(calls, scriptCall{keys: []string{s.keys(it).Sale}, args: []any{at.UnixMilli(), at.Add(StockGrace).Unix()}})
		}
	}
	cmds, err := s.pipelined(ctx, endScript, calls)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("ending the sale of %d item(s): %w", len(sales), err)
	}
	var last int64 = -1
	for _, c := range cmds {
		r, err := c.Int64Slice()
		if err != nil || len(r) != 2 {
			return time.Time{}, false, fmt.Errorf("ending a sale: the script answered %v %v", r, err)
		}
		if r[1] >= 0 && (last < 0 || r[1] < last) {
			last = r[1]
		}
	}
	if last < 0 {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(last).UTC(), true, nil
}

// Pending looks an orderNo up in the item's dedup records: the reservation's
// event JSON while it is known to Redis.
func (s *Store) Pending(ctx context.Context, it Item, orderNo string) ([]byte, bool, error) {
	k := s.keys(it)
	rid, err := s.rdb.Get(ctx, k.Order(orderNo)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("looking up order %s: %w", orderNo, err)
	}
	ev, err := s.rdb.HGet(ctx, k.Req(rid), "event").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading dedup record of %s: %w", rid, err)
	}
	return ev, true, nil
}

// Journaled is a request's journal entry (the event JSON the gateway
// reserved), if the item's journal still holds it.
func (s *Store) Journaled(ctx context.Context, it Item, requestID string) ([]byte, bool, error) {
	raw, err := s.rdb.HGet(ctx, s.keys(it).Journal, requestID).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading journal entry of %s: %w", requestID, err)
	}
	return raw, true, nil
}

// TraceParent is the W3C traceparent the gateway kept in a request's dedup
// record ("" when none, or the record is gone).
func (s *Store) TraceParent(ctx context.Context, it Item, requestID string) (string, error) {
	tp, err := s.rdb.HGet(ctx, s.keys(it).Req(requestID), "tp").Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading trace of %s: %w", requestID, err)
	}
	return tp, nil
}

// Decided is a decided request whose dedup record RestoreDedup rebuilds.
type Decided struct {
	RequestID   string
	OrderNo     string
	Fingerprint string
	Event       []byte
}

// RestoreDedup rebuilds the missing dedup records (and order-number index)
// of decided requests of one item, leaving existing ones alone; remaining is
// what a replay will report. It returns how many it rebuilt.
func (s *Store) RestoreDedup(ctx context.Context, it Item, recs []Decided, remaining int64) (int64, error) {
	k := s.keys(it)
	// A lifetime, not an instant: Redis's clock decides, not this host's.
	lifetime := int64(DedupLifetime / time.Second)
	var total int64
	for len(recs) > 0 {
		chunk := recs[:min(len(recs), 500)]
		recs = recs[len(chunk):]
		keys := make([]string, 0, 2*len(chunk))
		args := make([]any, 0, 1+5*len(chunk))
		args = append(args, lifetime)
		for _, r := range chunk {
			keys = append(keys, k.Req(r.RequestID), k.Order(r.OrderNo))
			args = append(args, r.Fingerprint, r.OrderNo, remaining, r.Event, r.RequestID)
		}
		n, err := restoreScript.Run(ctx, s.rdb, keys, args...).Int64()
		if err != nil {
			return total, fmt.Errorf("restoring dedup records of %s: %w", it, err)
		}
		total += n
	}
	return total, nil
}

// Entry is one journal entry: a reservation Redis took whose order Postgres
// may not have committed yet.
type Entry struct {
	RequestID string
	OrderNo   string
	Quantity  int64
}

// Snapshot is an item's Redis side read at one instant.
type Snapshot struct {
	// Stock is the remaining stock; nil when the key is missing (not
	// preheated, or expired) or does not hold a number.
	Stock *int64
	// Journal are the journal entries; Unreadable counts those that are
	// not an event with an orderNo and a quantity.
	Journal    []Entry
	Unreadable int
}

// Snapshot reads an item's stock and journal in one MULTI, so the two agree.
func (s *Store) Snapshot(ctx context.Context, it Item) (Snapshot, error) {
	k := s.keys(it)
	var get *redis.StringCmd
	var all *redis.MapStringStringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, k.Stock)
		all = p.HGetAll(ctx, k.Journal)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Snapshot{}, fmt.Errorf("reading stock and journal of %s: %w", it, err)
	}
	var snap Snapshot
	if n, err := get.Int64(); err == nil {
		snap.Stock = &n
	}
	for rid, raw := range all.Val() {
		var ev struct {
			OrderNo  string `json:"orderNo"`
			Quantity *int64 `json:"quantity"`
		}
		if json.Unmarshal([]byte(raw), &ev) != nil || ev.OrderNo == "" || ev.Quantity == nil {
			snap.Unreadable++
			continue
		}
		snap.Journal = append(snap.Journal, Entry{RequestID: rid, OrderNo: ev.OrderNo, Quantity: *ev.Quantity})
	}
	return snap, nil
}
