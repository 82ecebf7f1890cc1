// Package chaos is orderpipe's chaos suite (`make chaos`). It runs the real
// binary as separate processes — the broker (`orderpipe kafka` with a data
// dir), gateway, worker and closer — on free local ports with a fresh
// database and Redis key prefix, applies load, and in each scenario injects
// one fault at a random instant: a component killed with SIGKILL and
// restarted, the sale's Redis keys lost, the broker killed and restarted,
// Postgres slowed and reset through an in-process Toxiproxy, a poison
// message. Then it heals, waits for the pipeline to drain, runs
// `orderpipe reconciler --once` and holds Postgres, Redis and the clients'
// answers to the invariants I1–I6.
//
// With Config.KafkaNodes = 3 (`make chaos-kafka`) the broker is a real
// Apache Kafka cluster instead (deploy/kafka/kafka.sh, each broker its own
// process the suite kills, pauses and restarts), two workers share the
// consumer group, and the scenarios only a real cluster has run too: a
// partition leader killed, two of three brokers down, the controller killed
// uncleanly, a worker killed while it holds partitions.
//
// It talks to 127.0.0.1 only, and it never runs in `make test`: the test
// that drives it needs the build tag chaos. It never changes the product;
// it only observes what the processes do.
package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
	"orderpipe/pkg/webhook"
)

// Config is one run of the suite.
type Config struct {
	// Bin is the orderpipe binary.
	Bin string
	// ServerURL is a Postgres URL whose server the run creates its own
	// database on (the path is replaced); "" runs a PostgreSQL of the
	// suite's own (postgres.go), which the nemesis crashes and pauses.
	// RedisServer is the redis-server
	// binary (default: from the PATH): the suite runs a primary and a
	// replica of its own (redis.go).
	ServerURL   string
	RedisServer string
	// RedisReplLag, when set, delays the replication stream from the Redis
	// primary to its replica (a replica in another zone): a failover then
	// loses the writes of that last stretch.
	RedisReplLag time.Duration
	// RedisWaitReplicas is the gateways' and workers' REDIS_WAIT_REPLICAS
	// (0: off): the nemesis runs them with 1, as production must, so a
	// failover loses no dedup record of a 202 and no claim a worker decided
	// on (CHAOS_REDIS_WAIT_REPLICAS=0 shows what it closes). Their
	// REDIS_WAIT_TIMEOUT is 200 ms plus twice RedisReplLag.
	RedisWaitReplicas int
	// OutDir receives a folder per run with every process's log.
	OutDir string
	// Seed makes the fault instants and the load repeatable (0: random).
	Seed uint64
	// LoadFor is how long each scenario's load runs; Clients (each pausing
	// Think on average between requests), Users and Stock (per item, two
	// items per scenario) shape it.
	LoadFor time.Duration
	Clients int
	Think   time.Duration
	Users   int
	Stock   int64
	// Buckets splits each item's stock over that many Redis buckets
	// (CHAOS_BUCKETS; 0 or 1: one), so the checker judges bucketed stock
	// and its mover.
	Buckets int
	// DrainWithin bounds the wait for the pipeline to settle after a fault.
	DrainWithin time.Duration
	// KafkaNodes > 0 runs a real Apache Kafka cluster of that many brokers
	// (only 3 is supported: RF 3, min.insync.replicas 2) instead of the
	// kfake broker, started by KafkaScript (deploy/kafka/kafka.sh) on free
	// ports, and a second worker.
	KafkaNodes  int
	KafkaScript string
	// Gateways and Workers are how many of each run (0: one gateway; one
	// worker, two on a real cluster). The nemesis runs two of each, and
	// its clients spread over the gateways.
	Gateways int
	Workers  int
	// ProduceTimeout, when set, is the gateways' PRODUCE_TIMEOUT: the
	// nemesis sets it above some of its clients' timeouts, so a client
	// gives up on a request whose produce is still in flight and retries.
	ProduceTimeout time.Duration
	// Keep leaves the database and the broker's data dir.
	Keep bool
	// Log receives progress lines.
	Log io.Writer
}

