package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// The scenarios only a real cluster has (Scenario.RealOnly). Each measures
// what it is about — failover, the group's rebalance, when intake resumed —
// and its description says it; the audit after the drain judges I1–I6 as
// for every scenario.

// killPartitionLeader SIGKILLs the broker that leads most of the sale's
// partitions. Nobody tells the controller: it fences the broker once its
// heartbeats have stopped for broker.session.timeout.ms (9 s) and moves the
// leaderships to in-sync replicas. Meanwhile those partitions have no
// leader that answers and the sale's produces fail (503, nothing
// reserved). The broker restarts 0–2 s after the failover and catches up.
func killPartitionLeader(ctx context.Context, s *Suite, act int64) (string, error) {
	extra := time.Duration(s.rng.Int64N(int64(2 * time.Second)))
	items := []int64{1, 2}
	sale := salePartitions(act, items)
	id, err := s.saleLeader(ctx, act)
	if err != nil {
		return "", err
	}
	hit, why := s.roles(ctx, act, id)
	before, err := s.leadersOf(ctx, sale)
	if err != nil {
		return "", err
	}
	p := s.kafkaProcs[id-1]
	at := s.since()
	killed, err := s.killBroker(ctx, act, id, hit)
	if err != nil {
		return "", err
	}
	failover := "leadership did not move within 45s"
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		l, err := s.leadersOf(ctx, sale)
		if err == nil && len(l) == len(sale) && !slices.ContainsFunc(mapValues(l), func(v int) bool { return v == id || v < 0 }) {
			failover = fmt.Sprintf("leaders of %v %v → %v %s after the kill", sale, before, l, since(killed))
			break
		}
	}
	time.Sleep(extra)
	restart := time.Now()
	if err := p.start(); err != nil {
		return "", err
	}
	err = p.waitReady(ctx, 90*time.Second)
	readyIn := since(restart)
	return fmt.Sprintf("SIGKILL kafka-%d (%s) at %s; %s; restarted %s after the kill, in sync %s after restart; gateway meanwhile: %s",
		id, why, at, failover, restart.Sub(killed).Round(100*time.Millisecond), readyIn,
		logSummary(s.proc("gateway").logPath, killed, time.Now())), err
}

// twoBrokersDown SIGSTOPs two of the three brokers for 4–6 s: the KRaft
// quorum is gone (no controller can shrink an ISR) and no partition has two
// in-sync replicas that answer, so no produce can be acknowledged under
// acks=all and min.insync.replicas=2. The gateway must answer 503 and keep
// nothing reserved; no request sent meanwhile may get a 202. Then one is
// continued — intake must resume (with two of three up) — and, once a 202
// has come, the other.
func twoBrokersDown(ctx context.Context, s *Suite, act int64) (string, error) {
	up := 1 + s.rng.IntN(3)
	var down []int // down[0] comes back first
	for i := 1; i <= 3; i++ {
		if i != up {
			down = append(down, i)
		}
	}
	if s.rng.IntN(2) == 1 {
		down[0], down[1] = down[1], down[0]
	}
	hold := 4*time.Second + time.Duration(s.rng.Int64N(int64(2*time.Second)))
	at := s.since()
	outStart := time.Now()
	for _, id := range down {
		if err := s.kafkaProcs[id-1].pause(); err != nil {
			return "", err
		}
	}
	time.Sleep(hold)
	outEnd := time.Now()
	var problems []string
	accepted := s.load.acceptedWithin(outStart, outEnd)
	if accepted > 0 {
		problems = append(problems, fmt.Sprintf("%d requests sent while two of three brokers were stopped were answered 202", accepted))
	}
	stranded, err := s.stranded503(ctx, act)
	if err != nil {
		problems = append(problems, fmt.Sprintf("reading the journals: %v", err))
	} else if len(stranded) > 0 {
		problems = append(problems, fmt.Sprintf("%d requests answered 503 left a reservation in the journal: %v",
			len(stranded), stranded[:min(5, len(stranded))]))
	}
	answers := s.load.answersWithin(outStart, outEnd)

	if err := s.kafkaProcs[down[0]-1].resume(); err != nil {
		return "", err
	}
	back := time.Now()
	resumed := "no 202 within 60s"
	for deadline := back.Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if t, ok := s.load.firstAccepted(back); ok {
			resumed = fmt.Sprintf("first 202 %s later", t.Sub(back).Round(100*time.Millisecond))
			break
		}
	}
	if strings.HasPrefix(resumed, "no 202") {
		problems = append(problems, fmt.Sprintf("intake did not resume within 60s of kafka-%d's return", down[0]))
	}
	if err := s.kafkaProcs[down[1]-1].resume(); err != nil {
		return "", err
	}
	back2 := time.Now()
	for _, id := range down {
		if err := s.kafkaProcs[id-1].waitReady(ctx, 90*time.Second); err != nil {
			problems = append(problems, err.Error())
		}
	}
	desc := fmt.Sprintf("SIGSTOP kafka-%d and kafka-%d at %s for %s (kafka-%d up): answers meanwhile %v, "+
		"202s to requests sent meanwhile %d, 503s that left a reservation %d; SIGCONT kafka-%d: %s; "+
		"SIGCONT kafka-%d %s after the first, both in sync %s later; gateway during the outage: %s",
		down[0], down[1], at, hold.Round(100*time.Millisecond), up, answers, accepted, len(stranded),
		down[0], resumed, down[1], back2.Sub(back).Round(100*time.Millisecond), since(back2),
		logSummary(s.proc("gateway").logPath, outStart, outEnd))
	if len(problems) > 0 {
		return desc, errors.New(strings.Join(problems, "; "))
	}
	return desc, nil
}

