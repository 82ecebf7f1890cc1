// Package events is `orderpipe events`: it reads the orders.status topic
// and prints each state change with its version, filtered by orderNo or
// requestId, once or following the topic. It only reads the topic: it
// never publishes, and never reads Postgres (`orderpipe locate` shows an
// order's events still in the outbox).
package events

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/topic"
)

// Env is what `orderpipe events` takes from the configuration.
type Env struct {
	Brokers  []string       // KAFKA_BROKERS
	Topic    string         // KAFKA_STATUS_TOPIC
	Security event.Security // KAFKA_TLS*, KAFKA_SASL_*
}

// Exit codes.
const (
	ExitOK      = 0 // printed (with a filter: at least one event matched)
	ExitNone    = 1 // a filter matched nothing
	ExitFailure = 2 // could not run
)

const usage = `usage: orderpipe events [--order-no N] [--request-id R] [--follow] [--json]

Reads the orders.status topic (KAFKA_STATUS_TOPIC) from its first retained
event and prints every state change of an order: when, version, status,
reason, orderNo, requestId, user, activity:item, quantity, partition:offset.
The relay publishes at least once, so a version may appear twice; a
consumer keeps the highest version per orderNo. Events of one order are in
version order (one partition). Exit 0; with a filter, 1 if nothing matched;
2 if the topic could not be read.

`

type options struct {
	orderNo, requestID string
	follow, json       bool
	poll               time.Duration
}

func flagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.orderNo, "order-no", "", "only this order's events")
	fs.StringVar(&o.requestID, "request-id", "", "only the events of the order of this requestId")
	fs.BoolVar(&o.follow, "follow", false, "keep reading new events until interrupted")
	fs.BoolVar(&o.json, "json", false, "one JSON object per line: the event's value with its partition, offset and headers")
	fs.DurationVar(&o.poll, "poll", 500*time.Millisecond, "with --follow, how often the topic is read again")
	return fs
}

// CheckArgs checks the arguments without touching anything.
func CheckArgs(args []string) error {
	var o options
	return setting.ParseFlagsOnly(flagSet(&o), args)
}

// Usage writes the usage with every flag and its default.
func Usage(w io.Writer) {
	var o options
	setting.WriteUsage(w, usage, flagSet(&o))
}

// Main is `orderpipe events`: the settings read (KAFKA_BROKERS,
// KAFKA_STATUS_TOPIC, the brokers' TLS and SASL), then Run.
func Main(ctx context.Context, args []string, env setting.Env, stdout, stderr io.Writer) int {
	r := &setting.Reader{Env: env}
	e := Env{Brokers: r.List("KAFKA_BROKERS"), Topic: r.String("KAFKA_STATUS_TOPIC"), Security: event.ReadSecurity(r)}
	if err := r.Err(); err != nil {
		fmt.Fprintf(stderr, "orderpipe events: %v\n", err)
		return ExitFailure
	}
	return Run(ctx, e, args, stdout, stderr)
}

// Run is `orderpipe events` on env.
func Run(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flagSet(&o)
	if err := setting.ParseFlags("orderpipe events", fs, args, Usage, stdout, stderr); err != nil {
		return setting.Exit(err) // ExitOK after the usage, else ExitFailure
	}
	if len(env.Brokers) == 0 {
		fmt.Fprintln(stderr, "orderpipe events: KAFKA_BROKERS is empty: set it to the cluster (or the embedded broker's 127.0.0.1:KAFKA_EMBEDDED_PORT)")
		return ExitFailure
	}
	if env.Topic == "" {
		env.Topic = event.StatusTopic
	}
	client := &kafka.Client{Addr: kafka.TCP(env.Brokers...), Timeout: 10 * time.Second, Transport: env.Security.Transport(5 * time.Second)}
	n, err := tail(ctx, topic.Reader{Client: client, Topic: env.Topic}, o, stdout)
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "orderpipe events: %v\n", err)
		return ExitFailure
	}
	if n == 0 && (o.orderNo != "" || o.requestID != "") {
		if !o.json {
			fmt.Fprintln(stderr, "orderpipe events: no event matched")
		}
		return ExitNone
	}
	return ExitOK
}

