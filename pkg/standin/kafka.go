package standin

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// KafkaOptions configure the embedded broker.
type KafkaOptions struct {
	// Port on 127.0.0.1; 0 picks a free one.
	Port int
	// Partitions of each seeded topic.
	Partitions int
	// Topics to create at start.
	Topics []string
	// Dir, when set, keeps the broker's log on disk: every acknowledged
	// produce (and offset commit) is fsynced first, so a kill loses no
	// acknowledged message and a restart on the same Dir resumes the topics
	// and the consumer groups' committed offsets. Empty ⇒ in memory.
	Dir string
	// Retention, when its Interval is set, bounds what the broker keeps
	// (see Retention); otherwise it keeps every record.
	Retention Retention
	// RetentionErrFunc hears a retention pass that failed (the next pass
	// tries again); nil ⇒ ignored.
	RetentionErrFunc func(error)
	// AdvertisedPort, when set, is the port on 127.0.0.1 the broker tells
	// clients to connect to (its metadata) instead of its own: a proxy in
	// front of it, as Kafka's advertised.listeners.
	AdvertisedPort int
	// StaleFunc hears members the broker removed from a group because they
	// had gone silent (see ReapStaleMembers) and reaper passes that failed (the
	// next pass tries again); nil ⇒ ignored.
	StaleFunc func(reaped []string, err error)
}

// staleInterval is how often the broker looks for silent group members.
const staleInterval = time.Second

// Kafka is a running in-process Kafka-protocol broker (kfake): the embedded
// broker of `orderpipe all` and `orderpipe kafka` in development builds.
type Kafka struct {
	Cluster *kfake.Cluster
	// Brokers is the bootstrap list, for KAFKA_BROKERS.
	Brokers []string

	retention Retention
	stale     *staleWatch
	own       string       // the broker's own listening address
	mem       *memListener // its listener, which also takes in-memory connections
	stop      context.CancelFunc
	stopped   chan struct{}
}

// StartKafka starts one kfake broker that creates topics on first use.
func StartKafka(o KafkaOptions) (*Kafka, error) {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation()}
	if o.Retention.Interval > 0 {
		opts = append(opts, kfake.BrokerConfigs(map[string]string{"log.segment.bytes": strconv.Itoa(segmentBytes)}))
	}
	if o.Port > 0 {
		opts = append(opts, kfake.Ports(o.Port))
	}
	if len(o.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(o.Partitions), o.Topics...))
	}
	where := "in memory"
	if o.Dir != "" {
		// The gateway answers 202 only after the ack, so the ack must mean
		// the message is on disk.
		opts = append(opts, kfake.DataDir(o.Dir), kfake.SyncWrites())
		where = "in " + o.Dir
	}
	var own string
	var mem *memListener
	opts = append(opts, kfake.ListenFn(func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		own = ln.Addr().String()
		mem = newMemListener(ln)
		if o.AdvertisedPort > 0 {
			adv := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: o.AdvertisedPort}
			return advertised{Listener: mem, addr: adv}, nil
		}
		return mem, nil
	}))
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting embedded kafka %s: %w", where, err)
	}
	k := &Kafka{Cluster: c, Brokers: c.ListenAddrs(), retention: o.Retention, stale: newStaleWatch(), own: own, mem: mem, stopped: make(chan struct{})}
	k.stale.watch(k)
	ctx, cancel := context.WithCancel(context.Background())
	k.stop = cancel
	var wg sync.WaitGroup
	if o.Retention.Interval > 0 {
		wg.Go(func() { k.retain(ctx, o.RetentionErrFunc) })
	}
	wg.Go(func() { k.reapStaleMembers(ctx, staleInterval, o.StaleFunc) })
	go func() {
		wg.Wait()
		close(k.stopped)
	}()
	return k, nil
}

// advertised is a listener that names another address as its own: kfake
// advertises its listener's address.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

// Dial connects to the broker as a kafka-go Dialer's DialFunc or a
// Transport's Dial would: through memory when address is the broker's own
// listening address (a client in its process, see memconn.go), otherwise
// over the network (an advertised proxy in front of it, another broker).
func (k *Kafka) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if address == k.own && k.mem != nil {
		return k.mem.dial(ctx)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// Close stops the retention and the broker; without Dir its data is gone.
func (k *Kafka) Close() {
	k.stop()
	<-k.stopped
	k.Cluster.Close()
}
