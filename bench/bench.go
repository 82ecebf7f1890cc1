// Package bench is the load tool behind `orderpipe bench`. It drives the HTTP
// API of a running pipeline with a flash-sale workload (random users, client
// retries that reuse their requestId, repeats of the same user), waits until
// the pipeline has drained, and audits Postgres and Redis for the invariants
// of the design (I1–I5). (The race of three ways of taking stock directly
// against Redis is a Go benchmark of pkg/stock, BenchmarkStrategies.)
//
// It only reads the pipeline's state to audit it and never repairs anything;
// the one thing it deletes is Redis keys under a prefix it is explicitly
// given (--purge-keys). It sends traffic only to the URL and the Redis it is
// given.
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"orderpipe/pkg/event"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
)

// Exit codes of Main.
const (
	ExitOK     = 0 // every invariant held
	ExitFailed = 1 // an invariant failed
	ExitError  = 2 // the run could not be made
)

// Env is what the tool takes from the server's environment variables.
type Env struct {
	HTTPAddr    string           // HTTP_ADDR: the default target is this port on 127.0.0.1
	AdminToken  string           // ADMIN_TOKEN: creates and preheats the activity
	DatabaseURL string           // DATABASE_URL: audited after the load
	Redis       redisconn.Config // REDIS_URL or REDIS_ADDR, credentials, TLS
	RedisPrefix string           // REDIS_KEY_PREFIX
	// Kafka brokers and the orders.status topic, read by the audit (I7).
	KafkaBrokers []string       // KAFKA_BROKERS, or the embedded broker's address
	StatusTopic  string         // KAFKA_STATUS_TOPIC
	Security     event.Security // KAFKA_TLS*, KAFKA_SASL_*
}