// tail prints the matching events from each partition's start to its end,
// and with follow goes on with what is appended. It returns how many it
// printed.
func tail(ctx context.Context, r topic.Reader, o options, w io.Writer) (int, error) {
	t := tailer{r: r, o: o, w: w, headed: o.json, next: map[int]int64{}}
	for {
		if err := t.pass(ctx); err != nil {
			return t.printed, err
		}
		if !o.follow {
			return t.printed, nil
		}
		select {
		case <-ctx.Done():
			return t.printed, nil
		case <-time.After(o.poll):
		}
	}
}

// tailer is where tail is: what it printed and where each partition
// goes on from.
type tailer struct {
	r       topic.Reader
	o       options
	w       io.Writer
	headed  bool          // the table's header is out (or not wanted: JSON)
	next    map[int]int64 // partition → the offset to read from
	printed int
}

// pass reads each partition from where the last pass ended to its end.
func (t *tailer) pass(ctx context.Context) error {
	bounds, err := t.r.Partitions(ctx)
	if err != nil {
		return err
	}
	if !t.headed { // once the broker answered: a failure prints no table
		fmt.Fprintf(t.w, "%-27s %-3s %-9s %-22s %-32s %-20s %-8s %-12s %-3s %s\n",
			"AT", "V", "STATUS", "REASON", "ORDER", "REQUEST", "USER", "ITEM", "QTY", "WHERE")
		t.headed = true
	}
	for i, b := range bounds {
		if from, ok := t.next[b.Partition]; ok && from > b.First {
			bounds[i].First = from
		}
	}
	if err := t.r.Scan(ctx, bounds, t.print); err != nil {
		return err
	}
	// Offsets past the last record read (transaction markers) are done too.
	for _, b := range bounds {
		if t.next[b.Partition] < b.Next {
			t.next[b.Partition] = b.Next
		}
	}
	return nil
}

// print writes the record's event when it matches the filter; without a
// filter an undecodable record is named, with one it cannot match.
func (t *tailer) print(rec topic.Record) error {
	t.next[rec.Partition] = rec.Offset + 1
	st, err := event.DecodeStatus(rec.Value)
	if err != nil {
		if t.o.orderNo == "" && t.o.requestID == "" {
			fmt.Fprintf(t.w, "%s: undecodable: %v\n", rec.Where(), err)
		}
		return nil
	}
	if t.o.orderNo != "" && st.OrderNo != t.o.orderNo || t.o.requestID != "" && st.RequestID != t.o.requestID {
		return nil
	}
	t.printed++
	return write(t.w, rec, st, t.o.json)
}

func write(w io.Writer, rec topic.Record, st event.OrderStatus, asJSON bool) error {
	if asJSON {
		headers := map[string]string{}
		for _, h := range rec.Headers {
			headers[h.Key] = string(h.Value)
		}
		b, err := json.Marshal(struct {
			event.OrderStatus
			Partition int               `json:"partition"`
			Offset    int64             `json:"offset"`
			Headers   map[string]string `json:"headers"`
		}{st, rec.Partition, rec.Offset, headers})
		if err != nil {
			return fmt.Errorf("encoding event: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	reason := st.Reason
	if reason == "" {
		reason = "-"
	}
	_, err := fmt.Fprintf(w, "%-27s %-3d %-9s %-22s %-32s %-20s %-8d %-12s %-3d %s\n",
		st.At.UTC().Format(time.RFC3339Nano), st.Version, st.Status, reason, st.OrderNo, st.RequestID, st.UserID,
		fmt.Sprintf("%d:%d", st.ActivityID, st.ItemID), st.Quantity, rec.Where())
	return err
}
