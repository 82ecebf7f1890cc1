// Command floorpipe is the floor of an accepted order: the contract's
// exchanges for one, written with the libraries orderpipe uses and nothing
// else — no tracing, metrics, breakers, replay machinery or bucket routing.
// Whatever latency and CPU it shows at a rate is what any design of the
// contract costs on this machine, so `make run` is measured against it
// (bench/latency.sh runs both in one run, alternating).
//
// Per POST /v1/orders: decode the JSON body; one EVALSHA that dedups and
// writes what reserve.lua writes on the accepted path (stock decrement,
// limit marker, marker index, dedup record, journal entry); one produce to
// orders.requested, acknowledged (acks=all) by an in-process kfake broker
// reached through memory, as `make run`'s embedded broker is; then the 202.
// Behind it a consumer-group reader inserts each fetched batch into
// Postgres in one transaction, commits its offsets, and acks the journal
// entries (one HDEL per batch), as the worker must for I5.
//
//	go run ./bench/floorpipe -addr 127.0.0.1:8099 -db postgres://postgres@127.0.0.1:5432/bench
//
// An item's stock key is created on its first order (-stock units), so any
// activity and item the load tool sends is on sale. Its tables are its own
// (floor_orders); it shares no key or table with orderpipe.
//
// With -refuse it is instead the floor of a sold-out flood's refusal
// (refuse.go, bench/flood.sh): the one Redis check the contract asks of a
// refusal, and nothing else.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/standin"
	"orderpipe/pkg/telemetry"
)

const topic = "floor.orders.requested"

// reserve is reserve.lua's accepted path and its dedup, nothing more.
// KEYS: 1 stock, 2 limit marker, 3 dedup record, 4 journal, 5 marker index
// ARGV: 1 requestId, 2 fingerprint, 3 orderNo, 4 quantity, 5 event, 6 user, 7 initial stock
var reserve = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[3], 'fp', 'orderNo', 'remaining')
if rec[1] then
  if rec[1] ~= ARGV[2] then return {'IDEMPOTENCY_KEY_REUSED', '', 0} end
  return {'REPLAYED', rec[2], tonumber(rec[3])}
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  redis.call('SET', KEYS[1], ARGV[7])
  stock = ARGV[7]