func (c *Config) defaults() {
	if c.OutDir == "" {
		c.OutDir = filepath.Join(os.TempDir(), "orderpipe-chaos")
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64() % 1_000_000
	}
	setting.DefaultTo(&c.LoadFor, 8*time.Second)
	setting.DefaultTo(&c.Clients, 12)
	setting.DefaultTo(&c.Think, 20*time.Millisecond)
	setting.DefaultTo(&c.Users, 2000)
	setting.DefaultTo(&c.Stock, 1500)
	setting.DefaultTo(&c.DrainWithin, 120*time.Second)
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// The processes' settings that make faults visible within seconds.
const (
	closeAfter    = "2s" // orders close while the load runs: the closer is busy, pay races close
	redriveAfter  = "2s" // a killed gateway's reservations are re-published quickly
	kafkaTopic    = event.Topic
	kafkaDLQTopic = event.DLQTopic
	kafkaGroup    = "orderpipe-worker"
	// kafkaPartitions is the topic's partition count on either broker.
	kafkaPartitions = 4
)

// Suite is a running set of processes and what the scenarios share.
type Suite struct {
	cfg           Config
	poisoned      atomic.Uint64 // poison faults so far: each draws its own copies
	run           string
	Dir           string // logs of this run
	kafkaDir      string
	dbURL         string // the run's database, direct
	proxiedURL    string // the same through Toxiproxy (worker, closer)
	dbName        string
	prefix        string
	adminToken    string
	httpURL       string   // the first gateway
	httpURLs      []string // every gateway
	brokers       []string // bootstrap list: the kfake broker (through its proxy), or every broker of the real cluster
	kafkaLink     bool     // the broker is reached through the proxy "kafka"
	kafkaProcs    []*proc  // the real cluster's brokers: node i is kafkaProcs[i-1]
	workerMetrics []string // each worker's /metrics
	baseEnv       []string

	orders *order.Store
	pool   ordertest.DB    // behind orders, for ordertest
	stock  *stock.Store    // through the proxy, as the processes
	sr     stocktest.Redis // behind stock, for stocktest
	// closeStores closes the pool and the client behind orders and stock.
	closeStores func()
	toxi        *toxi
	procs       []*proc
	rng         *rand.Rand

	// The Redis pair (redis.go): redis[redisPrimary] is the primary the
	// proxy points at; redisLost is set once a fault lost Redis's data.
	pg            *proc  // the suite's PostgreSQL, nil on Config.ServerURL
	pgDir         string // its cluster
	redis         []*redisNode
	redisMu       sync.Mutex
	redisPrimary  int
	redisAddr     string // the proxy
	redisReplLink string // the replication link's proxy
	redisLost     atomic.Bool

	// Of the scenario in hand: when its load started (for the fault's
	// timeline), what its clients were told so far, and notes that faults
	// add while they go on (async).
	loadStart time.Time
	schedule  []fault // the nemesis run's, while it runs
	// hooks is the webhook deliverers' endpoint (webhooks.go), signed
	// with hookSecret.
	hooks      *hookReceiver
	hookSecret webhook.Secret
	load       *loadResult
	notesMu    sync.Mutex
	notes      []string
	asyncWG    sync.WaitGroup
}

func (s *Suite) note(n string) {
	s.notesMu.Lock()
	defer s.notesMu.Unlock()
	s.notes = append(s.notes, n)
}

// async runs fn in the background; its note is collected by takeNotes.
func (s *Suite) async(fn func() string) {
	s.asyncWG.Add(1)
	go func() {
		defer s.asyncWG.Done()
		s.note(fn())
	}()
}

// takeNotes waits for the background notes and returns every note.
func (s *Suite) takeNotes() []string {
	s.asyncWG.Wait()
	s.notesMu.Lock()
	defer s.notesMu.Unlock()
	n := s.notes
	s.notes = nil
	return n
}

// Start prepares a fresh database, key prefix and broker and starts every
// process; Close undoes it.
func Start(ctx context.Context, cfg Config) (s *Suite, err error) {
	cfg.defaults()
	run := strconv.FormatInt(time.Now().Unix(), 36) + strconv.Itoa(os.Getpid()%1000)
	s = &Suite{cfg: cfg, run: run, Dir: filepath.Join(cfg.OutDir, run), dbName: "orderpipe_chaos_" + run,
		prefix: "chaos" + run + ":", adminToken: "chaos-" + run, rng: rand.New(rand.NewPCG(cfg.Seed, 0))}
	s.kafkaDir = filepath.Join(s.Dir, "kafka")
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return s, err
	}
	s.logf("run %s, seed %d, logs in %s", run, cfg.Seed, s.Dir)

	if err := s.startPostgresLink(ctx); err != nil {
		return s, err
	}
	if s.redisAddr, err = s.startRedis(ctx); err != nil {
		return s, err
	}
	if err := s.setBaseEnv(); err != nil {
		return s, err
	}
	if err := s.openStores(ctx); err != nil {
		return s, err
	}
	kafkaAddr, err := freeAddr()
	if err != nil {
		return s, err
	}
	gatewayAddr, err := freeAddr()
	if err != nil {
		return s, err
	}
	s.httpURL = "http://" + gatewayAddr
	if err := s.startKafka(ctx, kafkaAddr); err != nil {
		return s, err
	}
	comps, workers, err := s.components(gatewayAddr)
	if err != nil {
		return s, err
	}
	s.procs = append(s.procs, comps...)
	for _, p := range comps {
		if err := p.start(); err != nil {
			return s, err
		}
		if err := p.waitReady(ctx, 30*time.Second); err != nil {
			return s, err
		}
	}
	s.logf("started kafka %s, gateway %s, %s, closer, relay, webhook ×2 (postgres for workers and closer through toxiproxy %s)",
		strings.Join(s.brokers, ","), strings.Join(s.httpURLs, ", "), strings.Join(workers, ", "), s.toxi.Addr)
	return s, nil
}

