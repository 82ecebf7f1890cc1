package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/database"
	"orderpipe/pkg/locate"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

const locateUsage = `usage: orderpipe locate <requestId> [--json] [--activity A --item I]

Shows everything known about one order request: the gateway's dedup record
and journal entry in Redis, the worker's decision (processed_requests), the
order and its status times, compensations, and the trace id (open it in the
trace UI, e.g. Jaeger at :16686). Postgres names the item when the request got
there; otherwise the items of activities whose sale ended less than a day ago
are searched (--activity/--item narrow that).

  --json       one JSON object instead of the text block
  --activity   activity id to search
  --item       item id to search (with --activity)

Exit status: 0 found, 1 unknown requestId, 2 could not run.
`

// runLocate is `orderpipe locate`.
func runLocate(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("locate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "JSON output")
	activity := fs.Int64("activity", 0, "activity id")
	item := fs.Int64("item", 0, "item id")
	// The requestId may come before, between or after the flags.
	var pos []string
	var err error
	for {
		if err = fs.Parse(args); err != nil || fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if err != nil || len(pos) != 1 || (*item > 0 && *activity == 0) {
		fmt.Fprint(stdout, locateUsage)
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return exitCode(2)
	}
	rid := pos[0]

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := database.Open(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: redisAddrs(cfg.RedisAddr), PoolSize: 2,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	defer rdb.Close()
	f := locate.Finder{Orders: order.NewStore(pool), Stock: stock.New(rdb, cfg.RedisPrefix)}
	rep, err := f.Find(ctx, locate.Query{RequestID: rid, ActivityID: *activity, ItemID: *item})
	if err != nil {
		return fmt.Errorf("locating %s: %w", rid, err)
	}
	if *asJSON {
		err = writeJSONLine(stdout, rep)
	} else {
		_, err = io.WriteString(stdout, rep.Text())
	}
	if err != nil {
		return err
	}
	if rep.Status == locate.StatusUnknown {
		return exitCode(1)
	}
	return nil
}

func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
