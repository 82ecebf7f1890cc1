// Package dlq owns the dead-letter topic's tooling: reading dead letters
// (with the error, source partition and offset the worker wrote in their
// headers) and replaying them to the order topic once the reason they died is
// fixed. A replay re-validates the event with the event schema (event.Decode,
// what the worker runs) and is recorded in Postgres (order.Store.ClaimReplay:
// the record is held uncommitted while the event is published), so no dead
// letter is published twice. It never decides an order: the worker
// does, idempotently, as for any event.
package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/topic"
)

// HeaderReplayOf marks a replayed event: "<dlq topic>/<partition>/<offset>".
// The headers a dead letter carries are event.HeaderError and
// event.HeaderSource*, event.HeaderOriginalSize, event.HeaderTruncated, event.HeaderHeadersDropped.
const HeaderReplayOf = "dlq-replay-of"

// ErrNotFound: no dead letter at that position.
var ErrNotFound = errors.New("no dead letter at that position")

// Position is a dead letter's place in the dead-letter topic.
type Position struct {
	Partition int   `json:"partition"`
	Offset    int64 `json:"offset"`
}

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Partition, p.Offset) }

// ParsePosition reads "<partition>:<offset>".
func ParsePosition(s string) (Position, error) {
	ps, offs, ok := strings.Cut(s, ":")
	p, err1 := strconv.ParseInt(ps, 10, 32) // Kafka's partitions are int32
	o, err2 := strconv.ParseInt(offs, 10, 64)
	if !ok || err1 != nil || err2 != nil || p < 0 || o < 0 {
		return Position{}, fmt.Errorf("position %q: want <partition>:<offset>, e.g. 0:42", s)
	}
	return Position{Partition: int(p), Offset: o}, nil
}

// Header is one Kafka header, as text.
type Header struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Letter is one dead letter.
type Letter struct {
	Position
	Time time.Time `json:"time"`
	// Error is why the worker refused it (its `error` header).
	Error string `json:"error"`
	// Where it was in the order topic; -1 when the header is missing.
	SourcePartition int   `json:"sourcePartition"`
	SourceOffset    int64 `json:"sourceOffset"`
	// OriginalSize is the value's size before the worker cut it (-1 unknown).
	OriginalSize   int  `json:"originalSize"`
	Truncated      bool `json:"truncated"`
	HeadersDropped int  `json:"headersDropped,omitempty"`
	// RequestID and OrderNo as far as the value names them (even when invalid).
	RequestID string `json:"requestId,omitempty"`
	OrderNo   string `json:"orderNo,omitempty"`
	// Invalid is why the event schema refuses the value today, with this
	// binary; "" means a replay would publish it.
	Invalid string   `json:"invalid,omitempty"`
	Key     []byte   `json:"-"`
	Value   []byte   `json:"-"`
	Headers []Header `json:"-"`
	// Replay is set when the dead letter was replayed already.
	Replay *Replay `json:"replay,omitempty"`
}

// Replay records one replayed dead letter.
type Replay struct {
	RequestID  string    `json:"requestId"`
	OrderNo    string    `json:"orderNo"`
	Topic      string    `json:"topic"`
	ReplayedAt time.Time `json:"replayedAt"`
}

// header returns a header's value and whether it was there.
func (l Letter) header(key string) (string, bool) {
	for _, h := range l.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return "", false
}

