package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/gateway/client"
	"orderpipe/pkg/breaker"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// createOrder is POST /v1/orders: each step answers the client itself when
// the request goes no further.
func (s *Server) createOrder(w http.ResponseWriter, r *http.Request) {
	p, ok := s.decode(w, r)
	if !ok || !s.admit(w, p) {
		return
	}
	ctx, ok := s.reserve(r.Context(), w, p)
	if !ok || !s.answer(ctx, w, p) {
		return
	}
	s.produce(ctx, w, p)
}

// pending is one order request on its way through createOrder's steps.
type pending struct {
	req         orderRequest
	fingerprint string
	// at is the reservation time the request's event carries.
	at time.Time
	// queueDown: the order queue's breaker was open, so the script only
	// answered a retry from its record and reserved nothing.
	queueDown bool
	// recording: the request's span records (nothing is built for tracing
	// otherwise: the hot path).
	recording bool
	// The reserve script's last answer, with the bucket, orderNo and event
	// it was asked with.
	stock.Attempt
}

// event is the request's event as reserved in bucket it under orderNo.
func (p *pending) event(it stock.Item, orderNo string) event.OrderRequested {
	return event.OrderRequested{RequestID: p.req.RequestID, OrderNo: orderNo, UserID: p.req.UserID,
		ActivityID: p.req.ActivityID, ItemID: p.req.ItemID, Quantity: p.req.Quantity, ReservedAt: p.at.UTC().Truncate(time.Microsecond),
		Bucket: it.Bucket}
}

// decode reads and validates the body; a bad one is answered here.
func (s *Server) decode(w http.ResponseWriter, r *http.Request) (*pending, bool) {
	body, apiErr := limitedBody(w, r, MaxBodyBytes)
	if apiErr == nil {
		var req orderRequest
		if req, apiErr = decodeOrder(r, body); apiErr == nil {
			p := &pending{req: req, recording: trace.SpanFromContext(r.Context()).IsRecording()}
			if p.recording {
				trace.SpanFromContext(r.Context()).SetAttributes(telemetry.AttrRequestID.String(req.RequestID))
			}
			return p, true
		}
	}
	writeError(w, apiErr.Status, apiErr.Code, apiErr.Message)
	return nil, false
}

// admit applies the rate limits; a request over one is answered 429 here.
func (s *Server) admit(w http.ResponseWriter, p *pending) bool {
	scope, wait := s.limiter.allow(p.req.UserID, s.deps.TickFunc())
	if scope == "" {
		return true
	}
	s.deps.Metrics.RateLimited.WithLabelValues(scope).Inc()
	w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
	writeError(w, http.StatusTooManyRequests, "RATE_LIMITED", "too many requests ("+scope+" limit); retry later with the same requestId")
	return false
}