// uncleanBrokerRestart SIGKILLs the active controller (the KRaft quorum's
// leader) — no controlled shutdown, no clean-shutdown marker — and restarts
// it on the same data dir 1–3 s later: the others elect a new controller,
// and the restarted broker recovers its logs and catches up.
func uncleanBrokerRestart(ctx context.Context, s *Suite, act int64) (string, error) {
	down := time.Second + time.Duration(s.rng.Int64N(int64(2*time.Second)))
	id, epoch, err := s.activeController()
	if err != nil {
		return "", err
	}
	p := s.kafkaProcs[id-1]
	items, why := s.roles(ctx, act, id)
	at := s.since()
	killed, err := s.killBroker(ctx, act, id, items)
	if err != nil {
		return "", err
	}
	elected := "no new controller within 20s"
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n, e, err := s.activeController(); err == nil && e > epoch && n != id {
			elected = fmt.Sprintf("kafka-%d elected controller (epoch %d → %d) %s after the kill", n, epoch, e, since(killed))
			break
		}
	}
	time.Sleep(time.Until(killed.Add(down)))
	marker := "no clean-shutdown marker: its logs are recovered"
	if _, err := os.Stat(filepath.Join(s.kafkaDir, fmt.Sprintf("node-%d", id), "data", ".kafka_cleanshutdown")); err == nil {
		marker = "a clean-shutdown marker was left (unexpected after SIGKILL)"
	}
	restart := time.Now()
	if err := p.start(); err != nil {
		return "", err
	}
	err = p.waitReady(ctx, 90*time.Second)
	readyIn := since(restart)
	return fmt.Sprintf("SIGKILL kafka-%d (epoch %d; %s) at %s; %s; restarted %s after the kill (%s), in sync %s after restart",
		id, epoch, why, at, elected, restart.Sub(killed).Round(100*time.Millisecond), marker, readyIn), err
}