// startPostgresLink starts the suite's own PostgreSQL unless Config.ServerURL
// names one, and the Toxiproxy in front of it that the worker and the closer
// reach it through, so that the nemesis can cut them off it.
func (s *Suite) startPostgresLink(ctx context.Context) error {
	if s.cfg.ServerURL == "" {
		var err error
		if s.cfg.ServerURL, err = s.startPostgres(ctx); err != nil {
			return err
		}
	}
	base, err := url.Parse(s.cfg.ServerURL)
	if err != nil {
		return fmt.Errorf("parsing the Postgres URL: %w", err)
	}
	db := *base
	db.Path = "/" + s.dbName
	s.dbURL = db.String()
	pgAddr := base.Host
	if base.Port() == "" {
		pgAddr = net.JoinHostPort(base.Hostname(), "5432")
	}
	if s.toxi, err = startToxi(pgAddr); err != nil {
		return err
	}
	db.Host = s.toxi.Addr
	s.proxiedURL = db.String()
	return nil
}

// setBaseEnv is the environment every process shares: the binary's own
// settings, then the run's Redis and admin token and timings short enough
// for the closer and the redrive to act within a scenario.
func (s *Suite) setBaseEnv() error {
	env, err := processEnv(s.cfg.Bin)
	if err != nil {
		return err
	}
	s.baseEnv = append(env, "REDIS_ADDR="+s.redisAddr, "REDIS_KEY_PREFIX="+s.prefix, "ADMIN_TOKEN="+s.adminToken,
		"RATE_LIMIT_USER_RPS=0", "KAFKA_PARTITIONS="+strconv.Itoa(kafkaPartitions), "DB_MAX_CONNS=8", "LOG_LEVEL=info",
		"CLOSE_AFTER="+closeAfter, "CLOSER_INTERVAL=500ms", "REDRIVE_AFTER="+redriveAfter, "REDRIVE_INTERVAL=1s")
	return nil
}

