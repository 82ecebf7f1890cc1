package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/stock"
)

// keyLease bounds how long a pay or cancel request holds its
// Idempotency-Key: longer than the request itself (its Postgres and Redis
// calls are bounded by pgTimeout and ReserveTimeout), so a running request
// is never run twice; a gateway that dies holding a key leaves its retries
// 409 for at most this long, then they run afresh.
const keyLease = 10 * time.Second

// withKey runs serve, the pay or cancel request r whose payload is
// fingerprint, under its Idempotency-Key if it has one (pkg/stock keeps the
// keys in Redis, each for a lease while its request runs and for
// stock.IdemKeyLifetime with its answer): the same key with another payload
// is 422 IDEMPOTENCY_KEY_REUSED, a key whose request is still running 409
// IDEMPOTENCY_KEY_IN_PROGRESS with Retry-After, and a key already answered
// gets that answer again (Idempotent-Replayed: true). Answers that ask for
// a retry (503, 409 ORDER_PENDING) are not kept: the key is freed. Redis
// unreachable ⇒ 503 and nothing done (fail closed: without the key's record
// a reuse could not be told).
func (s *Server) withKey(w http.ResponseWriter, r *http.Request, fingerprint string, serve func(http.ResponseWriter)) {
	key, apiErr := idempotencyKey(r.Header)
	if apiErr != nil {
		writeError(w, apiErr.Status, apiErr.Code, apiErr.Message)
		return
	}
	if key == "" {
		serve(w)
		return
	}
	var kr stock.KeyResult
	err := s.inRedis(r.Context(), func(ctx context.Context) error {
		var err error
		kr, err = s.deps.Stock.BeginKey(ctx, key, fingerprint, keyLease)
		return err
	})
	if err != nil {
		s.deps.Log.ErrorContext(r.Context(), "taking an idempotency key", "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "idempotency key store unavailable, nothing was done; retry with the same key")
		return
	}
	switch kr.State {
	case stock.KeyReused:
		writeError(w, http.StatusUnprocessableEntity, "IDEMPOTENCY_KEY_REUSED", "Idempotency-Key was already used with a different request")
		return
	case stock.KeyInProgress:
		// Pay and cancel take milliseconds: a second is plenty, unless a
		// holder died (then the lease, kr.LeaseLeft, frees the key).
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusConflict, "IDEMPOTENCY_KEY_IN_PROGRESS",
			"the first request with this Idempotency-Key is still in progress; retry with the same key after Retry-After")
		return
	case stock.KeyDone:
		w.Header().Set("Idempotent-Replayed", "true")
		writeKept(w, kr.Status, kr.Body)
		return
	}
	buf := &answerBuffer{header: http.Header{}}
	serve(buf)
	// Kept before it is sent: a retry that follows the answer finds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.ReserveTimeout)
	defer cancel()
	if keepable(buf.status, buf.code) {
		if kept, err := s.deps.Stock.FinishKey(ctx, kr.Hold, buf.status, buf.body.Bytes()); err != nil || !kept {
			// Not kept: a retry runs the request again, which pay and
			// cancel, idempotent themselves, answer alike.
			s.deps.Log.WarnContext(ctx, "keeping an idempotency key's answer failed", "kept", kept, "err", err)
		}
	} else if err := s.deps.Stock.AbandonKey(ctx, kr.Hold); err != nil {
		// The lease frees it.
		s.deps.Log.WarnContext(ctx, "freeing an idempotency key failed", "err", err)
	}
	buf.sendTo(w)
}

// settleProduced marks a produced reservation published, so that a retry
// may be shown its orderNo, and wakes a retry waiting here. Without an
// Idempotency-Key not on the 202's path: a mark that is lost only makes
// retries wait (or answer 503) until the worker has claimed the event. With
// one, before the 202: the mark is where the request stops being "in
// progress" (409) for its retries, so a retry sent after the 202 replays.
func (s *Server) settleProduced(ctx context.Context, item stock.Item, req orderRequest, orderNo, fingerprint string) {
	mark := func() {
		s.markPublished(context.WithoutCancel(ctx), item, stock.Ref{RequestID: req.RequestID, OrderNo: orderNo})
		s.replays.settled(req.RequestID, fingerprint)
	}
	if req.keyed {
		mark()
		return
	}
	go mark()
}

// keepable says whether an answer is kept under its key: a decision (200,
// 404, a 409 that states the order's fate), not a request to retry.
func keepable(status int, code string) bool {
	switch {
	case status == http.StatusOK, status == http.StatusNotFound:
		return true
	case status == http.StatusConflict:
		return code != "ORDER_PENDING"
	}
	return false
}

// writeKept sends a kept answer again.
func writeKept(w http.ResponseWriter, status int, body []byte) {
	if rec, ok := w.(*recorder); ok && status >= 400 {
		var e client.ErrorBody
		if json.Unmarshal(body, &e) == nil {
			rec.code = string(e.Error.Code)
		}
	}
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// answerBuffer holds a keyed request's answer until its key has it.
type answerBuffer struct {
	header http.Header
	status int
	code   string // writeError's code
	body   bytes.Buffer
}

func (b *answerBuffer) Header() http.Header { return b.header }

func (b *answerBuffer) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *answerBuffer) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// sendTo sends the held answer on w.
func (b *answerBuffer) sendTo(w http.ResponseWriter) {
	if rec, ok := w.(*recorder); ok {
		rec.code = b.code
	}
	for k, v := range b.header {
		w.Header()[k] = v
	}
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body.Bytes())
}

// payFingerprint and cancelFingerprint identify the payload of a pay and a
// cancel request: a key reused for another order, another user or the
// other operation is told from a retry.
func payFingerprint(orderNo string) string { return "pay\x00" + orderNo }

func cancelFingerprint(orderNo string, userID int64) string {
	return "cancel\x00" + orderNo + "\x00" + strconv.FormatInt(userID, 10)
}