// workerKilledMidBatch SIGKILLs, of the group's two workers, the one
// processing the sale's batches (its batch count grows faster). It never
// leaves the group: the coordinator expires its session (6 s) and
// rebalances its partitions to the other; what it had processed but not
// committed is delivered again and must be applied once (I3/I4). It
// restarts 1–3 s after the rebalance and rejoins.
func workerKilledMidBatch(ctx context.Context, s *Suite, _ int64) (string, error) {
	hold := time.Second + time.Duration(s.rng.Int64N(int64(2*time.Second)))
	ws := s.workers()
	if len(ws) < 2 {
		return "", fmt.Errorf("%d workers: the scenario needs two in the group", len(ws))
	}
	victim, busy, other := s.busierWorker(ctx)
	p := ws[victim]
	members, err := describeGroup(ctx, s.brokers)
	if err != nil {
		return "", fmt.Errorf("describing the group: %w", err)
	}
	_, atKill, err := groupOffsets(ctx, s.brokers, kafkaTopic, kafkaGroup)
	if err != nil {
		return "", err
	}
	at := s.since()
	killed := time.Now()
	if err := p.kill(); err != nil {
		return "", err
	}
	moved, rebalanced := waitRebalanced(ctx, s.brokers, members, killed)
	resumed := ""
	if len(moved) > 0 {
		resumed = waitCommittedAgain(ctx, s.brokers, moved, atKill, killed)
	}
	time.Sleep(hold)
	restart := time.Now()
	if err := p.start(); err != nil {
		return "", err
	}
	err = p.waitReady(ctx, 60*time.Second)
	rejoined := "not back in the group within 45s"
	if err == nil {
		rejoined = waitRejoined(ctx, s.brokers, restart)
	}
	return fmt.Sprintf("SIGKILL %s (the busier of 2 members: %.0f vs %.0f batches in 0.5s; members %v) at %s; %s%s; restarted %s after the kill, %s",
		p.name, busy, other, memberPartitions(members), at, rebalanced, resumed,
		restart.Sub(killed).Round(100*time.Millisecond), rejoined), err
}

// busierWorker is the index of the worker whose batch count grew most over
// half a second, with its batches and those of the other of two.
func (s *Suite) busierWorker(ctx context.Context) (victim int, busy, other float64) {
	const batches = "orderpipe_worker_batch_size_count"
	a := s.sampleWorkerCounter(ctx, batches)
	time.Sleep(500 * time.Millisecond)
	b := s.sampleWorkerCounter(ctx, batches)
	for i := range b {
		if b[i]-a[i] > b[victim]-a[victim] {
			victim = i
		}
	}
	return victim, b[victim] - a[victim], b[1-victim] - a[1-victim]
}

// waitRebalanced waits (45 s at most) for the group to be one member
// holding every partition, and returns the partitions the member gone
// (of members, the group before the kill) held, with a note of when.
func waitRebalanced(ctx context.Context, brokers []string, members map[string][]int, killed time.Time) (moved []int, note string) {
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		now, err := describeGroup(ctx, brokers)
		if err != nil || len(now) != 1 {
			continue
		}
		var survivor string
		for id := range now {
			survivor = id
		}
		if len(now[survivor]) != kafkaPartitions {
			continue
		}
		for old, ps := range members {
			if old != survivor {
				moved = ps
			}
		}
		return moved, fmt.Sprintf("group rebalanced to 1 member with all %d partitions %s after the kill", kafkaPartitions, since(killed))
	}
	return nil, "no rebalance within 45s"
}

// waitCommittedAgain waits (30 s at most) for consumption of the moved
// partitions to resume: one committed past its offset at the kill, or none
// left behind its end.
func waitCommittedAgain(ctx context.Context, brokers []string, moved []int, atKill map[int]int64, killed time.Time) string {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ends, committed, err := groupOffsets(ctx, brokers, kafkaTopic, kafkaGroup)
		if err != nil {
			continue
		}
		if slices.ContainsFunc(moved, func(p int) bool { return committed[p] > atKill[p] }) ||
			!slices.ContainsFunc(moved, func(p int) bool { return ends[p] > committed[p] }) {
			return fmt.Sprintf("; its partitions %v committed again %s after the kill", moved, since(killed))
		}
	}
	return fmt.Sprintf("; its partitions %v not committed again within 30s", moved)
}

// waitRejoined waits (45 s at most) for the restarted worker to be back:
// two members, each holding a partition.
func waitRejoined(ctx context.Context, brokers []string, restart time.Time) string {
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		now, err := describeGroup(ctx, brokers)
		if err == nil && len(now) == 2 && !slices.ContainsFunc(mapValues(now), func(ps []int) bool { return len(ps) == 0 }) {
			return fmt.Sprintf("both members hold partitions again %s after the restart", since(restart))
		}
	}
	return "not back in the group within 45s"
}