// letterOf reads what a dead letter says about itself.
func letterOf(pos Position, t time.Time, key, value []byte, headers []kafka.Header) Letter {
	l := Letter{Position: pos, Time: t.UTC(), Key: key, Value: value, SourcePartition: -1, SourceOffset: -1, OriginalSize: -1}
	for _, h := range headers {
		l.Headers = append(l.Headers, Header{Key: h.Key, Value: string(h.Value)})
	}
	l.Error, _ = l.header(event.HeaderError)
	if v, ok := l.header(event.HeaderSourcePartition); ok {
		if n, err := strconv.Atoi(v); err == nil {
			l.SourcePartition = n
		}
	}
	if v, ok := l.header(event.HeaderSourceOffset); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			l.SourceOffset = n
		}
	}
	if v, ok := l.header(event.HeaderOriginalSize); ok {
		if n, err := strconv.Atoi(v); err == nil {
			l.OriginalSize = n
		}
	}
	if v, ok := l.header(event.HeaderTruncated); ok && v == "true" {
		l.Truncated = true
	}
	if v, ok := l.header(event.HeaderHeadersDropped); ok {
		l.HeadersDropped, _ = strconv.Atoi(v)
	}
	if ref, ok := event.DecodeRef(value); ok || ref.RequestID != "" {
		l.RequestID, l.OrderNo = printable(ref.RequestID, 64), printable(ref.OrderNo, 96)
	}
	if _, err := l.Event(); err != nil {
		l.Invalid = err.Error()
	}
	return l
}

// Event decodes the dead letter with the event schema and checks its
// signature, as the worker would now. A truncated dead letter is never
// valid: it is not the event that was sent.
func (l Letter) Event() (event.OrderRequested, error) {
	if l.Truncated {
		return event.OrderRequested{}, errors.New("truncated: the dead letter holds only the first bytes of the message")
	}
	e, err := event.Decode(l.Value)
	if err != nil {
		return event.OrderRequested{}, err
	}
	// A replay re-signs the value: only a value the gateway signed may be
	// replayed, or a replay would make a foreign message the gateway's.
	var sigs []string
	for _, h := range l.Headers {
		if h.Key == event.HeaderSignature {
			sigs = append(sigs, h.Value)
		}
	}
	if !event.SignedBy(l.Value, sigs) {
		return event.OrderRequested{}, event.ErrNotSigned
	}
	return e, nil
}

// ValueText is the value as text when it is UTF-8.
func (l Letter) ValueText() (string, bool) { return string(l.Value), utf8.Valid(l.Value) }

func printable(s string, max int) string {
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// Reader reads the dead-letter topic: its records as Letters.
type Reader struct {
	Client *kafka.Client
	Topic  string
}

func (r Reader) topic() topic.Reader { return topic.Reader{Client: r.Client, Topic: r.Topic} }

// Partitions lists every partition of the topic with its offsets.
func (r Reader) Partitions(ctx context.Context) ([]topic.Bounds, error) {
	return r.topic().Partitions(ctx)
}

// Read returns the dead letter at pos (ErrNotFound outside the log, or on a
// partition the topic does not have). It reads the topic's partitions first:
// a broker that is down says so, not "topic not found".
func (r Reader) Read(ctx context.Context, pos Position) (Letter, error) {
	parts, err := r.Partitions(ctx)
	if err != nil {
		return Letter{}, err
	}
	if !slices.ContainsFunc(parts, func(b topic.Bounds) bool {
		return b.Partition == pos.Partition && b.First <= pos.Offset && pos.Offset < b.Next
	}) {
		return Letter{}, fmt.Errorf("%s %s: %w", r.Topic, pos, ErrNotFound)
	}
	var found *Letter
	err = r.Scan(ctx, []topic.Bounds{{Partition: pos.Partition, First: pos.Offset, Next: pos.Offset + 1}}, func(l Letter) error {
		found = &l
		return nil
	})
	if err != nil {
		return Letter{}, err
	}
	if found == nil {
		return Letter{}, fmt.Errorf("%s %s: %w", r.Topic, pos, ErrNotFound)
	}
	return *found, nil
}

// Scan calls fn for every dead letter of the given ranges, in offset order
// per partition, partitions in the order given.
func (r Reader) Scan(ctx context.Context, ranges []topic.Bounds, fn func(Letter) error) error {
	return r.topic().Scan(ctx, ranges, func(rec topic.Record) error {
		return fn(letterOf(Position{Partition: rec.Partition, Offset: rec.Offset}, rec.Time, rec.Key, rec.Value, rec.Headers))
	})
}
