// Package event owns the orders.requested and orders.status events: their
// Go types, the codecs validated against the JSON Schemas in package
// schemas, the Kafka
// headers (schema version, request id, W3C trace context), and the plumbing
// to reach a broker (writers, topics, ping). It never decides what an event
// means for stock or orders, and never links a test broker (the embedded one
// is in pkg/standin, in development builds only).
package event

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"

	"orderpipe/schemas"
)

const (
	// Topic is where the gateway produces reservations.
	Topic = "orders.requested"
	// DLQTopic receives messages the worker cannot decode or validate.
	DLQTopic = "orders.requested.dlq"
	// SchemaV1 is the value of the schema header.
	SchemaV1 = "orders.requested.v1"

	HeaderSchema    = "schema"
	HeaderRequestID = "request-id"
	HeaderError     = "error"
)

// Headers a dead letter carries besides HeaderError: where it came from, and
// what was cut to bound it (the worker writes them, orderpipe dlq reads them).
const (
	HeaderSourcePartition = "source-partition"
	HeaderSourceOffset    = "source-offset"
	HeaderOriginalSize    = "original-size"
	HeaderTruncated       = "truncated"
	HeaderHeadersDropped  = "headers-dropped"
)

// OrderRequested is a reservation made by the gateway.
type OrderRequested struct {
	RequestID  string    `json:"requestId"`
	OrderNo    string    `json:"orderNo"`
	UserID     int64     `json:"userId"`
	ActivityID int64     `json:"activityId"`
	ItemID     int64     `json:"itemId"`
	Quantity   int       `json:"quantity"`
	ReservedAt time.Time `json:"reservedAt"`
	// Bucket is the stock bucket the reservation was taken from (bucketed
	// stock, pkg/stock/buckets.go); absent for 0, the only one of an item
	// with one bucket.
	Bucket int `json:"bucket,omitempty"`
}

// MaxBuckets bounds the bucket field (pkg/stock.MaxBuckets buckets: 0..63).
const MaxBuckets = 64

// ValidOrderNo reports whether s can be an order number: 1 to 96 bytes of
// UTF-8 without control characters (Postgres's text refuses NUL, and a
// message whose number it refuses must not hold its partition up).
func ValidOrderNo(s string) bool {
	if len(s) < 1 || len(s) > 96 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// ValidRequestID is the contract's rule: 1–64 characters of [A-Za-z0-9._:-].
func ValidRequestID(id string) bool {
	if len(id) < 1 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// Key is the Kafka message key: one item's orders stay in one partition.
func (e OrderRequested) Key() string {
	return strconv.FormatInt(e.ActivityID, 10) + ":" + strconv.FormatInt(e.ItemID, 10)
}

// Marshal encodes the event exactly as encoding/json does. Events in UTC
// whose strings need no escaping (the gateway's always: requestIds are
// [A-Za-z0-9._:-], orderNos its own) are written by hand, without
// reflection: the gateway encodes one per order request.
func (e OrderRequested) Marshal() []byte {
	if _, offset := e.ReservedAt.Zone(); offset == 0 && plain(e.RequestID) && plain(e.OrderNo) &&
		e.ReservedAt.Year() >= 0 && e.ReservedAt.Year() <= 9999 {
		b := make([]byte, 0, 160+len(e.RequestID)+len(e.OrderNo))
		b = append(b, `{"requestId":"`...)
		b = append(b, e.RequestID...)
		b = append(b, `","orderNo":"`...)
		b = append(b, e.OrderNo...)
		b = append(b, `","userId":`...)
		b = strconv.AppendInt(b, e.UserID, 10)
		b = append(b, `,"activityId":`...)
		b = strconv.AppendInt(b, e.ActivityID, 10)
		b = append(b, `,"itemId":`...)
		b = strconv.AppendInt(b, e.ItemID, 10)
		b = append(b, `,"quantity":`...)
		b = strconv.AppendInt(b, int64(e.Quantity), 10)
		b = append(b, `,"reservedAt":"`...)
		b = e.ReservedAt.AppendFormat(b, time.RFC3339Nano)
		if e.Bucket != 0 {
			b = append(b, `","bucket":`...)
			b = strconv.AppendInt(b, int64(e.Bucket), 10)
			return append(b, '}')
		}
		return append(b, `"}`...)
	}
	b, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("encoding event: %v", err)) // only plain fields and an in-range time: cannot fail
	}
	return b
}

