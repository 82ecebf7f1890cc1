package chaos

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/stock"
)

// copyMutations turn an event the gateway really wrote into what a
// misbehaving producer, a newer gateway or a broken disk might put beside
// it: a field added, a value of the wrong type, the value cut short, another
// user and quantity, the same reservation under another requestId or
// another orderNo (all unsigned: produced raw). A message is only a pointer:
// none of them may create, release or alter an order (the history checker
// and the audit judge it).
var copyMutations = []struct {
	name string
	fn   func(v []byte) []byte
}{
	{"field-added", func(v []byte) []byte { return append(bytes.TrimSuffix(v, []byte("}")), []byte(`,"giftWrap":true}`)...) }},
	{"corrupt", func(v []byte) []byte { return bytes.Replace(v, []byte(`"quantity":`), []byte(`"quantity":"x`), 1) }},
	{"truncated", func(v []byte) []byte { return v[:len(v)*2/3] }},
	{"altered", func(v []byte) []byte {
		return bytes.Replace(bytes.Replace(v, []byte(`"userId":`), []byte(`"userId":9`), 1), []byte(`"quantity":`), []byte(`"quantity":2`), 1)
	}},
	{"requestId-changed", func(v []byte) []byte { return bytes.Replace(v, []byte(`"requestId":"`), []byte(`"requestId":"x`), 1) }},
	// orderNo comes just before userId in the gateway's encoding.
	{"orderNo-changed", func(v []byte) []byte { return bytes.Replace(v, []byte(`","userId":`), []byte(`x","userId":`), 1) }},
}

// poisonCopies produces mutated copies of up to four reservations still in
// the sale's journals — events the gateway wrote whose originals may not be
// decided yet, so a copy can land before, beside or after its original —
// each mutated one way chosen by rng, keyed like the original.
func poisonCopies(ctx context.Context, s *Suite, act int64, rng *rand.Rand) (string, error) {
	buckets := max(s.cfg.Buckets, 1)
	var msgs []kafka.Message
	var kinds []string
	for _, it := range []int64{1, 2} {
		for b := range buckets {
			journal, err := s.stock.Journal(ctx, stock.Item{ActivityID: act, ItemID: it, Bucket: b})
			if err != nil {
				return "", fmt.Errorf("reading the journal of %d:%d: %w", act, it, err)
			}
			// In requestId order, not a map's, which differs from run to run.
			for _, rid := range slices.Sorted(maps.Keys(journal)) {
				e := journal[rid]
				if len(msgs) == 4 {
					break
				}
				m := copyMutations[rng.IntN(len(copyMutations))]
				msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d:%d", act, it), Value: m.fn([]byte(e))})
				kinds = append(kinds, m.name)
			}
		}
	}
	if len(msgs) == 0 {
		return "no reservation in flight to copy", nil
	}
	if err := produceRaw(ctx, s.brokers, kafkaTopic, msgs...); err != nil {
		return "", fmt.Errorf("producing copies: %w", err)
	}
	return fmt.Sprintf("%d copies of journaled events (%v)", len(msgs), kinds), nil
}
