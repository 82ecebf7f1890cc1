package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"orderpipe/pkg/database"
	"orderpipe/pkg/order"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/webhook"
)

// CommandUsage is `orderpipe webhooks --help`.
const CommandUsage = `usage: orderpipe webhooks list [--json] [--limit N]
       orderpipe webhooks replay (<webhook-id>... | --all) [--endpoint E] [--json]

Webhooks that gave up: deliveries of an orders.status event to an endpoint
that no attempt within WEBHOOK_RETRY_FOR answered with a 2xx (kept in
Postgres, webhook_deliveries, until replayed and delivered).

  list     the failed deliveries, oldest first: webhook id (<orderNo>.<version>,
           the webhook-id header), endpoint, type, attempts, the last answer
           --limit N   only the newest N (default 100; 0: all)
  replay   send them again: each becomes pending, due now, with a fresh
           WEBHOOK_RETRY_FOR; a running deliverer (orderpipe webhook) sends it
           with the same webhook-id and body, a new timestamp and signature.
           Later versions of its order still pending wait for it; one already
           delivered went out before it (receivers keep the highest version).
           --all          every failed delivery
           --endpoint E   only deliveries to E (scheme://host/path, as listed)
  --json   one JSON object instead of the table

Needs DATABASE_URL.

Exit status: 0 done; 1 something refused (an id with no failed delivery);
2 could not run.
`

type mainArgs struct {
	sub       string
	ids       []string
	all, json bool
	limit     int
	endpoint  string
}

// CheckArgs reads and checks the arguments, touching nothing (flag.ErrHelp
// for -h/--help).
func CheckArgs(args []string) error { _, err := parseArgs(args); return err }

func parseArgs(args []string) (mainArgs, error) {
	a := mainArgs{limit: 100}
	sub, fs, err := setting.Subcommand("webhooks", args, &a.json, "list", "replay")
	if err != nil {
		return a, err
	}
	a.sub = sub
	if a.sub == "list" {
		fs.IntVar(&a.limit, "limit", 100, "newest N only (0: all)")
	} else {
		fs.BoolVar(&a.all, "all", false, "every failed delivery")
		fs.StringVar(&a.endpoint, "endpoint", "", "only deliveries to this endpoint")
	}
	if a.ids, err = setting.ParseInterleaved(fs, args[1:]); err != nil {
		return a, err
	}
	for _, id := range a.ids {
		if _, _, err := webhook.ParseMessageID(id); err != nil {
			return a, err
		}
	}
	switch {
	case a.sub == "list" && len(a.ids) > 0:
		return a, fmt.Errorf("unexpected argument %q", a.ids[0])
	case a.sub == "list" && a.limit < 0:
		return a, errors.New("--limit must be 0 or more")
	case a.sub == "replay" && a.all == (len(a.ids) > 0):
		return a, errors.New("want <webhook-id>... or --all")
	}
	return a, nil
}

// Main is `orderpipe webhooks`. Exit codes: 0 done, 1 refused, 2 could not
// run.
func Main(ctx context.Context, args []string, env setting.Env, stdout, stderr io.Writer) int {
	return setting.MainArgs("orderpipe webhooks", CommandUsage, args, parseArgs, stdout, stderr, func(a mainArgs) error {
		return run(ctx, env, a, stdout, stderr)
	})
}

