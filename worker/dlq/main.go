package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/secret"
	"orderpipe/pkg/setting"
)

// Usage is `orderpipe dlq --help`.
const Usage = `usage: orderpipe dlq list [--json] [--limit N]
       orderpipe dlq show <partition:offset> [--json]
       orderpipe dlq replay (<partition:offset>... | --all) [--json]

The dead-letter topic KAFKA_DLQ_TOPIC holds the messages of KAFKA_TOPIC a
worker could not decode or validate (the worker released their reservations,
when the journal still held them). Each keeps the message's key and value
(cut to 64 KiB) and headers error, source-partition, source-offset,
original-size (truncated, headers-dropped when it had to be cut).

  list     the dead letters, oldest first: position, time, where it came from,
           the error, whether the event schema accepts it now, replayed or not
           --limit N   only the newest N (default 100; 0: all)
  show     one dead letter in full: headers, value, verdict, replay
  replay   after a fix, publish dead letters to KAFKA_TOPIC again: each is
           re-validated with the event schema (as the worker decodes), published
           with the gateway's key and headers and its trace context, and
           recorded in Postgres (dlq_replays), so none is ever published twice:
           a letter replayed before is reported ALREADY_REPLAYED and skipped.
           --all       every dead letter not replayed yet
           The worker then decides each as any event (idempotently: a request
           already decided is skipped, a reservation the dead letter released
           is a ghost); follow one with orderpipe locate <requestId>.
  --json   one JSON object instead of the table

Needs KAFKA_BROKERS and DATABASE_URL.

Exit status: 0 done; 1 something refused (no dead letter at a position, or a
letter the schema still refuses); 2 could not run.
`

// mainArgs are the subcommand, operands and flags of `orderpipe dlq`.
type mainArgs struct {
	sub       string
	positions []Position
	all, json bool
	limit     int
}

// CheckArgs reads and checks the arguments, touching nothing (flag.ErrHelp
// for -h/--help).
func CheckArgs(args []string) error { _, err := parseArgs(args); return err }

func parseArgs(args []string) (mainArgs, error) {
	a := mainArgs{limit: 100}
	sub, fs, err := setting.Subcommand("dlq", args, &a.json, "list", "show", "replay")
	if err != nil {
		return a, err
	}
	a.sub = sub
	if a.sub == "list" {
		fs.IntVar(&a.limit, "limit", 100, "newest N only (0: all)")
	}
	if a.sub == "replay" {
		fs.BoolVar(&a.all, "all", false, "every dead letter not replayed yet")
	}
	pos, err := setting.ParseInterleaved(fs, args[1:])
	if err != nil {
		return a, err
	}
	if a.sub == "list" && len(pos) > 0 {
		return a, fmt.Errorf("unexpected argument %q", pos[0])
	}
	for _, p := range pos {
		at, err := ParsePosition(p)
		if err != nil {
			return a, err
		}
		a.positions = append(a.positions, at)
	}
	switch {
	case a.sub == "list" && a.limit < 0:
		return a, errors.New("--limit must be 0 or more")
	case a.sub == "show" && len(pos) != 1:
		return a, errors.New("want exactly one <partition:offset>")
	case a.sub == "replay" && a.all == (len(pos) > 0):
		return a, errors.New("want <partition:offset>... or --all")
	}
	return a, nil
}

// exitCode asks Main for a specific exit status (setting.Exit).
type exitCode = setting.ExitCode

// Main is `orderpipe dlq`. Exit codes: 0 done, 1 refused, 2 could not run.
func Main(ctx context.Context, args []string, env setting.Env, stdout, stderr io.Writer) int {
	return setting.MainArgs("orderpipe dlq", Usage, args, parseArgs, stdout, stderr, func(a mainArgs) error {
		return run(ctx, env, a, stdout, stderr)
	})
}

func run(ctx context.Context, env setting.Env, a mainArgs, stdout, stderr io.Writer) error {
	c := &session{args: a, stdout: stdout, stderr: stderr}
	closeAll, err := c.open(ctx, env)
	if err != nil {
		return c.cannot(err)
	}
	defer closeAll()
	switch a.sub {
	case "list":
		return c.list(ctx)
	case "show":
		return c.show(ctx)
	}
	return c.replay(ctx)
}

