package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	gwclient "orderpipe/gateway/client"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock/stocktest"
)

// afterHeal is the least load after a fault's heal.
const afterHeal = 3 * time.Second

// Scenario is one fault.
type Scenario struct {
	Name string
	// Fault is injected at a random instant of the load and heals what it
	// broke while the load goes on (a killed process is restarted). It
	// describes what it did.
	Fault func(ctx context.Context, s *Suite, act int64) (string, error)
	// Verify, when set, checks what the scenario is about once drained.
	Verify func(ctx context.Context, s *Suite, act int64) error
	// RealOnly: the fault needs a real Kafka cluster (Config.KafkaNodes);
	// on the kfake broker the scenario does not run.
	RealOnly bool
}

// Scenarios are the suite's faults, in the order they run; each runs on
// activity (its index + 1), whichever run.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "baseline", Fault: func(context.Context, *Suite, int64) (string, error) { return "no fault", nil }},
		{Name: "kill-gateway", Fault: killRestart(named("gateway"), 300*time.Millisecond, 1200*time.Millisecond)},
		{Name: "kill-worker", Fault: killRestart(named("worker"), 300*time.Millisecond, 1200*time.Millisecond)},
		{Name: "kill-closer", Fault: killRestart(named("closer"), 300*time.Millisecond, 1200*time.Millisecond)},
		{Name: "kill-relay", Fault: killRestart(named("relay"), 300*time.Millisecond, 1200*time.Millisecond)},
		{Name: "redis-keys-lost", Fault: redisKeysLost},
		{Name: "broker-restart", Fault: killRestart(saleBroker, 1500*time.Millisecond, 3000*time.Millisecond)},
		{Name: "postgres-toxics", Fault: postgresToxics},
		{Name: "poison-message", Fault: poison, Verify: poisonDeadLettered},
		{Name: "kill-partition-leader", Fault: killPartitionLeader, RealOnly: true},
		{Name: "two-brokers-down", Fault: twoBrokersDown, RealOnly: true},
		{Name: "unclean-broker-restart", Fault: uncleanBrokerRestart, RealOnly: true},
		{Name: "worker-killed-mid-batch", Fault: workerKilledMidBatch, RealOnly: true},
	}
}

// picker chooses the process a fault hits, says why, and which of the
// sale's items it serves (a real broker: the partitions it leads).
type picker func(ctx context.Context, s *Suite, act int64) (p *proc, why string, items []int64, err error)

func named(name string) picker {
	return func(_ context.Context, s *Suite, _ int64) (*proc, string, []int64, error) {
		return s.proc(name), "", nil, nil
	}
}

// saleBroker is the broker: kfake's only one, or on a real cluster the
// leader of most of the sale's partitions.
func saleBroker(ctx context.Context, s *Suite, act int64) (*proc, string, []int64, error) {
	if !s.real() {
		return s.proc("kafka"), "", nil, nil
	}
	id, err := s.saleLeader(ctx, act)
	if err != nil {
		return nil, "", nil, err
	}
	items, why := s.roles(ctx, act, id)
	return s.kafkaProcs[id-1], why, items, nil
}

// killRestart SIGKILLs a process and starts it again after a random pause.
func killRestart(pick picker, minDown, maxDown time.Duration) func(context.Context, *Suite, int64) (string, error) {
	return func(ctx context.Context, s *Suite, act int64) (string, error) {
		down := minDown + time.Duration(s.rng.Int64N(int64(maxDown-minDown)))
		p, why, items, err := pick(ctx, s, act)
		if err != nil {
			return "", err
		}
		if why != "" {
			why = " (" + why + ")"
		}
		at := s.since()
		realBroker := slices.Contains(s.kafkaProcs, p)
		if realBroker {
			// The other brokers serve on: consumption and intake are
			// measured from the kill.
			if _, err := s.killBroker(ctx, act, slices.Index(s.kafkaProcs, p)+1, items); err != nil {
				return "", err
			}
		} else if err := p.kill(); err != nil {
			return "", err
		}
		time.Sleep(down)
		restart := time.Now()
		if err := p.start(); err != nil {
			return "", err
		}
		err = p.waitReady(ctx, 90*time.Second)
		if err == nil && !realBroker && (strings.HasPrefix(p.name, "worker") || p.name == "kafka") {
			s.resumeMeter(ctx, nil)(restart, "the restart")
		}
		ready := "ready"
		if realBroker {
			ready = "in sync"
		}
		return fmt.Sprintf("SIGKILL %s%s at %s, down %s, %s %s after restart", p.name, why, at,
			down.Round(time.Millisecond), ready, time.Since(restart).Round(time.Millisecond)), err
	}
}

