package stock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/stock/internal/layout"
)

var (
	//go:embed idemkey.lua
	idemKeyLua    string
	idemKeyScript = redis.NewScript(idemKeyLua)
)

// IdemKeyLifetime is how long the first answer to a pay or cancel request
// is kept under its Idempotency-Key (the draft's and Stripe's: 24 h).
const IdemKeyLifetime = DedupLifetime

// KeyState is what Begin found under an Idempotency-Key.
type KeyState string

const (
	// KeyBegun: the key was free; the caller holds it (KeyHold) for its lease.
	KeyBegun KeyState = "BEGUN"
	// KeyReused: the key was used with another payload.
	KeyReused KeyState = "REUSED"
	// KeyInProgress: another request with the key is still running.
	KeyInProgress KeyState = "IN_PROGRESS"
	// KeyDone: the key's first answer is kept (KeyResult.Status, Body).
	KeyDone KeyState = "DONE"
)

// KeyResult is Begin's answer.
type KeyResult struct {
	State KeyState
	// Status and Body are the kept answer (KeyDone).
	Status int
	Body   []byte
	// LeaseLeft is how long the running request still holds the key
	// (KeyInProgress).
	LeaseLeft time.Duration
	// Hold, with KeyBegun, is the caller's hold on the key, to Finish or
	// Abandon.
	Hold KeyHold
}

// KeyHold is one request's hold on an Idempotency-Key.
type KeyHold struct {
	key, token string
}

// BeginKey takes the Idempotency-Key key for a request whose payload is
// fingerprint, for lease; or tells why not (another payload, a request
// still holding it, a first answer kept). A holder that dies lets the lease
// run out, and a later request with the key runs afresh.
func (s *Store) BeginKey(ctx context.Context, key, fingerprint string, lease time.Duration) (KeyResult, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return KeyResult{}, fmt.Errorf("making a key token: %w", err)
	}
	hold := KeyHold{key: layout.IdemKey(s.prefix, key), token: hex.EncodeToString(b[:])}
	res, err := idemKeyScript.Run(ctx, s.rdb, []string{hold.key}, "begin", hold.token, fingerprint, lease.Milliseconds()).StringSlice()
	if err != nil {
		return KeyResult{}, fmt.Errorf("taking idempotency key: %w", err)
	}
	out := KeyResult{State: KeyState(res[0])}
	switch {
	case out.State == KeyBegun:
		out.Hold = hold
	case out.State == KeyInProgress && len(res) == 2:
		ms, _ := strconv.ParseInt(res[1], 10, 64)
		out.LeaseLeft = time.Duration(max(ms, 0)) * time.Millisecond
	case out.State == KeyDone && len(res) == 3:
		out.Status, err = strconv.Atoi(res[1])
		if err != nil {
			return KeyResult{}, fmt.Errorf("idempotency key record holds status %q", res[1])
		}
		out.Body = []byte(res[2])
	case out.State == KeyReused:
	default:
		return KeyResult{}, fmt.Errorf("idempotency key script answered %q", res)
	}
	return out, nil
}

// FinishKey keeps the answer of the request holding h for IdemKeyLifetime.
// It reports false if the hold was lost (its lease ran out): the answer is
// then not kept, and a retry runs the request again.
func (s *Store) FinishKey(ctx context.Context, h KeyHold, status int, body []byte) (bool, error) {
	res, err := idemKeyScript.Run(ctx, s.rdb, []string{h.key}, "finish", h.token, status, body,
		int64(IdemKeyLifetime/time.Second)).StringSlice()
	if err != nil {
		return false, fmt.Errorf("keeping an idempotency key's answer: %w", err)
	}
	return res[0] == "KEPT", nil
}

// AbandonKey frees the key h holds, its request having answered nothing
// worth keeping (a retry is asked for): the next request with the key runs
// afresh at once.
func (s *Store) AbandonKey(ctx context.Context, h KeyHold) error {
	if err := idemKeyScript.Run(ctx, s.rdb, []string{h.key}, "abandon", h.token).Err(); err != nil {
		return fmt.Errorf("freeing an idempotency key: %w", err)
	}
	return nil
}
