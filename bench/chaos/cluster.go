package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// The real cluster (Config.KafkaNodes): deploy/kafka/kafka.sh prepares the
// nodes' properties and storage under the run's kafka dir (the one place
// broker settings come from), and each broker runs as its own proc through
// `kafka.sh node DIR i`, which execs the JVM: the suite signals the broker
// itself, and a restart reuses the node's data dir (log recovery after a
// SIGKILL).

// Ports: brokers on base..base+n-1, controllers ctrlOffset higher; below
// Linux's ephemeral range (32768+), so no outgoing connection holds one,
// and away from 9092-9094 / 19092-19094 (`make kafka`).
const (
	clusterPortFrom = 27192
	clusterPortTo   = 31000
	ctrlOffset      = 1000
)

// startCluster prepares and starts the brokers, waits until every one is
// up and sees the others, and creates the topics with `orderpipe topics`
// (RF 3; the brokers' min.insync.replicas is 2).
func (s *Suite) startCluster(ctx context.Context) error {
	n := s.cfg.KafkaNodes
	if n != 3 {
		return fmt.Errorf("KafkaNodes %d: the real-cluster mode runs 3 brokers (0 is the kfake broker)", n)
	}
	script := s.cfg.KafkaScript
	if script == "" {
		return errors.New("KafkaNodes set without KafkaScript (deploy/kafka/kafka.sh)")
	}
	base, err := freePortBase(n)
	if err != nil {
		return err
	}
	clusterEnv := append(os.Environ(), "KAFKA_NODES="+strconv.Itoa(n), "KAFKA_BASE_PORT="+strconv.Itoa(base),
		"KAFKA_CONTROLLER_BASE_PORT="+strconv.Itoa(base+ctrlOffset))
	t0 := time.Now()
	// prepare fetches the jars first if they are not cached yet.
	pctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(pctx, script, "prepare", s.kafkaDir)
	cmd.Env = clusterEnv
	cmd.SysProcAttr = childAttr()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s prepare %s: %w\n%s", script, s.kafkaDir, err, stderr.String())
	}
	s.brokers = strings.Split(strings.TrimSpace(string(out)), ",")
	if len(s.brokers) != n {
		return fmt.Errorf("%s prepare printed %q, not %d brokers", script, out, n)
	}
	for i := 1; i <= n; i++ {
		p := &proc{name: "kafka-" + strconv.Itoa(i), bin: script, args: []string{"node", s.kafkaDir, strconv.Itoa(i)},
			env: clusterEnv, logPath: filepath.Join(s.Dir, "kafka-"+strconv.Itoa(i)+".log"), readyFunc: s.brokerReady(i)}
		s.kafkaProcs = append(s.kafkaProcs, p)
		s.procs = append(s.procs, p)
		if err := p.start(); err != nil {
			return err
		}
	}
	for _, p := range s.kafkaProcs {
		if err := p.waitReady(ctx, 2*time.Minute); err != nil {
			return err
		}
	}
	env := s.env("KAFKA_BROKERS="+strings.Join(s.brokers, ","), "KAFKA_REPLICATION_FACTOR=3")
	if out, err := s.command(ctx, "topics", env); err != nil {
		return fmt.Errorf("orderpipe topics: %w\n%s", err, out)
	}
	s.logf("real Kafka: %d brokers on %s (controllers on :%d-%d), data in %s, up with topics in %s",
		n, strings.Join(s.brokers, ","), base+ctrlOffset, base+ctrlOffset+n-1, s.kafkaDir, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// freePortBase is the first base from clusterPortFrom (in steps of 10) with
// the n broker and n controller ports free.
func freePortBase(n int) (int, error) {
	for base := clusterPortFrom; base+n <= clusterPortTo; base += 10 {
		free := true
		for i := range n {
			for _, port := range []int{base + i, base + ctrlOffset + i} {
				ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
				if err != nil {
					free = false
					break
				}
				ln.Close()
			}
		}
		if free {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d free ports in %d-%d (and %d higher)", n, clusterPortFrom, clusterPortTo, ctrlOffset)
}

// brokerReady: node i answers Metadata, and in its view and in that of
// every other broker that answers (a broker just continued after SIGSTOP
// answers from a stale cache at first) node i is a live broker, every
// partition (once the topics exist, including the group offsets) has a
// leader, and node i is in sync wherever it holds a replica. So a
// restarted broker is ready once it has caught up, and the next fault
// meets a whole cluster.
func (s *Suite) brokerReady(i int) func(context.Context) error {
	return func(ctx context.Context) error {
		for j, addr := range s.brokers {
			parts, brokers, err := metadataFrom(ctx, addr)
			if err != nil && j+1 != i {
				continue // that one is down, or still starting
			}
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(brokers, func(b kafka.Broker) bool { return b.ID == i }) {
				return fmt.Errorf("node %d: node %d not among the live brokers %v", j+1, i, brokerIDs(brokers))
			}
			for _, p := range parts {
				if p.Leader.ID < 0 {
					return fmt.Errorf("node %d: %s/%d has no leader", j+1, p.Topic, p.ID)
				}
				if holds(p.Replicas, i) && !holds(p.Isr, i) {
					return fmt.Errorf("node %d: node %d not in sync for %s/%d (ISR %v)", j+1, i, p.Topic, p.ID, brokerIDs(p.Isr))
				}
			}
		}
		return nil
	}
}

// metadataFrom asks one broker, on a connection of its own (no cache), for
// every topic's partitions and the live brokers.
func metadataFrom(ctx context.Context, addr string) ([]kafka.Partition, []kafka.Broker, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := (&kafka.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline) //nolint:errcheck // a paused broker must not hold us
	brokers, err := conn.Brokers()
	if err != nil {
		return nil, nil, err
	}
	parts, err := conn.ReadPartitions()
	if err != nil {
		return nil, nil, err
	}
	return parts, brokers, nil
}

// partitions is topic's partitions as a live broker sees them (the first
// of the running, unpaused brokers that answers).
func (s *Suite) partitions(ctx context.Context, topic string) ([]kafka.Partition, error) {
	var errs []error
	for i, p := range s.kafkaProcs {
		if !p.running() || p.isPaused() {
			continue
		}
		parts, _, err := metadataFrom(ctx, s.brokers[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var out []kafka.Partition
		for _, p := range parts {
			if p.Topic == topic {
				out = append(out, p)
			}
		}
		if len(out) == 0 {
			errs = append(errs, fmt.Errorf("%s: no topic %s", s.brokers[i], topic))
			continue
		}
		sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
		return out, nil
	}
	return nil, fmt.Errorf("reading %s's partitions: %w", topic, errors.Join(errs...))
}

// salePartitions are the partitions of activity act's events: the
// gateway's writer keys them "<act>:<item>" and picks the partition with
// kafka-go's Hash balancer (event.NewWriter) over the sorted partitions.
func salePartitions(act int64, items []int64) []int {
	ids := make([]int, kafkaPartitions)
	for i := range ids {
		ids[i] = i
	}
	var out []int
	for _, it := range items {
		p := ids[(&kafka.Hash{}).Balance(kafka.Message{Key: fmt.Appendf(nil, "%d:%d", act, it)}, ids...)]
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	sort.Ints(out)
	return out
}

// saleLeader is the node that leads most of the sale's partitions (the
// lowest id on a tie).
func (s *Suite) saleLeader(ctx context.Context, act int64) (int, error) {
	sale := salePartitions(act, []int64{1, 2})
	leaders, err := s.leadersOf(ctx, sale)
	if err != nil {
		return 0, err
	}
	led := map[int]int{}
	for _, p := range sale {
		led[leaders[p]]++
	}
	best := 0
	for id, n := range led {
		if id > 0 && (best == 0 || n > led[best] || n == led[best] && id < best) {
			best = id
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("no leader for the sale's partitions %v", sale)
	}
	return best, nil
}

// roles is what node id is to activity act's sale right now: the items
// whose partition it leads, and a description that also says whether it
// coordinates the worker group and is the active controller.
func (s *Suite) roles(ctx context.Context, act int64, id int) ([]int64, string) {
	var items []int64
	var parts []int
	var desc []string
	leaders, err := s.leadersOf(ctx, salePartitions(act, []int64{1, 2}))
	if err != nil {
		desc = append(desc, "leaders unknown: "+err.Error())
	}
	for _, it := range []int64{1, 2} {
		p := salePartitions(act, []int64{it})[0]
		if leaders[p] == id {
			items = append(items, it)
			if !slices.Contains(parts, p) {
				parts = append(parts, p)
			}
		}
	}
	if len(items) > 0 {
		desc = append(desc, fmt.Sprintf("leader of the sale's partitions %v, items %v", parts, items))
	} else {
		desc = append(desc, "leads none of the sale's partitions")
	}
	if c, err := groupCoordinator(ctx, s.brokers); err == nil && c == id {
		desc = append(desc, "the worker group's coordinator")
	}
	if c, _, err := s.activeController(); err == nil && c == id {
		desc = append(desc, "the active controller")
	}
	return items, strings.Join(desc, "; ")
}

// groupCoordinator is the node coordinating the worker group.
func groupCoordinator(ctx context.Context, brokers []string) (int, error) {
	c, done := client(brokers)
	defer done()
	res, err := c.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{Key: kafkaGroup, KeyType: kafka.CoordinatorKeyTypeConsumer})
	if err != nil {
		return -1, err
	}
	if res.Error != nil {
		return -1, res.Error
	}
	return res.Coordinator.NodeID, nil
}

// killBroker SIGKILLs node id and, from the moment it is dead, measures in
// the background when the group commits the sale's partitions of items
// (those it led) again, and when items and the other items are accepted
// again: the others' partitions lose a follower only, but acks=all waits
// for every replica in the ISR, and the dead one stays in it until the
// controller fences it.
func (s *Suite) killBroker(ctx context.Context, act int64, id int, items []int64) (time.Time, error) {
	meter := s.resumeMeter(ctx, salePartitions(act, items))
	if err := s.kafkaProcs[id-1].kill(); err != nil {
		return time.Time{}, err
	}
	killed := time.Now()
	meter(killed, "the kill")
	s.measureIntake(killed, "the kill", items)
	var others []int64
	for _, it := range []int64{1, 2} {
		if !slices.Contains(items, it) {
			others = append(others, it)
		}
	}
	if len(items) > 0 && len(others) > 0 {
		s.measureIntake(killed, "the kill", others)
	}
	return killed, nil
}

// leadersOf is the leader of each of the partitions ids ("-1" none).
func (s *Suite) leadersOf(ctx context.Context, ids []int) (map[int]int, error) {
	parts, err := s.partitions(ctx, kafkaTopic)
	if err != nil {
		return nil, err
	}
	out := map[int]int{}
	for _, p := range parts {
		if slices.Contains(ids, p.ID) {
			out[p.ID] = p.Leader.ID
		}
	}
	return out, nil
}

// activeController is the KRaft quorum's leader (the active controller) as
// the nodes' quorum-state files record it: the leader of the newest epoch.
// The Metadata API does not tell (a KRaft broker names a random broker as
// "controller" to clients).
func (s *Suite) activeController() (id, epoch int, err error) {
	id, epoch = -1, -1
	for i := range s.kafkaProcs {
		raw, rerr := os.ReadFile(filepath.Join(s.kafkaDir, fmt.Sprintf("node-%d", i+1), "data", "__cluster_metadata-0", "quorum-state"))
		if rerr != nil {
			err = errors.Join(err, rerr)
			continue
		}
		var qs struct {
			LeaderID    int `json:"leaderId"`
			LeaderEpoch int `json:"leaderEpoch"`
		}
		if jerr := json.Unmarshal(raw, &qs); jerr != nil {
			err = errors.Join(err, jerr)
			continue
		}
		if qs.LeaderEpoch > epoch && qs.LeaderID > 0 {
			id, epoch = qs.LeaderID, qs.LeaderEpoch
		}
	}
	if id < 0 {
		return id, epoch, fmt.Errorf("no quorum leader recorded: %w", err)
	}
	return id, epoch, nil
}

func holds(bs []kafka.Broker, id int) bool {
	return slices.ContainsFunc(bs, func(b kafka.Broker) bool { return b.ID == id })
}

func brokerIDs(bs []kafka.Broker) []int {
	var ids []int
	for _, b := range bs {
		ids = append(ids, b.ID)
	}
	sort.Ints(ids)
	return ids
}