// session is one `orderpipe dlq` run: its arguments, settings, the
// dead-letter topic's reader and what Postgres says was replayed.
type session struct {
	args           mainArgs
	stdout, stderr io.Writer
	cfg            struct {
		KafkaBrokers                           []string
		KafkaSecurity                          event.Security
		KafkaTopic, KafkaDLQTopic, DatabaseURL string
	}
	reader  Reader
	orders  *order.Store
	replays map[Position]Replay
}

// cannot reports err as the reason the command could not run (exit 2).
func (c *session) cannot(err error) error {
	return setting.CouldNotRun(c.stderr, "orderpipe dlq "+c.args.sub, err)
}

// open reads the settings and connects; closeAll releases what it opened.
func (c *session) open(ctx context.Context, env setting.Env) (closeAll func(), err error) {
	r := &setting.Reader{Env: env}
	c.cfg.KafkaBrokers, c.cfg.KafkaSecurity = r.List("KAFKA_BROKERS"), event.ReadSecurity(r)
	c.cfg.KafkaTopic, c.cfg.KafkaDLQTopic, c.cfg.DatabaseURL = r.String("KAFKA_TOPIC"), r.String("KAFKA_DLQ_TOPIC"), r.String("DATABASE_URL")
	if err := r.Err(); err != nil {
		return nil, err
	}
	if len(c.cfg.KafkaBrokers) == 0 {
		return nil, errors.New("KAFKA_BROKERS is empty: the dead-letter topic is on a Kafka cluster")
	}
	tr := c.cfg.KafkaSecurity.Transport(5 * time.Second)
	c.reader = Reader{Client: &kafka.Client{Addr: kafka.TCP(c.cfg.KafkaBrokers...), Timeout: 15 * time.Second, Transport: tr},
		Topic: c.cfg.KafkaDLQTopic}
	pool, err := database.Open(ctx, c.cfg.DatabaseURL, 2)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	closeAll = func() { pool.Close(); tr.CloseIdleConnections() }
	c.orders = order.NewStore(pool)
	if c.replays, err = Replays(ctx, c.orders, c.cfg.KafkaDLQTopic); err != nil {
		closeAll()
		return nil, err
	}
	return closeAll, nil
}

// withReplay is l with its replay, if it had one.
func (c *session) withReplay(l Letter) Letter {
	if r, ok := c.replays[l.Position]; ok {
		l.Replay = &r
	}
	return l
}

func (c *session) list(ctx context.Context) error {
	letters, err := listLetters(ctx, c.reader, c.args.limit)
	if err != nil {
		return c.cannot(err)
	}
	for i := range letters {
		letters[i] = c.withReplay(letters[i])
	}
	if c.args.json {
		return writeJSONLine(c.stdout, struct {
			Topic   string   `json:"topic"`
			Letters []Letter `json:"letters"`
		}{c.cfg.KafkaDLQTopic, letters})
	}
	writeLetterTable(c.stdout, c.cfg.KafkaDLQTopic, letters)
	return nil
}

func (c *session) show(ctx context.Context) error {
	l, err := c.reader.Read(ctx, c.args.positions[0])
	if errors.Is(err, ErrNotFound) {
		fmt.Fprintf(c.stderr, "orderpipe dlq show: %v\n", err)
		return exitCode(1)
	}
	if err != nil {
		return c.cannot(err)
	}
	l = c.withReplay(l)
	if c.args.json {
		return writeJSONLine(c.stdout, letterDetail(l))
	}
	writeLetter(c.stdout, c.cfg.KafkaDLQTopic, l)
	return nil
}