// plain reports whether encoding/json writes s unchanged: printable ASCII
// without quotes, backslashes or the HTML characters it escapes.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

var (
	schemaOnce sync.Once
	schemaV1   *jsonschema.Schema
	schemaErr  error
)

func compiledSchema() (*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.OrdersRequestedV1))
		if err != nil {
			schemaErr = fmt.Errorf("parsing event schema: %w", err)
			return
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		const url = "mem://orders.requested.v1.json"
		if err := c.AddResource(url, doc); err != nil {
			schemaErr = fmt.Errorf("adding event schema: %w", err)
			return
		}
		schemaV1, schemaErr = c.Compile(url)
	})
	return schemaV1, schemaErr
}

// Validate checks raw JSON against the orders.requested.v1 schema.
func Validate(value []byte) error {
	sch, err := compiledSchema()
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return fmt.Errorf("decoding event: %w", err)
	}
	if err := sch.Validate(doc); err != nil {
		return fmt.Errorf("event does not match %s: %w", SchemaV1, err)
	}
	return nil
}

// Decode validates a message value against the schema and decodes it.
//
// The worker is a tolerant reader within the major version: properties the
// schema does not name are ignored, so a newer gateway may add optional
// fields during a rolling upgrade without its events being dead-lettered.
// Only the schema's own property names count, exactly as spelt (Go's
// case-insensitive matching would let "RequestID" beside "requestId" pick
// the reservation).
//
// An event in the exact form Marshal writes (what the gateway produces)
// is checked in Go against the schema's constraints: the round trip proves
// it holds exactly the schema's properties, each of the right JSON type, and
// a reservedAt in RFC 3339. Anything else (hand-written, another producer)
// is validated by the JSON Schema itself. The worker decodes every event, so
// this keeps the schema's verdict without paying its generic validator for
// each one.
func Decode(value []byte) (OrderRequested, error) {
	if e, ok := decodeCanonical(value); ok {
		return e, nil
	}
	if err := Validate(value); err != nil {
		return OrderRequested{}, err
	}
	var props map[string]json.RawMessage
	if err := json.Unmarshal(value, &props); err != nil {
		return OrderRequested{}, fmt.Errorf("decoding event: %w", err)
	}
	var e OrderRequested
	for name, dst := range map[string]any{"requestId": &e.RequestID, "orderNo": &e.OrderNo, "userId": &e.UserID,
		"activityId": &e.ActivityID, "itemId": &e.ItemID, "quantity": &e.Quantity, "reservedAt": &e.ReservedAt, "bucket": &e.Bucket} {
		raw, ok := props[name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return OrderRequested{}, fmt.Errorf("decoding event's %s: %w", name, err)
		}
	}
	return e, nil
}

// decodeCanonical decodes value if it is byte for byte what Marshal writes
// for an event that meets every constraint of the schema.
func decodeCanonical(value []byte) (OrderRequested, bool) {
	var e OrderRequested
	if json.Unmarshal(value, &e) != nil {
		return OrderRequested{}, false
	}
	if !ValidRequestID(e.RequestID) || !ValidOrderNo(e.OrderNo) ||
		e.UserID < 1 || e.ActivityID < 1 || e.ItemID < 1 || e.Quantity < 1 || e.Quantity > 100 || e.ReservedAt.IsZero() ||
		e.Bucket < 0 || e.Bucket >= MaxBuckets {
		return OrderRequested{}, false
	}
	b, err := json.Marshal(e)
	if err != nil || !bytes.Equal(b, value) {
		return OrderRequested{}, false
	}
	return e, true
}