// openStores migrates the run's database and opens the stores the
// scenarios and the checker read: Postgres direct, Redis through its proxy
// as the processes see it.
func (s *Suite) openStores(ctx context.Context) error {
	if out, err := s.command(ctx, "migrate", s.env("DATABASE_URL="+s.dbURL)); err != nil {
		return fmt.Errorf("orderpipe migrate: %w\n%s", err, out)
	}
	pool, err := database.OpenLazy(ctx, s.dbURL, 0)
	if err != nil {
		return err
	}
	rdb, err := redisconn.Config{Addr: s.redisAddr}.New(redisconn.Options{})
	if err != nil {
		pool.Close()
		return err
	}
	s.closeStores = func() {
		pool.Close()
		rdb.Close()
	}
	s.orders, s.pool = order.NewStore(pool), pool
	s.stock, s.sr = stock.New(rdb, s.prefix), stocktest.On(rdb, s.prefix)
	if err := s.stock.Ping(ctx); err != nil {
		return fmt.Errorf("reaching redis through the proxy %s: %w", s.redisAddr, err)
	}
	return nil
}

// startKafka starts the real cluster (Config.KafkaNodes) or the embedded
// broker on addr.
func (s *Suite) startKafka(ctx context.Context, addr string) error {
	if s.cfg.KafkaNodes > 0 {
		// Every broker starts before any is waited for: each needs a quorum.
		return s.startCluster(ctx)
	}
	// Every client reaches the broker through the proxy "kafka", which
	// the broker advertises as its address.
	link, err := s.toxi.add("kafka", addr)
	if err != nil {
		return err
	}
	s.brokers, s.kafkaLink = []string{link}, true
	_, kafkaPort, _ := net.SplitHostPort(addr)
	_, linkPort, _ := net.SplitHostPort(link)
	kafka := s.newProc("kafka", func(ctx context.Context) error { return event.Ping(ctx, s.brokers) },
		"KAFKA_EMBEDDED_PORT="+kafkaPort, "KAFKA_EMBEDDED_ADVERTISED_PORT="+linkPort, "KAFKA_EMBEDDED_DIR="+s.kafkaDir)
	s.procs = append(s.procs, kafka)
	if err := kafka.start(); err != nil {
		return err
	}
	return kafka.waitReady(ctx, 30*time.Second)
}

// components are the pipeline's processes, not yet started, in the order
// they start: workers, closer, relay, webhook deliverers, then the gateways
// (the first on gatewayAddr). workers names the workers for the log.
func (s *Suite) components(gatewayAddr string) (comps []*proc, workers []string, err error) {
	bootstrap := "KAFKA_BROKERS=" + strings.Join(s.brokers, ",")
	redisWait := s.redisWaitEnv()
	if comps, err = s.workerProcs(bootstrap, redisWait); err != nil {
		return nil, nil, err
	}
	for _, w := range comps {
		workers = append(workers, w.name)
	}
	closerAddr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	comps = append(comps, s.newProc("closer", healthz("http://"+closerAddr+"/healthz"),
		"DATABASE_URL="+s.proxiedURL, "METRICS_ADDR="+closerAddr))
	// The relay of orders.status, through the Postgres link like the closer
	// (its faults are the nemesis's); the audit checks I7 on what it sent.
	relayAddr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	comps = append(comps, s.newProc("relay", healthz("http://"+relayAddr+"/healthz"),
		"DATABASE_URL="+s.proxiedURL, bootstrap, "METRICS_ADDR="+relayAddr))
	hooks, err := s.startWebhooks()
	if err != nil {
		return nil, nil, err
	}
	comps = append(comps, hooks...)
	gateways, err := s.gatewayProcs(gatewayAddr, bootstrap, redisWait)
	if err != nil {
		return nil, nil, err
	}
	return append(comps, gateways...), workers, nil
}