// measureIntake notes, in the background, when the first request sent
// after t (for one of items) was accepted.
func (s *Suite) measureIntake(t time.Time, what string, items []int64) {
	which := "any item"
	if len(items) > 0 {
		which = fmt.Sprintf("item(s) %v", items)
	}
	s.async(func() string {
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if first, ok := s.load.firstAccepted(t, items...); ok {
				return fmt.Sprintf("first 202 for %s %s after %s", which, first.Sub(t).Round(100*time.Millisecond), what)
			}
		}
		return fmt.Sprintf("no 202 for %s within 60s of %s", which, what)
	})
}

// stranded503 are the requestIds in the sale's journals whose latest
// attempt, over before the journals were read and not retried since, was
// answered 503: a 503 must leave nothing reserved.
func (s *Suite) stranded503(ctx context.Context, act int64) ([]string, error) {
	before := s.load.ended503()
	var ids []string
	for _, it := range []int64{1, 2} {
		f, err := s.stock.JournalIDs(ctx, stockItem(act, it))
		if err != nil {
			return nil, err
		}
		ids = append(ids, f...)
	}
	after := s.load.ended503()
	var out []string
	for _, id := range ids {
		if i, ok := before[id]; ok && after[id] == i {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}

// sampleWorkerCounter is one unlabelled counter of each worker (NaN-free:
// 0 when unreadable).
func (s *Suite) sampleWorkerCounter(ctx context.Context, name string) []float64 {
	out := make([]float64, len(s.workerMetrics))
	for i, u := range s.workerMetrics {
		if v, err := scrape(ctx, u, []string{name}); err == nil {
			out[i] = v[name]
		}
	}
	return out
}

// describeGroup is the worker group's members (by member id) and the
// partitions of the order topic each is assigned.
func describeGroup(ctx context.Context, brokers []string) (map[string][]int, error) {
	c, done := client(brokers)
	defer done()
	res, err := c.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{kafkaGroup}})
	if err != nil {
		return nil, err
	}
	if len(res.Groups) != 1 {
		return nil, fmt.Errorf("%d groups described", len(res.Groups))
	}
	g := res.Groups[0]
	if g.Error != nil {
		return nil, g.Error
	}
	out := map[string][]int{}
	for _, m := range g.Members {
		var ps []int
		for _, t := range m.MemberAssignments.Topics {
			if t.Topic == kafkaTopic {
				ps = append(ps, t.Partitions...)
			}
		}
		sort.Ints(ps)
		out[m.MemberID] = ps
	}
	return out, nil
}

func memberPartitions(m map[string][]int) [][]int {
	var out [][]int
	for _, ps := range m {
		out = append(out, ps)
	}
	sort.Slice(out, func(a, b int) bool { return fmt.Sprint(out[a]) < fmt.Sprint(out[b]) })
	return out
}

// logSummary counts a process's WARN and ERROR log lines between from and
// to by message and error text (the most frequent three), e.g. the
// errors kafka-go returned to the gateway's produces.
func logSummary(path string, from, to time.Time) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Time  time.Time `json:"time"`
			Level string    `json:"level"`
			Msg   string    `json:"msg"`
			Err   string    `json:"err"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Time.Before(from) || line.Time.After(to) ||
			(line.Level != "WARN" && line.Level != "ERROR") {
			continue
		}
		e := line.Err
		if len(e) > 120 {
			e = e[:120] + "…"
		}
		counts[line.Msg+": "+e]++
	}
	if len(counts) == 0 {
		return "no warnings"
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		if counts[keys[a]] != counts[keys[b]] {
			return counts[keys[a]] > counts[keys[b]]
		}
		return keys[a] < keys[b]
	})
	var parts []string
	for _, k := range keys[:min(3, len(keys))] {
		parts = append(parts, fmt.Sprintf("%d× %q", counts[k], k))
	}
	if len(keys) > 3 {
		parts = append(parts, fmt.Sprintf("%d more kinds", len(keys)-3))
	}
	return strings.Join(parts, ", ")
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