// replay replays the letters asked for (or --all not replayed yet) and
// reports what was done, even when a later letter could not be.
func (c *session) replay(ctx context.Context) error {
	w := event.NewWriter(event.WriterConfig{Brokers: c.cfg.KafkaBrokers, Topic: c.cfg.KafkaTopic, Security: c.cfg.KafkaSecurity,
		WriteTimeout: 5 * time.Second})
	defer w.Close()
	rp := Replayer{Orders: c.orders, Producer: w, DLQTopic: c.cfg.KafkaDLQTopic, Topic: c.cfg.KafkaTopic}
	results, refused, runErr := c.replayAll(ctx, rp)
	if c.args.json {
		out := struct {
			Topic   string   `json:"topic"`
			To      string   `json:"to"`
			Results []Result `json:"results"`
			Error   string   `json:"error,omitempty"`
		}{Topic: c.cfg.KafkaDLQTopic, To: c.cfg.KafkaTopic, Results: results}
		if runErr != nil {
			out.Error = secret.Scrub(runErr.Error())
		}
		if results == nil {
			out.Results = []Result{}
		}
		if err := writeJSONLine(c.stdout, out); err != nil {
			return err
		}
	} else {
		writeReplayResults(c.stdout, c.cfg.KafkaDLQTopic, c.cfg.KafkaTopic, results)
	}
	switch {
	case runErr != nil:
		return c.cannot(runErr)
	case refused:
		return exitCode(1)
	}
	return nil
}

// replayAll replays each letter asked for: refused when one was not found
// or the schema still refuses it; runErr stops at the first letter that
// could not be replayed.
func (c *session) replayAll(ctx context.Context, rp Replayer) (results []Result, refused bool, runErr error) {
	replay := func(l Letter) error {
		res, err := rp.Replay(ctx, l)
		if err != nil {
			return err
		}
		refused = refused || res.Outcome == StillInvalid
		results = append(results, res)
		return nil
	}
	if c.args.all {
		parts, err := c.reader.Partitions(ctx)
		if err != nil {
			return nil, false, err
		}
		runErr = c.reader.Scan(ctx, parts, func(l Letter) error {
			if _, done := c.replays[l.Position]; done {
				return nil // replayed before: --all is about the rest
			}
			return replay(l)
		})
		return results, refused, runErr
	}
	for _, at := range c.args.positions {
		l, err := c.reader.Read(ctx, at)
		if errors.Is(err, ErrNotFound) {
			refused = true
			results = append(results, Result{Position: at, Outcome: NotFound, Reason: "no dead letter at this position"})
			continue
		}
		if err == nil {
			err = replay(l)
		}
		if err != nil {
			return results, refused, err
		}
	}
	return results, refused, nil
}

// listLetters reads the newest limit dead letters (all for 0), oldest first.
func listLetters(ctx context.Context, r Reader, limit int) ([]Letter, error) {
	parts, err := r.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	// At most limit from each partition can be among the newest limit.
	for i := range parts {
		if limit > 0 && parts[i].Next-parts[i].First > int64(limit) {
			parts[i].First = parts[i].Next - int64(limit)
		}
	}
	letters := []Letter{}
	if err := r.Scan(ctx, parts, func(l Letter) error { letters = append(letters, l); return nil }); err != nil {
		return nil, err
	}
	sort.SliceStable(letters, func(i, j int) bool {
		if !letters[i].Time.Equal(letters[j].Time) {
			return letters[i].Time.Before(letters[j].Time)
		}
		if letters[i].Partition != letters[j].Partition {
			return letters[i].Partition < letters[j].Partition
		}
		return letters[i].Offset < letters[j].Offset
	})
	if limit > 0 && len(letters) > limit {
		letters = letters[len(letters)-limit:]
	}
	return letters, nil
}

func writeLetterTable(w io.Writer, topic string, letters []Letter) {
	fmt.Fprintf(w, "%s: %d dead letter(s)\n", topic, len(letters))
	if len(letters) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POSITION\tTIME\tSOURCE\tSIZE\tREQUEST\tVALID NOW\tREPLAYED\tERROR")
	for _, l := range letters {
		valid, replayed := "yes", "-"
		if l.Invalid != "" {
			valid = "no"
		}
		if l.Replay != nil {
			replayed = l.Replay.ReplayedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Position, l.Time.Format(time.RFC3339), source(l), size(l),
			orDash(l.RequestID), valid, replayed, oneLine(l.Error, 100))
	}
	tw.Flush()
}

