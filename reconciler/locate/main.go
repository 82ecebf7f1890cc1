package locate

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"time"

	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/secret"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// Usage is `orderpipe locate --help`.
const Usage = `usage: orderpipe locate <requestId> [--json] [--activity A --item I]

Shows everything known about one order request: the gateway's dedup record
and journal entry in Redis, the worker's decision (processed_requests), the
order and its status times, compensations, and the trace id (open it in the
trace UI, e.g. Jaeger at :16686). With TRACE_QUERY_URL set (a Jaeger query
service, e.g. http://jaeger:16686) it also prints the request's span tree read
from Jaeger; else, with TRACE_STORE_DIR set (TRACES=1 make run), from that local
span store. Postgres names the item when the request got
there; otherwise the items of activities whose sale ended less than a day ago
are searched (--activity/--item narrow that). A requestId that begins with
"-" goes after "--": orderpipe locate -- -r1.

  --json       one JSON object instead of the text block
  --activity   activity id to search
  --item       item id to search (with --activity)

A request the gateway refused (409, 429, …) leaves no record; with a trace
store configured it is found by its requestId in the gateway's spans: REFUSED,
with the answer's status and its trace. With Redis unreachable the report is
what Postgres knows, saying Redis was not read.

Exit status: 0 found (REFUSED included), 1 unknown requestId, 2 could not run
(also when Redis could not be read and Postgres does not know the request).
`

// mainArgs are the operand and flags of `orderpipe locate`.
type mainArgs struct {
	requestID      string
	json           bool
	activity, item int64
}

// CheckArgs reads and checks the arguments, touching nothing (flag.ErrHelp
// for -h/--help).
func CheckArgs(args []string) error { _, err := parseArgs(args); return err }

func parseArgs(args []string) (mainArgs, error) {
	var a mainArgs
	fs := flag.NewFlagSet("locate", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by the caller, with the usage
	fs.BoolVar(&a.json, "json", false, "JSON output")
	fs.Int64Var(&a.activity, "activity", 0, "activity id")
	fs.Int64Var(&a.item, "item", 0, "item id")
	// The requestId may come before, between or after the flags.
	var pos []string
	var err error
	for {
		if err = fs.Parse(args); err != nil || fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case err != nil:
	case len(pos) != 1:
		err = errors.New("want exactly one requestId")
	case a.activity < 0 || a.item < 0 || (a.item > 0 && a.activity == 0) || set["activity"] && a.activity == 0 || set["item"] && a.item == 0:
		err = errors.New("--activity and --item must be positive, and --item needs --activity")
	case !event.ValidRequestID(pos[0]):
		err = fmt.Errorf("requestId %q: want 1-64 characters of A-Z a-z 0-9 . _ : -", pos[0])
	default:
		a.requestID = pos[0]
	}
	return a, err
}

// ReadTraceQueryURL is TRACE_QUERY_URL, which must be an http(s) URL.
func ReadTraceQueryURL(r *setting.Reader) string {
	s := r.String("TRACE_QUERY_URL")
	if u, err := url.Parse(s); s != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		r.Fail("TRACE_QUERY_URL: want the Jaeger query service's http(s) URL, such as http://jaeger:16686")
	}
	return s
}

// exitCode asks Main for a specific exit status (setting.Exit).
type exitCode = setting.ExitCode

// Main is `orderpipe locate`. Exit codes: 0 found, 1 unknown, 2 could not run.
func Main(ctx context.Context, args []string, env setting.Env, stdout, stderr io.Writer) int {
	return setting.MainArgs("orderpipe locate", Usage, args, parseArgs, stdout, stderr, func(a mainArgs) error {
		return run(ctx, env, a, stdout, stderr)
	})
}