// DecodeRef recovers from an invalid message which reservation it names
// (requestId, orderNo, activityId, itemId), so the worker can still release
// it — by its journal entry, not by what the message claims. ok reports
// whether all four are usable.
func DecodeRef(value []byte) (e OrderRequested, ok bool) {
	var ref struct {
		RequestID  string `json:"requestId"`
		OrderNo    string `json:"orderNo"`
		ActivityID int64  `json:"activityId"`
		ItemID     int64  `json:"itemId"`
		Bucket     int    `json:"bucket"`
	}
	if err := json.Unmarshal(value, &ref); err != nil {
		return OrderRequested{}, false
	}
	if ref.Bucket < 0 || ref.Bucket >= MaxBuckets {
		return OrderRequested{}, false
	}
	e = OrderRequested{RequestID: ref.RequestID, OrderNo: ref.OrderNo, ActivityID: ref.ActivityID, ItemID: ref.ItemID, Bucket: ref.Bucket}
	// No reservation has an id the gateway would refuse.
	return e, ValidRequestID(e.RequestID) && ValidOrderNo(e.OrderNo) && e.ActivityID > 0 && e.ItemID > 0
}

// Message builds the Kafka message for an event, with the trace context of
// ctx in its headers.
func Message(ctx context.Context, e OrderRequested) kafka.Message {
	msg := NewMessage(e)
	Inject(ctx, &msg)
	return msg
}

// NewMessage builds the Kafka message for an event without trace context:
// StartSend injects the context of the send span.
func NewMessage(e OrderRequested) kafka.Message { return MessageOf(e, e.Marshal()) }

// MessageOf is NewMessage for an event already encoded (value = e.Marshal()),
// signed (Sign).
func MessageOf(e OrderRequested, value []byte) kafka.Message {
	return kafka.Message{
		Key:   []byte(e.Key()),
		Value: value,
		// Room for traceparent, tracestate and baggage.
		Headers: append(make([]kafka.Header, 0, 6),
			kafka.Header{Key: HeaderSchema, Value: []byte(SchemaV1)},
			kafka.Header{Key: HeaderRequestID, Value: []byte(e.RequestID)},
			kafka.Header{Key: HeaderSignature, Value: []byte(Signature(value))},
		),
	}
}

// Header returns a header's value ("" if absent).
func Header(msg kafka.Message, key string) string {
	for _, h := range msg.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// HeaderCarrier adapts Kafka headers to OpenTelemetry propagation.
type HeaderCarrier struct{ Msg *kafka.Message }

func (c HeaderCarrier) Get(key string) string { return Header(*c.Msg, key) }

func (c HeaderCarrier) Set(key, value string) {
	for i, h := range c.Msg.Headers {
		if h.Key == key {
			c.Msg.Headers[i].Value = []byte(value)
			return
		}
	}
	c.Msg.Headers = append(c.Msg.Headers, kafka.Header{Key: key, Value: []byte(value)})
}

func (c HeaderCarrier) Keys() []string {
	keys := make([]string, len(c.Msg.Headers))
	for i, h := range c.Msg.Headers {
		keys[i] = h.Key
	}
	return keys
}

// Inject writes the W3C trace context and baggage of ctx into msg's headers.
func Inject(ctx context.Context, msg *kafka.Message) {
	otel.GetTextMapPropagator().Inject(ctx, HeaderCarrier{Msg: msg})
}

// Extract returns ctx carrying the trace context found in msg's headers.
func Extract(ctx context.Context, msg kafka.Message) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, HeaderCarrier{Msg: &msg})
}

// ParseBrokers splits a comma-separated KAFKA_BROKERS value.
func ParseBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}