// Config is one load run.
type Config struct {
	URL string // base URL of the gateway, e.g. http://127.0.0.1:8080
	// WorkerMetrics is the worker's /metrics URL (consumer lag); empty ⇒
	// the gateway's, as in `orderpipe all`.
	WorkerMetrics string
	AdminToken    string
	DatabaseURL   string
	Redis         redisconn.Config
	RedisPrefix   string
	// KafkaBrokers, StatusTopic and KafkaSecurity reach orders.status for
	// the audit's I7 (no brokers ⇒ I7 is not checked).
	KafkaBrokers  []string
	StatusTopic   string
	KafkaSecurity event.Security

	Concurrency int     // requests in flight at once
	Requests    int     // requests in all, retries and repeats included
	Items       int     // items on sale: 1 is the hot-item case
	Stock       int64   // units per item
	Quantity    int     // units per order
	Buckets     int     // stock buckets per item (0 or 1: one)
	RetryShare  float64 // share of requests that are client retries (same requestId, same payload)
	RepeatShare float64 // share of requests that are the same user again (new requestId)
	ActivityID  int64   // 0 ⇒ derived from the clock, so each run has its own sale
	Seed        int64   // workload seed; 0 ⇒ from the clock
	// Rate > 0 is the open loop: request i is sent at start + i/Rate over
	// at most Concurrency connections, and its latency runs from then.
	Rate float64
	// FloorURL is a floor (the trivial handler of --serve-floor, or
	// bench/floorpipe) measured first with the same requests the same way:
	// at the same rate, or in a closed loop at the same concurrency.
	FloorURL string
	// FloorName names what serves FloorURL in the reports (default
	// "trivial handler"; bench/latency.sh: "floor pipeline").
	FloorName string
	// SoldOut is the sold-out flood: the sale has no stock and every
	// request is a new buyer, so every answer of the gateway is a refusal.
	SoldOut bool
	// Procs are the processes whose CPU each measured half reads from /proc
	// (--proc NAME=PID): the floor, orderpipe all, Redis, PostgreSQL.
	Procs []Proc

	Timeout      time.Duration // per HTTP request
	WaitReady    time.Duration // how long to wait for /readyz before starting
	DrainTimeout time.Duration // how long the pipeline may take to drain after the load

	// Progress receives a line per second while the run goes on; nil ⇒ none.
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.Items <= 0 {
		c.Items = 1
	}
	if c.Quantity <= 0 {
		c.Quantity = 1
	}
	if c.ActivityID <= 0 {
		c.ActivityID = time.Now().UnixMilli()
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = time.Minute
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

func (c Config) validate() error {
	var errs []string
	if c.Requests <= 0 {
		errs = append(errs, "-n must be positive")
	}
	if c.Stock < 0 {
		errs = append(errs, "--stock must not be negative")
	}
	if c.RetryShare < 0 || c.RepeatShare < 0 || c.RetryShare+c.RepeatShare > 1 {
		errs = append(errs, "--retry-share and --repeat-share must be ≥ 0 and add up to at most 1")
	}
	if c.Rate < 0 {
		errs = append(errs, "--rate must not be negative (0: closed loop)")
	}
	if c.SoldOut && (c.Stock != 0 || c.RetryShare != 0 || c.RepeatShare != 0) {
		errs = append(errs, "--sold-out sells no stock to new buyers only: it takes no --stock, --retry-share or --repeat-share")
	}
	if c.Quantity > 100 {
		errs = append(errs, "--quantity must be between 1 and 100")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

const usage = `usage: orderpipe bench [flags]

Drives the HTTP API of a running pipeline, waits for it to drain and audits
Postgres and Redis for the invariants I1–I5. Creates and preheats its own
activity through the admin API (needs ADMIN_TOKEN). Reads DATABASE_URL,
REDIS_URL or REDIS_ADDR (with the REDIS_* credentials and TLS settings) and
REDIS_KEY_PREFIX like the server. A line of progress per second
goes to stderr; the report to stdout. Exit 0 all invariants hold, 1 one
failed, 2 could not run.

With --rate R it is an open loop: request i is sent at start + i/R whatever
the answers do (over at most -c connections; a request that finds them all
busy waits and is counted late), and its latency runs from that intended
time, so a stall is charged to every request due meanwhile. With --floor-url
it first sends the same requests at the same rate to a trivial handler
(--serve-floor ADDR serves one) and prints both side by side.

With --floor-url and no --rate, the floor and then the gateway each get the
same requests from -c workers (closed loop). --sold-out makes that a
sold-out flood: no stock, every request a new buyer, so every answer is a
refusal (the floor: --serve-floor ADDR --floor-status 409). --proc NAME=PID
(repeatable; PID,PID,... sums several) reads each process's CPU from /proc
at both ends of each half and reports it per request: pass the floor, the
pipeline, Redis and PostgreSQL.

With --purge-keys it deletes every Redis key under REDIS_KEY_PREFIX (which
must not be empty) and exits: how make bench cleans up its throwaway pipeline.

flags:
`

// modes are the flags that pick what Main does instead of a load run.
type modes struct {
	jsonOut   *string
	htmlOut   *string
	purge     *bool
	floor     *string
	floorCode *int
}

// flagSet defines every flag of `orderpipe bench` on a fresh set, writing
// into cfg; Main, CheckArgs and Usage share it.
func flagSet(env Env, cfg *Config) (*flag.FlagSet, modes) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.URL, "url", defaultURL(env.HTTPAddr), "gateway base URL (default from HTTP_ADDR)")
	fs.StringVar(&cfg.WorkerMetrics, "worker-metrics", "", "the worker's /metrics URL, for the consumer lag (default: the gateway's, as in `orderpipe all`)")
	fs.IntVar(&cfg.Concurrency, "c", 50, "concurrency: requests in flight at once (with --rate: the most connections)")
	fs.IntVar(&cfg.Requests, "n", 2000, "requests in all (retries and repeats included)")
	fs.IntVar(&cfg.Items, "items", 1, "items on sale (1 = one hot item)")
	fs.Int64Var(&cfg.Stock, "stock", 500, "units per item")
	fs.IntVar(&cfg.Quantity, "quantity", 1, "units per order")
	fs.IntVar(&cfg.Buckets, "buckets", 1, "stock buckets per item (bucketed stock: docs/capacity.md)")
	fs.Float64Var(&cfg.RetryShare, "retry-share", 0.10, "share of requests that are client retries reusing a requestId")
	fs.Float64Var(&cfg.RepeatShare, "repeat-share", 0.05, "share of requests that repeat an earlier user with a new requestId")
	fs.Int64Var(&cfg.ActivityID, "activity", 0, "activity id to create (default: from the clock)")
	fs.Int64Var(&cfg.Seed, "seed", 0, "workload seed (default: from the clock)")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.DurationVar(&cfg.WaitReady, "wait-ready", 10*time.Second, "wait this long for /readyz before starting")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", time.Minute, "how long the pipeline may take to drain")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: send at this constant rate (req/s), each request at its intended time, latency measured from it (0: closed loop of -c workers)")
	fs.StringVar(&cfg.FloorURL, "floor-url", "", "first measure the floor at this base URL (the trivial handler of --serve-floor, or bench/floorpipe) with the same requests, at the same --rate or -c")
	fs.StringVar(&cfg.FloorName, "floor-name", "trivial handler", "what serves --floor-url, as the reports name it")
	fs.BoolVar(&cfg.SoldOut, "sold-out", false, "sold-out flood: a sale with no stock, every request a new buyer, so every answer is a refusal (sets --stock 0 and no retries or repeats)")
	fs.Var((*procFlags)(&cfg.Procs), "proc", "NAME=PID[,PID...]: report this process's CPU per request in each half, from /proc (repeatable)")
	var m modes
	m.floorCode = fs.Int("floor-status", 202, "with --serve-floor: the status of every answer, 202 (accepted) or 409 (SOLD_OUT, the floor of --sold-out)")
	m.jsonOut = fs.String("json-out", "", "also write the report as JSON to this file")
	m.htmlOut = fs.String("html-out", "", "also write the report as one self-contained HTML page (charts inline, no network) to this file")
	m.purge = fs.Bool("purge-keys", false, "delete every Redis key under REDIS_KEY_PREFIX and exit (refuses an empty prefix)")
	m.floor = fs.String("serve-floor", "", "serve the trivial handler (POST /v1/orders → a fixed JSON 202) on this address until interrupted, for --floor-url")
	return fs, m
}

// CheckArgs parses args as Main does, touching nothing: flag.ErrHelp when
// they ask for the usage, an error naming what is wrong when they are not
// `orderpipe bench` arguments.
func CheckArgs(args []string) error {
	var cfg Config
	fs, _ := flagSet(Env{}, &cfg)
	return setting.ParseFlagsOnly(fs, args)
}

// Usage writes the usage of `orderpipe bench`, every flag with its default.
func Usage(w io.Writer) {
	var cfg Config
	fs, _ := flagSet(Env{}, &cfg)
	setting.WriteUsage(w, usage, fs)
}

// Main is `orderpipe bench`: it parses args, runs, writes the report to
// stdout and returns the exit code.
func Main(ctx context.Context, args []string, env setting.Env, stdout, stderr io.Writer) int {
	r := &setting.Reader{Env: env}
	e := Env{HTTPAddr: r.String("HTTP_ADDR"), AdminToken: r.String("ADMIN_TOKEN"), DatabaseURL: r.String("DATABASE_URL"),
		Redis: redisconn.Read(r), RedisPrefix: r.String("REDIS_KEY_PREFIX"),
		KafkaBrokers: r.List("KAFKA_BROKERS"), StatusTopic: r.String("KAFKA_STATUS_TOPIC"), Security: event.ReadSecurity(r)}
	if err := r.Err(); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return ExitError
	}
	return run(ctx, e, args, stdout, stderr)
}