// redisWaitEnv is REDIS_WAIT_REPLICAS with its timeout, read by the
// gateways (a reserve) and the workers (a claim) alike; nil without replicas
// to wait for.
func (s *Suite) redisWaitEnv() []string {
	if s.cfg.RedisWaitReplicas <= 0 {
		return nil
	}
	// Above the replica's ack time on a loaded machine (a later ack is
	// a 503 with nothing reserved, or a claim retried), below
	// REDIS_TIMEOUT (1s).
	wait := min(200*time.Millisecond+2*s.cfg.RedisReplLag, 900*time.Millisecond)
	return []string{"REDIS_WAIT_REPLICAS=" + strconv.Itoa(s.cfg.RedisWaitReplicas), "REDIS_WAIT_TIMEOUT=" + wait.String()}
}

// workerProcs are the workers, each with its own metrics address
// (workerMetrics, in the same order).
func (s *Suite) workerProcs(bootstrap string, redisWait []string) ([]*proc, error) {
	n := s.cfg.Workers
	if n <= 0 {
		n = 1
		if s.cfg.KafkaNodes > 0 {
			// Two members share the group, as in production: a killed one's
			// partitions move to the other after its session times out.
			n = 2
		}
	}
	var procs []*proc
	for i := range n {
		metricsAddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		s.workerMetrics = append(s.workerMetrics, "http://"+metricsAddr+"/metrics")
		w := s.newProc(numbered("worker", i), healthz("http://"+metricsAddr+"/healthz"),
			append([]string{"DATABASE_URL=" + s.proxiedURL, bootstrap, "METRICS_ADDR=" + metricsAddr}, redisWait...)...)
		w.args = []string{"worker"}
		procs = append(procs, w)
	}
	return procs, nil
}

// gatewayProcs are the gateways (Config.Gateways, at least one), the first
// on firstAddr; they reach Postgres direct, not through the proxy.
func (s *Suite) gatewayProcs(firstAddr, bootstrap string, redisWait []string) ([]*proc, error) {
	var procs []*proc
	for i := range max(s.cfg.Gateways, 1) {
		addr := firstAddr
		if i > 0 {
			var err error
			if addr, err = freeAddr(); err != nil {
				return nil, err
			}
		}
		u := "http://" + addr
		s.httpURLs = append(s.httpURLs, u)
		env := []string{"DATABASE_URL=" + s.dbURL, bootstrap, "HTTP_ADDR=" + addr}
		if s.cfg.ProduceTimeout > 0 {
			env = append(env, "PRODUCE_TIMEOUT="+s.cfg.ProduceTimeout.String())
		}
		env = append(env, redisWait...)
		g := s.newProc(numbered("gateway", i), healthz(u+"/readyz"), env...)
		g.args = []string{"gateway"}
		procs = append(procs, g)
	}
	return procs, nil
}

// numbered is the name of the i-th (from 0) process of a kind: worker,
// worker-2, worker-3, ...
func numbered(kind string, i int) string {
	if i == 0 {
		return kind
	}
	return kind + "-" + strconv.Itoa(i+1)
}

// workers are the worker processes, in the order of workerMetrics.
func (s *Suite) workers() []*proc {
	var ws []*proc
	for _, p := range s.procs {
		if strings.HasPrefix(p.name, "worker") {
			ws = append(ws, p)
		}
	}
	return ws
}

// real reports whether the broker is a real Kafka cluster.
func (s *Suite) real() bool { return len(s.kafkaProcs) > 0 }

// Close stops every process (the suite's Redis with them) and, unless
// Keep, removes the database and the broker's data; the logs stay.
func (s *Suite) Close() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		stop := p.stop
		if slices.Contains(s.kafkaProcs, p) {
			// The brokers' data is thrown away (or, kept, recovered by
			// the next start): no controlled shutdown of a cluster whose
			// quorum goes with it.
			stop = p.kill
		}
		if err := stop(); err != nil {
			s.logf("stopping: %v", err)
		}
	}
	if s.toxi != nil {
		s.toxi.close()
	}
	if s.hooks != nil {
		s.hooks.close()
	}
	if s.closeStores != nil {
		s.closeStores()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.cfg.Keep {
		s.logf("kept database %s and %s (the suite's Redis is gone with its processes)", s.dbName, s.kafkaDir)
	} else {
		if s.pg != nil {
			// The suite's PostgreSQL stopped with the processes: its
			// cluster goes.
			os.RemoveAll(s.pgDir)
		} else if err := testenv.DropDatabase(ctx, s.cfg.ServerURL, s.dbName); err != nil {
			s.logf("dropping database %s: %v", s.dbName, err)
		}
		os.RemoveAll(s.kafkaDir)
	}
}