end
local q = tonumber(ARGV[4])
if tonumber(stock) < q then return {'SOLD_OUT', '', 0} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'ALREADY_PURCHASED', '', 0} end
local remaining = redis.call('DECRBY', KEYS[1], q)
redis.call('SET', KEYS[2], ARGV[1], 'EX', 86400)
redis.call('SADD', KEYS[5], ARGV[6])
redis.call('HSET', KEYS[3], 'fp', ARGV[2], 'orderNo', ARGV[3], 'remaining', remaining, 'event', ARGV[5])
redis.call('EXPIRE', KEYS[3], 86400)
redis.call('HSET', KEYS[4], ARGV[1], ARGV[5])
return {'RESERVED', ARGV[3], remaining}
`)

type orderRequest struct {
	RequestID  string `json:"requestId"`
	UserID     int64  `json:"userId"`
	ActivityID int64  `json:"activityId"`
	ItemID     int64  `json:"itemId"`
	Quantity   int64  `json:"quantity"`
}

type event struct {
	orderRequest
	OrderNo    string    `json:"orderNo"`
	ReservedAt time.Time `json:"reservedAt"`
}

type server struct {
	rdb    *redis.Client
	kafka  *kafka.Client
	stock  string
	prefix string
}

func (s *server) order(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4096))
	var req orderRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.RequestID == "" || req.Quantity < 1 {
		http.Error(w, `{"error":{"code":"INVALID_REQUEST"}}`, http.StatusBadRequest)
		return
	}
	// The prefix leads every key, as in the pipeline's layout, so a run's
	// purge (REDIS_KEY_PREFIX*) takes them too.
	tag := fmt.Sprintf("{a%d:i%d}", req.ActivityID, req.ItemID)
	orderNo := fmt.Sprintf("%d-%d-%s", req.ActivityID, req.ItemID, req.RequestID)
	ev, _ := json.Marshal(event{orderRequest: req, OrderNo: orderNo, ReservedAt: time.Now().UTC()})
	user := strconv.FormatInt(req.UserID, 10)
	res, err := reserve.Run(r.Context(), s.rdb,
		[]string{s.prefix + "stock:" + tag, s.prefix + "limit:" + tag + ":" + user, s.prefix + "req:" + tag + ":" + req.RequestID,
			s.prefix + "resv:" + tag, s.prefix + "markers:" + tag},
		req.RequestID, string(body), orderNo, req.Quantity, ev, user, s.stock).Slice()
	if err != nil {
		http.Error(w, `{"error":{"code":"UNAVAILABLE"}}`, http.StatusServiceUnavailable)
		return
	}
	verdict, _ := res[0].(string)
	remaining, _ := res[2].(int64)
	status := http.StatusAccepted
	switch verdict {
	case "RESERVED":
		key := strconv.FormatInt(req.ActivityID, 10) + ":" + strconv.FormatInt(req.ItemID, 10)
		_, err := s.kafka.Produce(r.Context(), &kafka.ProduceRequest{Topic: topic, Partition: 0, RequiredAcks: kafka.RequireAll,
			Records: kafka.NewRecordReader(kafka.Record{Key: kafka.NewBytes([]byte(key)), Value: kafka.NewBytes(ev)})})
		if err != nil {
			http.Error(w, `{"error":{"code":"UNAVAILABLE"}}`, http.StatusServiceUnavailable)
			return
		}
	case "REPLAYED":
		status = http.StatusOK
	default:
		http.Error(w, `{"error":{"code":"`+verdict+`"}}`, http.StatusConflict)
		return
	}
	answer, _ := json.Marshal(map[string]any{"requestId": req.RequestID, "orderNo": orderNo, "status": "PENDING", "remaining": remaining})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(answer) //nolint:errcheck
}

// consume inserts each fetched batch into Postgres in one transaction,
// commits the batch's offsets, then acks its journal entries.
// With contract (-contract) the transaction is instead the worker's whole
// side of the contract (contract.go).
func consume(ctx context.Context, reader *kafka.Reader, pool *pgxpool.Pool, rdb *redis.Client, prefix string, contract bool, stock int64) error {
	for ctx.Err() == nil {
		msgs, err := fetchBatch(ctx, reader)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		acks := map[string][]string{}
		var evs []event
		for _, m := range msgs {
			var e event
			if json.Unmarshal(m.Value, &e) != nil {
				continue
			}
			if contract {
				evs = append(evs, e)
			} else {
				b.Queue(`INSERT INTO floor_orders (order_no, request_id, user_id, activity_id, item_id, quantity, created_at)
					VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
					e.OrderNo, e.RequestID, e.UserID, e.ActivityID, e.ItemID, e.Quantity, e.ReservedAt)
			}
			journal := fmt.Sprintf("%sresv:{a%d:i%d}", prefix, e.ActivityID, e.ItemID)
			acks[journal] = append(acks[journal], e.RequestID)
		}
		decide := func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }
		if contract {
			decide = func(tx pgx.Tx) error { return decideContract(ctx, tx, evs, stock) }
		}
		if err := pgx.BeginFunc(ctx, pool, decide); err != nil {
			return fmt.Errorf("inserting a batch: %w", err)
		}
		if err := reader.CommitMessages(ctx, msgs...); err != nil {
			return fmt.Errorf("committing offsets: %w", err)
		}
		for journal, rids := range acks {
			if err := rdb.HDel(ctx, journal, rids...).Err(); err != nil {
				return fmt.Errorf("acking the journal: %w", err)
			}
		}
	}
	return ctx.Err()
}