func source(l Letter) string {
	if l.SourcePartition < 0 || l.SourceOffset < 0 {
		return "?"
	}
	return fmt.Sprintf("%d:%d", l.SourcePartition, l.SourceOffset)
}

func size(l Letter) string {
	s := fmt.Sprint(len(l.Value))
	if l.OriginalSize >= 0 && l.OriginalSize != len(l.Value) {
		s = fmt.Sprintf("%d of %d", len(l.Value), l.OriginalSize)
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// detail is `dlq show --json`: the letter with its headers and value.
type detail struct {
	Letter
	Key         string   `json:"key"`
	Value       string   `json:"value,omitempty"`
	ValueBase64 []byte   `json:"valueBase64,omitempty"` // when the value is not UTF-8
	Headers     []Header `json:"headers"`
}

func letterDetail(l Letter) detail {
	d := detail{Letter: l, Key: string(l.Key), Headers: l.Headers}
	if d.Headers == nil {
		d.Headers = []Header{}
	}
	if text, ok := l.ValueText(); ok {
		d.Value = text
	} else {
		d.ValueBase64 = l.Value
	}
	return d
}

func writeLetter(w io.Writer, topic string, l Letter) {
	fmt.Fprintf(w, "dead letter %s/%s, %s\n", topic, l.Position, l.Time.Format(time.RFC3339Nano))
	fmt.Fprintf(w, "  error:       %s\n", l.Error)
	fmt.Fprintf(w, "  source:      partition:offset %s of the order topic\n", source(l))
	fmt.Fprintf(w, "  size:        %s bytes", size(l))
	if l.Truncated {
		fmt.Fprint(w, " (truncated)")
	}
	if l.HeadersDropped > 0 {
		fmt.Fprintf(w, ", %d original headers dropped", l.HeadersDropped)
	}
	fmt.Fprintln(w)
	if l.RequestID != "" {
		fmt.Fprintf(w, "  request:     %s  order %s  (orderpipe locate %s)\n", l.RequestID, orDash(l.OrderNo), l.RequestID)
	}
	if l.Invalid == "" {
		fmt.Fprintln(w, "  now:         valid: a replay would publish it")
	} else {
		fmt.Fprintf(w, "  now:         still invalid: %s\n", l.Invalid)
	}
	if l.Replay != nil {
		fmt.Fprintf(w, "  replayed:    %s to %s (request %s, order %s)\n", l.Replay.ReplayedAt.UTC().Format(time.RFC3339), l.Replay.Topic,
			l.Replay.RequestID, l.Replay.OrderNo)
	} else {
		fmt.Fprintln(w, "  replayed:    no")
	}
	fmt.Fprintf(w, "  key:         %q\n", l.Key)
	fmt.Fprintln(w, "  headers:")
	for _, h := range l.Headers {
		fmt.Fprintf(w, "    %s: %s\n", h.Key, oneLine(h.Value, 1100))
	}
	if text, ok := l.ValueText(); ok {
		fmt.Fprintf(w, "  value:\n%s\n", text)
	} else {
		fmt.Fprintf(w, "  value (not UTF-8, %d bytes): %q\n", len(l.Value), l.Value)
	}
}

func writeReplayResults(w io.Writer, from, to string, results []Result) {
	counts := map[Outcome]int{}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(results) > 0 {
		fmt.Fprintln(tw, "POSITION\tOUTCOME\tREQUEST\tORDER\tWHEN / WHY")
	}
	for _, r := range results {
		counts[r.Outcome]++
		why := r.Reason
		if !r.ReplayedAt.IsZero() {
			why = r.ReplayedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Position, r.Outcome, orDash(r.RequestID), orDash(r.OrderNo), oneLine(why, 120))
	}
	tw.Flush()
	fmt.Fprintf(w, "%s → %s: %d replayed, %d already replayed, %d still invalid, %d not found\n", from, to,
		counts[Replayed], counts[AlreadyReplayed], counts[StillInvalid], counts[NotFound])
}

func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