// reserve runs the reserve script in the store (which routes the request
// to its bucket), waits for a first attempt still in progress, and answers
// 503 when Redis or the order queue failed. The context it returns names
// the order for the later steps.
func (s *Server) reserve(ctx context.Context, w http.ResponseWriter, p *pending) (context.Context, bool) {
	start := time.Now()
	// With the queue known to be down, reserving would only be undone: the
	// script answers a retry from its record and reserves nothing else.
	p.queueDown = s.kafkaCB.Open()
	o := stock.Order{ActivityID: p.req.ActivityID, ItemID: p.req.ItemID, UserID: p.req.UserID, Quantity: p.req.Quantity,
		RequestID: p.req.RequestID, ReplayOnly: p.queueDown}
	// A flood's refusal, from the bucket's verdict: no script, nothing of
	// the order built. Its Redis check goes through the Redis breaker (an
	// open one refuses nothing: the script path answers 503); a check that
	// fails refuses nothing (the script then decides), and one bounded by
	// the Redis client's timeouts needs no context of its own.
	var refused bool
	if p.Attempt, refused, _ = s.reserver.Refuse(context.WithoutCancel(ctx), &o, s.redisCB.Do); refused {
		s.deps.Metrics.ReserveSeconds.Observe(time.Since(start).Seconds())
		return ctx, true
	}
	p.at = s.deps.NowFunc()
	p.fingerprint = p.req.fingerprint()
	o.Fingerprint, o.OrderNo = p.fingerprint, newOrderNo(p.req.ActivityID, p.req.ItemID, p.at)
	o.EventFunc = func(it stock.Item, orderNo string) []byte { return p.event(it, orderNo).Marshal() }
	// The trace is kept with the reservation (when sampled, i.e. exported)
	// so `orderpipe locate` and the release can find it from the requestId.
	if span := trace.SpanFromContext(ctx); p.recording && span.SpanContext().IsSampled() {
		o.TraceParent = telemetry.TraceParent(ctx)
	}
	// Not cancelled by a client hanging up: a reserve that ran must be known.
	run := func() (stock.ReserveResult, error) {
		err := s.inRedis(context.WithoutCancel(ctx), func(ctx context.Context) error {
			var err error
			p.Attempt, err = s.reserver.Reserve(ctx, o)
			return err
		})
		return p.ReserveResult, err
	}
	res, err := run()
	s.deps.Metrics.ReserveSeconds.Observe(time.Since(start).Seconds())
	if p.recording && p.NewOrderNo != "" {
		ctx = telemetry.WithOrder(ctx, p.req.RequestID, p.NewOrderNo)
	}
	if p.queueDown && (err != nil || res.Outcome != stock.Replayed && res.Outcome != stock.IdempotencyKeyReused) {
		s.queueDownAnswer(ctx, w, p, res, err)
		return ctx, false
	}
	if err == nil && res.Outcome == stock.InProgress && !p.req.keyed {
		// A retry while the first attempt's event is not yet durable: its
		// orderNo may be shown only once Kafka has it (I4), so wait a little
		// for the first attempt's produce to be acked, then give up; a
		// client that has gone stops the wait (and is answered 503). The
		// retries of one request share one wait (replay.go).
		res, err = s.awaitReplay(ctx, replayKey(p.req.RequestID, p.fingerprint), p.NewOrderNo, time.Now().Add(s.cfg.ReplayWait), run)
	}
	p.ReserveResult = res
	if err != nil {
		telemetry.RecordError(trace.SpanFromContext(ctx), err)
		s.deps.Log.ErrorContext(ctx, "reserve failed", "request_id", p.req.RequestID, "err", err)
		var opErr *net.OpError
		neverSent := errors.Is(err, breaker.ErrOpen) || errors.Is(err, stock.ErrNotSent) || errors.As(err, &opErr) && opErr.Op == "dial"
		if !neverSent {
			// The script may have run and only its reply been lost: undo it,
			// so "nothing was reserved" stays true.
			s.releaseUnproduced(ctx, p.event(p.Item, p.NewOrderNo), -1, err, w)
			return ctx, false
		}
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "stock service unavailable, nothing was reserved; retry with the same requestId")
		return ctx, false
	}
	return ctx, true
}

// queueDownAnswer is the 503 of a request that the replay-only script had
// no first answer for (a replay or a 422 is answered as any other): it
// reserved nothing.
func (s *Server) queueDownAnswer(ctx context.Context, w http.ResponseWriter, p *pending, res stock.ReserveResult, err error) {
	msg := "order queue unavailable, nothing was reserved; retry with the same requestId"
	if err != nil {
		s.deps.Log.ErrorContext(ctx, "replay lookup failed with the order queue down", "request_id", p.req.RequestID, "err", err)
	} else if res.Outcome == stock.InProgress {
		msg = "order queue unavailable and the first attempt of this requestId is still in progress; retry with the same requestId"
	}
	writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", msg)
}