// fetchBatch is the messages the reader has now: the first waits, the rest
// are taken while they come at once.
func fetchBatch(ctx context.Context, reader *kafka.Reader) ([]kafka.Message, error) {
	m, err := reader.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	msgs := []kafka.Message{m}
	for len(msgs) < 500 {
		mctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		m, err := reader.FetchMessage(mctx)
		cancel()
		if err != nil {
			break
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8099", "HTTP listen address")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis host:port")
	dbURL := flag.String("db", "postgres://postgres@127.0.0.1:5432/orderpipe?sslmode=disable", "Postgres URL (its floor_orders table is created if missing)")
	prefix := flag.String("prefix", "floor:", "Redis key prefix")
	stock := flag.Int64("stock", 1_000_000_000, "an item's stock at its first order")
	contract := flag.Bool("contract", false, "the worker does the contract's whole side of an accepted order (contract.go): the idempotency table, a conditional stock update and the UNPAID status event in an outbox, published to Kafka by a relay")
	refuse := flag.Bool("refuse", false, "serve the floor of a sold-out flood's refusal instead (refuse.go): one coalesced check of the requestId and the sale's end in Redis, then 409 SOLD_OUT; no Kafka or Postgres")
	alone := flag.Bool("refuse-alone", false, "with -refuse: each request sends its own check, none coalesced")
	pprofAddr := flag.String("pprof", "", "serve Go's profiles (CPU, trace, block, mutex) on this address, as PPROF_ADDR does for orderpipe; empty: off")
	flag.Parse()
	if *pprofAddr != "" {
		go func() {
			if err := telemetry.ServePprof(context.Background(), *pprofAddr); err != nil {
				log.Printf("floorpipe: %v", err)
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if *refuse {
		err = runRefuse(ctx, *addr, *redisAddr, *prefix, *alone)
	} else {
		err = run(ctx, *addr, *redisAddr, *dbURL, *prefix, *stock, *contract)
	}
	stop()
	if err != nil {
		log.Printf("floorpipe: %v", err)
		os.Exit(1)
	}
}

// run serves the floor on addr until ctx ends.
func run(ctx context.Context, addr, redisAddr, dbURL, prefix string, stock int64, contract bool) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	k, err := standin.StartKafka(standin.KafkaOptions{Partitions: 1, Topics: []string{topic, statusTopic}})
	if err != nil {
		return err
	}
	defer k.Close()
	transport := &kafka.Transport{Dial: k.Dial}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS floor_orders (order_no text PRIMARY KEY, request_id text UNIQUE,
		user_id bigint, activity_id bigint, item_id bigint, quantity int, created_at timestamptz)`); err != nil {
		return fmt.Errorf("creating floor_orders: %w", err)
	}
	if contract {
		if _, err := pool.Exec(ctx, contractSchema); err != nil {
			return fmt.Errorf("creating the contract tables: %w", err)
		}
	}
	reader := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Brokers, Topic: topic, GroupID: "floorpipe",
		Dialer: &kafka.Dialer{DialFunc: k.Dial}, MaxWait: 100 * time.Millisecond})
	defer reader.Close()
	errc := make(chan error, 3)
	go func() { errc <- consume(ctx, reader, pool, rdb, prefix, contract, stock) }()
	if contract {
		w := &kafka.Writer{Addr: kafka.TCP(k.Brokers...), Topic: statusTopic, Transport: transport, Balancer: &kafka.Hash{},
			RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond, BatchSize: 500}
		defer w.Close()
		go func() { errc <- relayStatus(ctx, pool, w, 200*time.Millisecond) }()
	}

	s := &server{rdb: rdb, kafka: &kafka.Client{Addr: kafka.TCP(k.Brokers...), Transport: transport},
		stock: strconv.FormatInt(stock, 10), prefix: prefix}
	go func() { errc <- serveOrders(ctx, addr, s.order, &http.Server{ReadHeaderTimeout: 5 * time.Second}) }()
	err = <-errc
	stop() // a failed consumer stops the server too
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// serveOrders serves order as POST /v1/orders (and a GET /readyz that
// answers 200) with srv on addr, until ctx ends or serving fails.
func serveOrders(ctx context.Context, addr string, order http.HandlerFunc, srv *http.Server) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", order)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	srv.Handler = mux
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Printf("floorpipe: listening on %s", ln.Addr())
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx) //nolint:errcheck
	return err
}