// resumeMeter samples the worker group's committed offsets of partitions
// parts (nil: all); the function it returns notes, in the background, how
// long after from (a restart, or a real broker's kill) they grew again (a
// consumer group may wait for a dead member's session to expire before it
// rebalances; a partition, for its new leader).
func (s *Suite) resumeMeter(ctx context.Context, parts []int) func(from time.Time, what string) {
	var base int64
	var err error
	for range 20 { // a broker just restarted may drop the first connection
		if base, err = committedSum(ctx, s.brokers, kafkaTopic, kafkaGroup, parts); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return func(from time.Time, what string) {
		if err != nil {
			s.note(fmt.Sprintf("consumption resume not measured: %v", err))
			return
		}
		s.async(func() string {
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				if n, err := committedSum(ctx, s.brokers, kafkaTopic, kafkaGroup, parts); err == nil && n > base {
					return fmt.Sprintf("worker group committed offsets%s again %s after %s", partsText(parts),
						time.Since(from).Round(100*time.Millisecond), what)
				}
				time.Sleep(100 * time.Millisecond)
			}
			return "worker group did not commit within 2m of " + what
		})
	}
}

// redisKeysLost deletes every Redis key of the sale's items — stock, sale
// window, limit markers, dedup records, journal, fates — as a failover to a
// replica that had none of them would, and repairs with the reconciler's fix
// once the worker has consumed what was already in Kafka (the runbook's
// order: a fix while events of lost journal entries are still queued would
// leave drift for the next check).
func redisKeysLost(ctx context.Context, s *Suite, act int64) (string, error) {
	at := s.since()
	s.setOutage(true)
	defer s.setOutage(false)
	n, err := s.loseSale(ctx, act)
	if err != nil {
		return "", err
	}
	time.Sleep(time.Second) // the gateway answers NOT_ON_SALE meanwhile
	deadline := time.Now().Add(30 * time.Second)
	for {
		lag, err := groupLag(ctx, s.brokers, kafkaTopic, kafkaGroup)
		if err == nil && lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("worker did not catch up within 30s after the keys were lost (lag %d, %v)", lag, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fixAt := s.since()
	code, out := s.reconcile(ctx, "--fix")
	s.setOutage(false)
	desc := fmt.Sprintf("deleted %d keys at %s, worker caught up, reconciler --once --fix at %s exit %d (done %s)",
		n, at, fixAt, code, s.since())
	if code != 0 {
		return desc, fmt.Errorf("reconciler --fix exit %d:\n%s", code, out)
	}
	return desc, nil
}

// postgresToxics slows the worker's and the closer's Postgres connections,
// then resets them (new ones too), then heals.
func postgresToxics(_ context.Context, s *Suite, _ int64) (string, error) {
	at := s.since()
	if err := s.toxi.latency("postgres", 400, 150); err != nil {
		return "", err
	}
	time.Sleep(2 * time.Second)
	resetAt := s.since()
	if err := s.toxi.resetPeer("postgres", 1); err != nil {
		return "", err
	}
	time.Sleep(1500 * time.Millisecond)
	healAt := s.since()
	if err := s.toxi.heal(); err != nil {
		return "", err
	}
	return fmt.Sprintf("latency 400±150ms at %s, reset_peer at %s, healed at %s", at, resetAt, healAt), nil
}

// poisonValues are produced raw to the orders topic by poison.
var poisonValues = [][]byte{
	[]byte("\x00\xffnot json at all\x7f"),
	[]byte(`{"requestId":"poison-truncated","orderNo":"1-1-x`),
	[]byte(`{"requestId":"poison-invalid","orderNo":"nope","userId":-1,"activityId":0,"itemId":0,"quantity":1000}`),
}

// poison produces garbage to the orders topic, keyed like the sale's items
// so it lands in partitions with real orders behind it, and then copies of
// events the gateway really wrote (poisonCopies).
func poison(ctx context.Context, s *Suite, act int64) (string, error) {
	at := s.since()
	var msgs []kafka.Message
	for i, v := range poisonValues {
		msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d:%d", act, 1+i%2), Value: v})
	}
	if err := produceRaw(ctx, s.brokers, kafkaTopic, msgs...); err != nil {
		return "", fmt.Errorf("producing poison: %w", err)
	}
	copies, err := poisonCopies(ctx, s, act, rand.New(rand.NewPCG(uint64(act), uint64(s.poisoned.Add(1)))))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d poison messages produced at %s, then %s", len(msgs), at, copies), nil
}

func poisonDeadLettered(ctx context.Context, s *Suite, _ int64) error {
	n, err := countDelivered(ctx, s.brokers, kafkaDLQTopic, poisonValues, 30*time.Second)
	if err != nil {
		return fmt.Errorf("reading the DLQ: %w", err)
	}
	if n != len(poisonValues) {
		return fmt.Errorf("%d of %d poison messages reached %s", n, len(poisonValues), kafkaDLQTopic)
	}
	return nil
}

// Result is one scenario's outcome.
type Result struct {
	Name          string
	Fault         string
	Load          counts
	Answers       map[string]int
	ReplayAnswers map[string]int
	Audit         *audit
	Drained       time.Duration
	Worker        counterDelta
	Took          time.Duration // reconciler --once
	ReconcileExit int
	Problems      []string
}

// OK reports whether every invariant held.
func (r Result) OK() bool { return len(r.Problems) == 0 }

// Line is the scenario's one-line summary.
func (r Result) Line() string {
	a := r.Audit
	if a == nil {
		a = &audit{lost: -1, duplicates: -1, oversold: -1}
	}
	result := "PASS"
	if !r.OK() {
		result = "FAIL"
	}
	return fmt.Sprintf("%-23s requests=%-5d accepted=%-4d orders=%-4d lost=%d duplicates=%d oversold=%d result=%s",
		r.Name, r.Load.requests, r.Load.accepted, a.orders, a.lost, a.duplicates, a.oversold, result)
}

// Detail is what the line leaves out.
func (r Result) Detail() string {
	a := r.Audit
	if a == nil {
		a = &audit{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  fault: %s\n", r.Fault)
	fmt.Fprintf(&b, "  attempts %d, rejected %d, closed %d, paid %d (pay answers: %d PAID, %d ORDER_CLOSED, %d other)\n",
		r.Load.attempts, a.rejected, a.closed, a.paidDB, r.Load.paid, r.Load.payClosed, r.Load.payOther)
	fmt.Fprintf(&b, "  replays %d %v (%d answered another orderNo, %d refused, %d refused while the sale was lost), duplicates in Postgres %d\n",
		r.Load.replays, r.ReplayAnswers, r.Load.mismatched, a.refusedReplays, r.Load.outageRefused, a.dbDuplicates)
	fmt.Fprintf(&b, "  drained in %s, reconciler exit %d in %s; %s\n", r.Drained.Round(100*time.Millisecond),
		r.ReconcileExit, r.Took.Round(100*time.Millisecond), r.Worker)
	fmt.Fprintf(&b, "  answers %v", r.Answers)
	return b.String()
}

// Run runs one scenario on its own activity act: sale, load with the fault
// at a random instant, heal, drain, reconcile, audit.
func (s *Suite) Run(ctx context.Context, sc Scenario, act int64) (res Result) {
	res = Result{Name: sc.Name, ReconcileExit: -1}
	fail := func(format string, args ...any) { res.Problems = append(res.Problems, fmt.Sprintf(format, args...)) }
	items := []int64{1, 2}
	if err := s.createSale(ctx, act, items); err != nil {
		fail("creating the sale: %v", err)
		return res
	}
	before := s.sampleWorkers(ctx)
	lr := s.loadWithFault(ctx, sc, act, items, &res)

	// Heal: every process up and continued (one that died by itself is a
	// finding), no toxics.
	for _, p := range s.heal(ctx) {
		fail("%s", p)
	}

	drainStart := time.Now()
	if err := s.drain(ctx, act, items, lr); err != nil {
		fail("I4: %v", err)
	}
	res.Drained = time.Since(drainStart)
	res.Worker = before.delta(s.sampleWorkers(ctx))
	if notes := s.takeNotes(); len(notes) > 0 {
		res.Fault += "; " + strings.Join(notes, "; ")
	}

	recStart := time.Now()
	code, out := s.reconcile(ctx)
	res.Took = time.Since(recStart)
	res.ReconcileExit = code
	if code != 0 {
		fail("I5: reconciler --once exit %d:\n%s", code, out)
	}
	// Audit first (Redis as the scenario left it), then repair drift so
	// the next scenario's check is about that scenario only.
	defer func() {
		if code != 0 {
			fixed, out := s.reconcile(ctx, "--fix")
			s.logf("repaired the drift before the next scenario: reconciler --once --fix exit %d", fixed)
			if fixed != 0 {
				fail("reconciler --fix after the scenario: exit %d:\n%s", fixed, out)
			}
		}
	}()
	if sc.Verify != nil {
		if err := sc.Verify(ctx, s, act); err != nil {
			fail("%s: %v", sc.Name, err)
		}
	}
	a, err := s.runAudit(ctx, act, items, observedOf(lr), lr)
	if err != nil {
		fail("audit: %v", err)
		return res
	}
	res.Audit = a
	res.Problems = append(res.Problems, a.problems...)
	return res
}

// loadWithFault runs the scenario's load on sale act with its fault at a
// random instant, and returns what the clients were told; res gets the
// fault's description and the load's counts and answers.
func (s *Suite) loadWithFault(ctx context.Context, sc Scenario, act int64, items []int64, res *Result) *loadResult {
	stop := make(chan struct{})
	lc := loadConfig{URL: s.httpURL, ActivityID: act, Items: items, Users: s.cfg.Users, Clients: s.cfg.Clients,
		Think: s.cfg.Think, Stop: stop, ReplayShare: 0.1, PayShare: 0.3, PayDelay: 3 * time.Second,
		RetryFor: 20 * time.Second, Seed: s.rng.Uint64()}
	// The fault lands between 15% and 60% into the load, so there is load
	// before it, during the outage and after the heal.
	faultAt := time.Duration(float64(s.cfg.LoadFor) * (0.15 + 0.45*s.rng.Float64()))
	s.loadStart = time.Now()
	loaded := make(chan *loadResult, 1)
	s.load = newLoadResult()
	go func() { loaded <- runLoad(ctx, lc, s.load) }()
	time.Sleep(faultAt)
	desc, err := sc.Fault(ctx, s, act)
	res.Fault = desc
	if err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("fault: %v", err))
	}
	// The load runs LoadFor, and on for a while after the fault healed so
	// the healed pipeline is loaded too.
	time.Sleep(max(time.Until(s.loadStart.Add(s.cfg.LoadFor)), afterHeal))
	close(stop)
	lr := <-loaded
	res.Load = lr.counts()
	lr.mu.Lock()
	res.Answers, res.ReplayAnswers = lr.answers, lr.replayAnswers
	lr.mu.Unlock()
	return lr
}

// drain waits until nothing is in flight: the item journals are empty, no
// compensation is pending, the worker has committed everything in Kafka,
// every accepted request has been decided in Postgres and the closer has
// closed every unpaid order (so nothing moves while the audit reads).
func (s *Suite) drain(ctx context.Context, act int64, items []int64, lr *loadResult) error {
	lr.mu.Lock()
	accepted := append([]string{}, lr.accepted...)
	lr.mu.Unlock()
	deadline := time.Now().Add(s.cfg.DrainWithin)
	var state string
	for {
		f, err := s.inFlight(ctx, act, items, accepted)
		if err == nil && f.journal == 0 && f.pending == 0 && f.lag == 0 && f.decided == len(accepted) && f.unpaid == 0 {
			return nil
		}
		state = fmt.Sprintf("journal %d, pending compensations %d, consumer lag %d, decided %d of %d accepted, unpaid %d (%v)",
			f.journal, f.pending, f.lag, f.decided, len(accepted), f.unpaid, err)
		if time.Now().After(deadline) {
			return fmt.Errorf("not drained within %s: %s", s.cfg.DrainWithin, state)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type flight struct {
	journal, pending, lag, unpaid int64
	decided                       int
}

func (s *Suite) inFlight(ctx context.Context, act int64, items []int64, accepted []string) (f flight, err error) {
	for _, it := range items {
		n, err := journalLen(ctx, s.stock, stockItem(act, it), s.cfg.Buckets)
		if err != nil {
			return f, err
		}
		f.journal += n
	}
	pg, err := ordertest.InFlight(ctx, s.pool, act, accepted)
	if err != nil {
		return f, err
	}
	f.pending, f.decided, f.unpaid = pg.PendingCompensations, int(pg.Decided), pg.Unpaid
	f.lag, err = groupLag(ctx, s.brokers, kafkaTopic, kafkaGroup)
	return f, err
}

// createSale creates activity act with the items through the admin API and
// preheats it; the sale opened a minute ago and runs for an hour.
func (s *Suite) createSale(ctx context.Context, act int64, items []int64) error {
	now := time.Now().UTC().Truncate(time.Second)
	a := gwclient.ActivityUpsert{Name: fmt.Sprintf("chaos %d", act), StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), PerUserLimit: 2}
	for _, it := range items {
		a.Items = append(a.Items, gwclient.ItemUpsert{ItemID: it, Stock: s.cfg.Stock, Buckets: bucketsOver1(s.cfg.Buckets)})
	}
	api := gwclient.New(s.httpURL)
	api.AdminToken = s.adminToken
	if _, err := api.PutActivity(ctx, act, a); err != nil {
		return fmt.Errorf("creating activity %d: %w", act, err)
	}
	if _, err := api.Preheat(ctx, act); err != nil {
		return fmt.Errorf("preheating activity %d: %w", act, err)
	}
	return nil
}

// loseSale deletes, in one MULTI, every key the sale's items can have: the
// names are known (items, users, the requestIds sent so far, the orderNos
// answered or journaled), so no SCAN walks a shared Redis meanwhile. What
// the load reserves after the MULTI happens "after the failover".
func (s *Suite) loseSale(ctx context.Context, act int64) (int, error) {
	users := make([]int64, s.cfg.Users)
	for u := range users {
		users[u] = int64(u + 1)
	}
	losses := map[int64]*stocktest.Loss{}
	orderNos := map[string]int64{}
	for _, it := range []int64{1, 2} {
		losses[it] = &stocktest.Loss{Item: stockItem(act, it), Users: users}
		journal, err := s.stock.Journal(ctx, stockItem(act, it))
		if err != nil {
			return 0, err
		}
		for _, raw := range journal {
			var ev struct {
				OrderNo string `json:"orderNo"`
			}
			if json.Unmarshal([]byte(raw), &ev) == nil && ev.OrderNo != "" {
				orderNos[ev.OrderNo] = it
			}
		}
	}
	lr := s.load
	lr.mu.Lock()
	for rid, r := range lr.requests {
		l := loss(losses, act, r.body.ItemID)
		l.Requests = append(l.Requests, rid)
		if r.orderNo != "" {
			l.Fates = append(l.Fates, r.orderNo)
			orderNos[r.orderNo] = r.body.ItemID
		}
	}
	lr.mu.Unlock()
	for no, it := range orderNos {
		l := loss(losses, act, it)
		l.Orders = append(l.Orders, no)
	}
	var all []stocktest.Loss
	for _, l := range losses {
		all = append(all, *l)
	}
	n, err := stocktest.Lose(ctx, s.sr, all...)
	if err != nil {
		return 0, fmt.Errorf("deleting the sale's keys: %w", err)
	}
	return n, nil
}

// loss is the item's Loss in losses, added if missing.
func loss(losses map[int64]*stocktest.Loss, act, item int64) *stocktest.Loss {
	l, ok := losses[item]
	if !ok {
		l = &stocktest.Loss{Item: stockItem(act, item)}
		losses[item] = l
	}
	return l
}

// setOutage marks the window in which the sale's Redis keys are lost.
func (s *Suite) setOutage(on bool) {
	if s.load == nil {
		return
	}
	s.load.mu.Lock()
	s.load.outage = on
	s.load.mu.Unlock()
}

func partsText(parts []int) string {
	if parts == nil {
		return ""
	}
	return fmt.Sprintf(" of partitions %v", parts)
}