// answer answers every outcome of the script but a reservation of this
// request's own, which it leaves to produce (true).
func (s *Server) answer(ctx context.Context, w http.ResponseWriter, p *pending) bool {
	if p.Outcome == stock.Replayed && p.ReserveResult.OrderNo == p.NewOrderNo {
		// Our own reservation, seen by a second run of the same call: it
		// still has to be produced.
		p.Outcome = stock.Reserved
	}
	if p.Unreplicated && (p.Outcome == stock.Reserved || p.Outcome == stock.Replayed) {
		// REDIS_WAIT_REPLICAS: the dedup record this answer would rest on is
		// on the primary alone. A failover now would lose it, and a retry of
		// a 202 would reserve again under a second orderNo; a replay's 200
		// would show an orderNo the new primary does not know. So neither is
		// answered: a reservation of ours is given back, a replay waits for
		// the client's retry (its "shown" mark stands; it only keeps the
		// first attempt from giving back what is already durable).
		s.deps.Metrics.ReserveUnreplicated.Inc()
		if p.Outcome == stock.Reserved {
			s.releaseUnproduced(ctx, p.event(p.Item, p.NewOrderNo), p.Remaining, errUnreplicated, w)
			s.replays.settled(p.req.RequestID, p.fingerprint) // given back: a retry waiting here asks again
			return false
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "stock service unavailable (no replica acknowledged); retry with the same requestId")
		return false
	}
	switch p.Outcome {
	case stock.Reserved, stock.SoldOut, stock.AlreadyPurchased:
		// The script reported the item's stock (after the reservation).
		s.seeStock(p.Item, p.Remaining)
	}
	if p.Outcome == stock.Reserved {
		return true
	}
	s.refuse(ctx, w, p)
	return false
}

// refuse answers an outcome that is not a reservation of this request's.
func (s *Server) refuse(ctx context.Context, w http.ResponseWriter, p *pending) {
	if p.FromVerdict {
		// No script ran: the item's verdict refused a new requestId.
		s.verdictRefusals[p.Outcome].Inc()
		if p.recording {
			trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrFromVerdict.Bool(true))
		}
	}
	switch res := p.ReserveResult; res.Outcome {
	case stock.ReleasedBefore, stock.WrongBuckets:
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "stock service unavailable, nothing was reserved; retry with the same requestId")
	case stock.InProgress:
		answerInProgress(w, p.req)
	case stock.Replayed:
		if p.recording {
			trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrOrderNo.String(res.OrderNo), telemetry.AttrOutcome.String(string(res.Outcome)))
		}
		writeJSON(w, http.StatusOK, client.Placed{RequestID: p.req.RequestID, OrderNo: res.OrderNo, Status: order.StatusPending,
			Remaining: res.Remaining, Replayed: true, PayBy: s.payBy(res.ReservedAt)})
	case stock.IdempotencyKeyReused:
		writeError(w, http.StatusUnprocessableEntity, "IDEMPOTENCY_KEY_REUSED", "requestId was already used with a different payload")
	case stock.NotOnSale:
		if lost, err := s.saleLost(ctx, p.Item, res.OutsideWindow); lost || err != nil {
			// Redis lost the sale, or Postgres cannot tell: fail closed.
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "stock service unavailable, nothing was reserved; retry with the same requestId")
			return
		}
		writeError(w, http.StatusNotFound, "NOT_ON_SALE", msgNotOnSale)
	case stock.OverCap:
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "quantity exceeds the activity's per-user limit of "+strconv.FormatInt(res.Remaining, 10))
	case stock.SoldOut:
		writeError(w, http.StatusConflict, "SOLD_OUT", msgSoldOut)
	case stock.AlreadyPurchased:
		writeError(w, http.StatusConflict, "ALREADY_PURCHASED", msgAlreadyPurchased)
	default:
		s.deps.Log.ErrorContext(ctx, "reserve script answered unknown outcome", "outcome", res.Outcome)
		writeError(w, http.StatusInternalServerError, "INTERNAL", "internal error")
	}
}