func (s *Suite) logf(format string, args ...any) {
	fmt.Fprintf(s.cfg.Log, "chaos: "+format+"\n", args...)
}

// since is the time into the current scenario's load.
func (s *Suite) since() string {
	return fmt.Sprintf("+%.1fs", time.Since(s.loadStart).Seconds())
}

func (s *Suite) proc(name string) *proc {
	for _, p := range s.procs {
		if p.name == name {
			return p
		}
	}
	panic("no process " + name)
}

func (s *Suite) newProc(name string, ready func(context.Context) error, env ...string) *proc {
	clock := filepath.Join(s.Dir, name+".clock")
	return &proc{name: name, bin: s.cfg.Bin, args: []string{name}, env: s.env(append(env, "DEV_CLOCK_OFFSET_FILE="+clock)...),
		logPath: filepath.Join(s.Dir, name+".log"), clockPath: clock, readyFunc: ready}
}

func (s *Suite) env(extra ...string) []string {
	return append(append([]string{}, s.baseEnv...), extra...)
}

// command runs `orderpipe args[0]` to completion with env.
func (s *Suite) command(ctx context.Context, sub string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.cfg.Bin, append([]string{sub}, args...)...)
	cmd.Env = env
	cmd.SysProcAttr = childAttr()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// reconcile runs `orderpipe reconciler --once [args]` and returns its exit
// code and report.
func (s *Suite) reconcile(ctx context.Context, args ...string) (int, string) {
	out, err := s.command(ctx, "reconciler", s.env("DATABASE_URL="+s.dbURL), append([]string{"--once"}, args...)...)
	if f, ferr := os.OpenFile(filepath.Join(s.Dir, "reconciler.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); ferr == nil {
		fmt.Fprintf(f, "==== chaos: reconciler --once %s at %s (%v)\n%s", strings.Join(args, " "), time.Now().Format(time.RFC3339Nano), err, out)
		f.Close()
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out
	case errors.As(err, &exit):
		return exit.ExitCode(), out
	}
	return -1, out + err.Error()
}

// processEnv is this process's environment without any variable orderpipe
// reads (as `orderpipe env` lists them), so only the suite configures it.
func processEnv(bin string) ([]string, error) {
	out, err := exec.Command(bin, "env").Output()
	if err != nil {
		return nil, fmt.Errorf("orderpipe env: %w", err)
	}
	drop := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			drop[f[0]], drop[f[0]+"_FILE"] = true, true
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !drop[name] {
			env = append(env, kv)
		}
	}
	return env, nil
}

func healthz(u string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body) //nolint:errcheck
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", u, res.Status)
		}
		return nil
	}
}

// Ports of the suite's own servers and processes, kept for the whole run
// (a process restarts on its address): below Linux's ephemeral range
// (32768+) and the real cluster's ports (clusterPortFrom and up), as the
// cluster's are. A port the kernel hands out (:0) is an ephemeral one: once
// its process is killed, any outgoing connection may take it as its source
// port, and a pooled connection then holds it for good — a restarted
// worker found its metrics port "already in use" four times in a row.
const (
	suitePortFrom = 22000
	suitePortTo   = 27000
)

var (
	portMu   sync.Mutex
	nextPort = suitePortFrom + int(time.Now().UnixNano()%1000) // apart from a run just before
)

// freeAddr is a 127.0.0.1 address in the suite's range nothing listens on
// right now.
func freeAddr() (string, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range suitePortTo - suitePortFrom {
		port := nextPort
		if nextPort++; nextPort >= suitePortTo {
			nextPort = suitePortFrom
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr, nil
		}
	}
	return "", fmt.Errorf("no free port in %d-%d", suitePortFrom, suitePortTo)
}