func run(ctx context.Context, env setting.Env, a mainArgs, stdout, stderr io.Writer) error {
	// couldNotRun exits 2: "could not look", never confused with exit 1,
	// "looked and found nothing".
	couldNotRun := func(err error) error { return setting.CouldNotRun(stderr, "orderpipe locate", err) }
	r := &setting.Reader{Env: env}
	cfg := struct {
		DatabaseURL, RedisPrefix, TraceStoreDir, TraceQueryURL string
		redis                                                  redisconn.Config
	}{r.String("DATABASE_URL"), r.String("REDIS_KEY_PREFIX"), r.String("TRACE_STORE_DIR"), ReadTraceQueryURL(r), redisconn.Read(r)}
	if err := r.Err(); err != nil {
		return couldNotRun(err)
	}
	rid, asJSON, activity, item := a.requestID, &a.json, &a.activity, &a.item

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := database.Open(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return couldNotRun(err)
	}
	defer pool.Close()
	rdb, err := cfg.redis.New(redisconn.Options{PoolSize: 2, DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second})
	if err != nil {
		return couldNotRun(err)
	}
	defer rdb.Close()
	f := Finder{Orders: order.NewStore(pool), Stock: stock.New(rdb, cfg.RedisPrefix)}
	rep, err := f.Find(ctx, Query{RequestID: rid, ActivityID: *activity, ItemID: *item})
	if err != nil {
		return couldNotRun(fmt.Errorf("locating %s: %w", rid, err))
	}
	spans := attachSpans(ctx, cfg.TraceStoreDir, cfg.TraceQueryURL, rid, &rep)
	if *asJSON {
		err = writeJSONLine(stdout, rep)
	} else {
		_, err = io.WriteString(stdout, rep.Text()+spans.text(rep))
	}
	if err != nil {
		return err
	}
	switch {
	case rep.Status == StatusUnknown && rep.RedisError != "":
		// Not "unknown": Redis, where a PENDING reservation lives, was not read.
		return couldNotRun(fmt.Errorf("reading redis: %s", rep.RedisError))
	case rep.Status == StatusUnknown:
		return exitCode(1)
	}
	return nil
}

// spanSource is where a report's spans were read: the Jaeger query service
// when one is configured, else the local span store; err is the read's.
type spanSource struct {
	source     string
	fromJaeger bool
	err        error
}

// attachSpans reads the request's spans into rep: by its trace id, or,
// when no record names a trace (a refused request, an expired dedup record,
// Redis unreadable), by the requestId the spans carry.
func attachSpans(ctx context.Context, storeDir, queryURL, rid string, rep *Report) spanSource {
	ss := spanSource{source: storeDir, fromJaeger: queryURL != ""}
	if rep.TraceID == "" && (ss.fromJaeger || ss.source != "") {
		var spans []telemetry.StoredSpan
		if ss.fromJaeger {
			sctx, cancel := context.WithTimeout(ctx, traceQueryTimeout)
			spans, ss.err = telemetry.QueryRequestSpans(sctx, nil, queryURL, rid)
			cancel()
		} else {
			spans, ss.err = telemetry.RequestSpans(ss.source, rid)
		}
		if trace, status, ok := telemetry.GatewayAnswer(spans); ok {
			rep.Answered(trace, status)
		}
		if ss.err != nil {
			ss.source = cmpOr(redactURL(queryURL), ss.source)
			rep.SpansError = secret.Scrub(fmt.Sprintf("searching %s for the requestId: %v", ss.source, ss.err))
		}
	}
	switch {
	case ss.err != nil:
	case rep.TraceID == "":
	case ss.fromJaeger:
		ss.source = redactURL(queryURL)
		rep.Spans, ss.err = readJaegerTrace(ctx, queryURL, rep.TraceID)
		if ss.err != nil {
			rep.SpansError = secret.Scrub("trace store unreachable: " + ss.err.Error())
		}
	case ss.source != "":
		rep.Spans, ss.err = telemetry.ReadTrace(ss.source, rep.TraceID)
		if ss.err != nil {
			rep.SpansError = fmt.Sprintf("could not read %s: %v", ss.source, ss.err)
		}
	}
	return ss
}

// text is the spans' part of the text report: their tree, or why there is
// none.
func (ss spanSource) text(rep Report) string {
	text := ""
	if len(rep.Spans) > 0 {
		text += "\nspans (" + ss.source + "):\n" + SpanTree(rep.Spans)
	}
	switch {
	case ss.err != nil:
		text += "\nspans: " + rep.SpansError + "\n"
	case len(rep.Spans) == 0 && rep.TraceID != "" && ss.fromJaeger:
		text += "\nspans: none of trace " + rep.TraceID + " in " + ss.source + " (not sampled, not exported yet, or past Jaeger's retention)\n"
	case len(rep.Spans) == 0 && rep.TraceID != "" && ss.source != "":
		text += "\nspans: none of trace " + rep.TraceID + " in " + ss.source + " (not sampled, or not exported yet: spans are written within about a second)\n"
	}
	return text
}

// traceQueryTimeout bounds reading a trace, and the traces it links, from
// the Jaeger query service: an unreachable one costs locate this much, no more.
var traceQueryTimeout = 5 * time.Second

// readJaegerTrace reads the request's trace and its linked traces from the
// Jaeger query service at base, within traceQueryTimeout.
func readJaegerTrace(ctx context.Context, base, traceID string) ([]telemetry.StoredSpan, error) {
	ctx, cancel := context.WithTimeout(ctx, traceQueryTimeout)
	defer cancel()
	return telemetry.QueryTrace(ctx, nil, base, traceID)
}

// redactURL is u without its password, for output.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return u
}

func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