// produce sends the reservation's event and answers 202 once Kafka has
// it; a failed produce gives the reservation back (releaseUnproduced).
func (s *Server) produce(ctx context.Context, w http.ResponseWriter, p *pending) {
	ev := p.event(p.Item, p.NewOrderNo)
	msg := event.MessageOf(ev, p.Event)
	start := time.Now()
	// Not the request's context: a client hanging up must not turn a
	// produce in flight into a release. The send span's context is what the
	// message carries to the worker.
	sendCtx, sendSpan := event.StartSend(context.WithoutCancel(ctx), s.cfg.Topic, &msg)
	err := s.kafkaCB.Do(func() error {
		pctx, cancel := context.WithTimeout(sendCtx, s.cfg.ProduceTimeout)
		defer cancel()
		return s.deps.Producer.WriteMessages(pctx, msg)
	})
	event.EndSend(sendSpan, err)
	s.deps.Metrics.ProduceSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		telemetry.RecordError(trace.SpanFromContext(ctx), err)
		s.releaseUnproduced(ctx, ev, p.Remaining, err, w)
		// Given back (or its fate unknown): a retry waiting here asks again.
		s.replays.settled(p.req.RequestID, p.fingerprint)
		return
	}
	// Kafka has it: a retry may now be shown the orderNo (settleProduced).
	s.settleProduced(ctx, p.Item, p.req, ev.OrderNo, p.fingerprint)
	writeJSON(w, http.StatusAccepted, client.Placed{RequestID: p.req.RequestID, OrderNo: ev.OrderNo, Status: order.StatusPending, Remaining: p.Remaining,
		PayBy: s.payBy(ev.ReservedAt)})
}

// errUnreplicated is why a reservation is given back when no replica
// acknowledged it (REDIS_WAIT_REPLICAS).
var errUnreplicated = errors.New("reservation not acknowledged by enough Redis replicas")

// markPublished records that a reservation's event was acknowledged by Kafka.
func (s *Server) markPublished(ctx context.Context, it stock.Item, ref stock.Ref) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReserveTimeout)
	defer cancel()
	if _, err := s.deps.Stock.MarkPublished(ctx, it, []stock.Ref{ref}); err != nil {
		s.deps.Log.WarnContext(ctx, "marking a produced reservation published failed; its retries wait for the worker",
			"request_id", ref.RequestID, "order_no", ref.OrderNo, "err", err)
	}
}

// seeStock sets the item's orderpipe_stock_remaining, the stock a reserve
// script just reported; the gauge of each item is looked up once.
func (s *Server) seeStock(it stock.Item, n int64) {
	g, ok := s.stockGauges.Load(it)
	if !ok {
		g, _ = s.stockGauges.LoadOrStore(it, s.deps.Metrics.StockRemaining.WithLabelValues(
			strconv.FormatInt(it.ActivityID, 10), strconv.FormatInt(it.ItemID, 10)))
	}
	g.(prometheus.Gauge).Set(float64(n))
}

// releaseUnproduced releases a reservation after a failed produce (or a reserve whose
// reply was lost). If a worker has already claimed it (or Postgres decided
// it and it was given back since: a gateway that waited past the order's
// whole life), the event did arrive and the answer is 202 after all. If a retry of the request was answered
// 200 replayed with this orderNo meanwhile, it is not given back either (an
// orderNo seen in a 2xx must resolve): the journal entry stays, the redrive
// publishes it, and the answer is 202. If Redis cannot be reached, the outcome is
// unknown: the release is retried in the background until Redis answers
// (releaselater.go); if the process stops first, a journal entry is
// published later by the redrive, and the client's retry replays it.
//
// remaining is the stock the reserve script reported, -1 when its reply was
// lost; a 202 then says 0, as nothing better is known.
func (s *Server) releaseUnproduced(ctx context.Context, ev event.OrderRequested, remaining int64, produceErr error, w http.ResponseWriter) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ReserveTimeout)
	defer cancel()
	// Not through the Redis breaker: giving a reservation back is always worth a try.
	rel := stock.Release{
		Item: stock.Item{ActivityID: ev.ActivityID, ItemID: ev.ItemID, Bucket: ev.Bucket},
		Ref:  stock.Ref{RequestID: ev.RequestID, OrderNo: ev.OrderNo}, UserID: ev.UserID, Quantity: ev.Quantity,
	}
	out, err := s.deps.Stock.Release(actx, stock.Unproduced, rel)

	if err == nil && (out == stock.Claimed || out == stock.Shown) {
		if out == stock.Shown {
			// A retry was already told this orderNo: it is kept, and the
			// redrive publishes it once REDRIVE_AFTER has passed.
			s.deps.Log.WarnContext(ctx, "produce failed after a replay showed the orderNo; left to the redrive",
				"request_id", ev.RequestID, "order_no", ev.OrderNo, "err", produceErr)
		}
		writeJSON(w, http.StatusAccepted, client.Placed{RequestID: ev.RequestID, OrderNo: ev.OrderNo, Status: order.StatusPending,
			Remaining: max(remaining, 0), PayBy: s.payBy(ev.ReservedAt)})
		return
	}
	if err != nil {
		s.deps.Log.ErrorContext(ctx, "release after a failure failed: outcome unknown; retried in the background", "request_id", ev.RequestID,
			"order_no", ev.OrderNo, "err", produceErr, "release_err", err)
		s.releaseLater(rel)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "service unavailable; the outcome is unknown: retry with the same requestId")
		return
	}
	s.deps.Log.ErrorContext(ctx, "request failed, nothing stays reserved", "request_id", ev.RequestID, "order_no", ev.OrderNo,
		"err", produceErr, "release", out)
	writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "service unavailable, nothing was reserved; retry with the same requestId")
}