func run(ctx context.Context, env setting.Env, a mainArgs, stdout, stderr io.Writer) error {
	cannot := func(err error) error { return setting.CouldNotRun(stderr, "orderpipe webhooks "+a.sub, err) }
	r := &setting.Reader{Env: env}
	dbURL, retryFor := r.String("DATABASE_URL"), readRetryFor(r)
	if err := r.Err(); err != nil {
		return cannot(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pool, err := database.Open(ctx, dbURL, 2)
	if err != nil {
		return cannot(err)
	}
	defer pool.Close()
	orders := order.NewStore(pool)
	if a.sub == "list" {
		fs, err := orders.FailedWebhooks(ctx, a.limit)
		if err != nil {
			return cannot(err)
		}
		return writeList(stdout, fs, a.json)
	}
	var evs []order.WebhookEvent
	if !a.all {
		evs = []order.WebhookEvent{}
		for _, id := range a.ids {
			no, v, _ := webhook.ParseMessageID(id)
			evs = append(evs, order.WebhookEvent{OrderNo: no, Version: v})
		}
	}
	done, err := orders.ReplayWebhooks(ctx, evs, a.endpoint, retryFor)
	if err != nil {
		return cannot(err)
	}
	return writeReplayed(stdout, done, a.ids, a.json)
}

// writeList writes `webhooks list`'s answer: the failed deliveries.
func writeList(stdout io.Writer, fs []order.WebhookFailure, asJSON bool) error {
	if asJSON {
		return writeJSON(stdout, struct {
			Failed []failure `json:"failed"`
		}{failures(fs)})
	}
	fmt.Fprintf(stdout, "%d failed webhook deliver%s\n", len(fs), plural(len(fs), "y", "ies"))
	writeTable(stdout, fs)
	return nil
}

// writeReplayed writes `webhooks replay`'s answer: what was replayed, and
// each id asked for that had no failed delivery (then exit 1).
func writeReplayed(stdout io.Writer, done []order.WebhookFailure, ids []string, asJSON bool) error {
	found := map[string]bool{}
	for _, f := range done {
		found[webhook.MessageID(f.OrderNo, f.Version)] = true
	}
	var missing []string
	for _, id := range ids {
		if !found[id] {
			missing = append(missing, id)
		}
	}
	if asJSON {
		if err := writeJSON(stdout, struct {
			Replayed []failure `json:"replayed"`
			NotFound []string  `json:"notFound"`
		}{failures(done), append([]string{}, missing...)}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "%d failed webhook deliver%s replayed (pending again, due now)\n", len(done), plural(len(done), "y", "ies"))
		writeTable(stdout, done)
		for _, id := range missing {
			fmt.Fprintf(stdout, "%s: no failed delivery with this id\n", id)
		}
	}
	if len(missing) > 0 {
		return setting.ExitCode(1)
	}
	return nil
}

// failure is a failed delivery as --json shows it.
type failure struct {
	ID         string    `json:"id"`
	Endpoint   string    `json:"endpoint"`
	OrderNo    string    `json:"orderNo"`
	Version    int       `json:"version"`
	Type       string    `json:"type"`
	Attempts   int       `json:"attempts"`
	LastStatus int       `json:"lastStatus,omitempty"`
	LastError  string    `json:"lastError,omitempty"`
	EventAt    time.Time `json:"eventAt"`
	FailedAt   time.Time `json:"failedAt"`
	Replays    int       `json:"replays"`
}

func failures(fs []order.WebhookFailure) []failure {
	out := make([]failure, 0, len(fs))
	for _, f := range fs {
		out = append(out, failure{ID: webhook.MessageID(f.OrderNo, f.Version), Endpoint: f.Endpoint, OrderNo: f.OrderNo, Version: f.Version,
			Type: "order." + strings.ToLower(f.Status), Attempts: f.Attempts, LastStatus: f.LastStatus, LastError: f.LastError,
			EventAt: f.EventCreatedAt.UTC(), FailedAt: f.FailedAt.UTC(), Replays: f.Replays})
	}
	return out
}

func writeTable(w io.Writer, fs []order.WebhookFailure) {
	if len(fs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tENDPOINT\tTYPE\tATTEMPTS\tFAILED AT\tLAST ANSWER")
	for _, f := range failures(fs) {
		last := f.LastError
		if len(last) > 100 {
			last = last[:100] + "…"
		}
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", f.ID, f.Endpoint, f.Type, f.Attempts, f.FailedAt.Format(time.RFC3339), last)
	}
	tw.Flush()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