func run(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) int {
	cfg := Config{AdminToken: env.AdminToken, DatabaseURL: env.DatabaseURL, Redis: env.Redis, RedisPrefix: env.RedisPrefix,
		KafkaBrokers: env.KafkaBrokers, StatusTopic: env.StatusTopic, KafkaSecurity: env.Security,
		Progress: stderr}
	fs, m := flagSet(env, &cfg)
	fs.Usage = func() { Usage(stderr) }
	jsonOut, purge := m.jsonOut, m.purge
	if err := setting.ParseFlags("bench", fs, args, Usage, stdout, stderr); err != nil {
		return setting.Exit(err) // ExitOK after the usage, else ExitError
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return ExitError
	}
	if cfg.SoldOut {
		if err := applySoldOut(fs, &cfg); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return ExitError
		}
	}
	// Flags are checked as given: a zero or negative value is a mistake to
	// report, not something for defaults() to paper over.
	if err := checkFlags(cfg); err != nil && !*purge && *m.floor == "" {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		fs.Usage()
		return ExitError
	}

	if *m.floor != "" {
		err := ServeFloorStatus(ctx, *m.floor, *m.floorCode, func(a net.Addr) {
			fmt.Fprintf(stderr, "bench: trivial handler answering %d on %s\n", *m.floorCode, a)
		})
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return ExitError
		}
		return ExitOK
	}
	if *purge {
		fmt.Fprintf(stderr, "bench: deleting the keys under %s (SCAN and UNLINK, 1000 at a time)\n", cfg.RedisPrefix)
		n, err := PurgeKeys(ctx, cfg.Redis, cfg.RedisPrefix)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return ExitError
		}
		fmt.Fprintf(stderr, "bench: deleted %d keys under %s\n", n, cfg.RedisPrefix)
		return ExitOK
	}
	rep, err := Run(ctx, cfg)
	if err == nil && *m.htmlOut != "" {
		if err := writeHTMLFile(*m.htmlOut, rep); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return ExitError
		}
		fmt.Fprintf(stderr, "bench: HTML report in %s\n", *m.htmlOut)
	}
	return finish(rep, err, *jsonOut, stdout, stderr)
}