func (s *Server) getOrder(w http.ResponseWriter, r *http.Request) {
	orderNo, item, ok := orderFromPath(w, r)
	if !ok {
		return
	}
	o, err := s.lookupOrder(r.Context(), orderNo)
	if err == nil {
		writeJSON(w, http.StatusOK, s.orderView(o))
		return
	}
	if !errors.Is(err, order.ErrNotFound) {
		s.deps.Log.ErrorContext(r.Context(), "reading order", "order_no", orderNo, "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable")
		return
	}
	var raw []byte
	var found bool
	err = s.inRedis(r.Context(), func(ctx context.Context) error {
		var err error
		raw, found, err = s.deps.Stock.Pending(ctx, item, orderNo)
		return err
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "stock service unavailable")
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, "ORDER_NOT_FOUND", "no such order")
		return
	}
	// The worker may have committed between the two reads: Postgres wins.
	if o, err := s.lookupOrder(r.Context(), orderNo); err == nil {
		writeJSON(w, http.StatusOK, s.orderView(o))
		return
	}
	var ev event.OrderRequested
	if err := json.Unmarshal(raw, &ev); err != nil {
		s.deps.Log.ErrorContext(r.Context(), "undecodable dedup record", "order_no", orderNo, "err", err)
		writeError(w, http.StatusInternalServerError, "INTERNAL", "internal error")
		return
	}
	writeJSON(w, http.StatusOK, s.orderView(order.Order{OrderNo: orderNo, RequestID: ev.RequestID, UserID: ev.UserID, ActivityID: ev.ActivityID,
		ItemID: ev.ItemID, Quantity: ev.Quantity, Status: order.StatusPending, CreatedAt: ev.ReservedAt, ReservedAt: ev.ReservedAt}))
}

// lookupOrder reads an order from Postgres through the breaker, bounded in
// time. order.ErrNotFound is an answer, not a failure.
func (s *Server) lookupOrder(ctx context.Context, orderNo string) (order.Order, error) {
	var o order.Order
	err := s.inPostgres(ctx, func(ctx context.Context) error {
		var err error
		o, err = s.deps.Orders.GetOrder(ctx, orderNo)
		return err
	})
	return o, err
}

// orderFromPath reads {orderNo}, tags the request's span with it and finds
// the item it names; an unparsable number is answered 404 here.
func orderFromPath(w http.ResponseWriter, r *http.Request) (string, stock.Item, bool) {
	orderNo := r.PathValue("orderNo")
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		span.SetAttributes(telemetry.AttrOrderNo.String(orderNo))
	}
	item, ok := parseOrderNo(orderNo)
	if !ok {
		writeError(w, http.StatusNotFound, "ORDER_NOT_FOUND", "no such order")
	}
	return orderNo, item, ok
}