// finish prints a run's report, saves it as JSON and turns it into the exit code.
func finish(rep *Report, err error, jsonOut string, stdout, stderr io.Writer) int {
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return ExitError
	}
	rep.WriteText(stdout)
	if err := writeJSONFile(jsonOut, rep); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return ExitError
	}
	if !rep.Passed() {
		return ExitFailed
	}
	return ExitOK
}

// applySoldOut sets the sold-out flood's sale and workload, refusing flags
// given that would contradict it.
func applySoldOut(fs *flag.FlagSet, cfg *Config) error {
	var clash []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "stock", "retry-share", "repeat-share":
			clash = append(clash, "--"+f.Name)
		}
	})
	if len(clash) > 0 {
		return fmt.Errorf("--sold-out sells no stock to new buyers only: drop %s", strings.Join(clash, ", "))
	}
	cfg.Stock, cfg.RetryShare, cfg.RepeatShare = 0, 0, 0
	return nil
}

// checkFlags refuses values defaults() would otherwise silently replace.
func checkFlags(c Config) error {
	var errs []string
	if c.Concurrency < 1 {
		errs = append(errs, "-c must be at least 1")
	}
	if c.Items < 1 {
		errs = append(errs, "--items must be at least 1")
	}
	if c.Quantity < 1 {
		errs = append(errs, "--quantity must be between 1 and 100")
	}
	if c.Buckets < 1 || c.Buckets > stock.MaxBuckets {
		errs = append(errs, fmt.Sprintf("--buckets must be between 1 and %d", stock.MaxBuckets))
	}
	if c.ActivityID < 0 {
		errs = append(errs, "--activity must be positive (or 0 for one from the clock)")
	}
	if c.Timeout <= 0 || c.DrainTimeout <= 0 || c.WaitReady < 0 {
		errs = append(errs, "--timeout and --drain-timeout must be positive, --wait-ready not negative")
	}
	if len(errs) > 0 {
		return errors.Join(errors.New(strings.Join(errs, "; ")), c.validate())
	}
	return c.validate()
}

// defaultURL turns a listen address such as ":8080" into a URL on loopback.
func defaultURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "http://127.0.0.1:8080"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
