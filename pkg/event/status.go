package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/segmentio/kafka-go"

	"orderpipe/schemas"
)

// The orders.status event: one per state change of an order, published by
// the relay from the outbox (pkg/order's order_events) once the change has
// committed. Keyed by orderNo, so one order's events stay in one partition,
// in order.
const (
	// StatusTopic is where the relay publishes state changes.
	StatusTopic = "orders.status"
	// StatusSchemaV1 is the value of the schema header.
	StatusSchemaV1 = "orders.status.v1"
)

// OrderStatus is one state change of an order.
type OrderStatus struct {
	OrderNo    string    `json:"orderNo"`
	RequestID  string    `json:"requestId"`
	UserID     int64     `json:"userId"`
	ActivityID int64     `json:"activityId"`
	ItemID     int64     `json:"itemId"`
	Quantity   int       `json:"quantity"`
	Status     string    `json:"status"`
	Reason     string    `json:"reason,omitempty"`
	Version    int       `json:"version"`
	At         time.Time `json:"at"`
}

var statusSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.OrdersStatusV1))
	if err != nil {
		return nil, fmt.Errorf("reading the orders.status.v1 schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	const url = "mem://orders.status.v1.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("adding the orders.status.v1 schema: %w", err)
	}
	return c.Compile(url)
})

// DecodeStatus decodes an orders.status.v1 value and validates it against
// its JSON Schema (unknown fields are allowed: a tolerant reader).
func DecodeStatus(value []byte) (OrderStatus, error) {
	sch, err := statusSchema()
	if err != nil {
		return OrderStatus{}, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return OrderStatus{}, fmt.Errorf("decoding status event: %w", err)
	}
	if err := sch.Validate(doc); err != nil {
		return OrderStatus{}, fmt.Errorf("validating status event: %w", err)
	}
	var s OrderStatus
	if err := json.Unmarshal(value, &s); err != nil {
		return OrderStatus{}, fmt.Errorf("decoding status event: %w", err)
	}
	return s, nil
}

// ParseStored decodes a status event's payload as package order stored it
// (its own SQL writes them, and its tests hold every payload to the
// schema): plain JSON decoding and a check of every field's range the
// schema names (ids, quantity, status and its reason, version, time), without
// DecodeStatus's full validation, which cost the relay more than publishing
// the event did.
func ParseStored(value []byte) (OrderStatus, error) {
	var s OrderStatus
	if err := json.Unmarshal(value, &s); err != nil {
		return OrderStatus{}, fmt.Errorf("decoding status event: %w", err)
	}
	switch {
	case s.OrderNo == "" || s.RequestID == "":
		return OrderStatus{}, errors.New("status event without orderNo or requestId")
	case s.Version < 1:
		return OrderStatus{}, fmt.Errorf("status event of %s: version %d, want 1 or more", s.OrderNo, s.Version)
	case s.Status != "UNPAID" && s.Status != "PAID" && s.Status != "CLOSED" && s.Status != "REJECTED":
		return OrderStatus{}, fmt.Errorf("status event of %s: status %q", s.OrderNo, s.Status)
	case (s.Status == "CLOSED" || s.Status == "REJECTED") && s.Reason == "":
		return OrderStatus{}, fmt.Errorf("status event of %s: %s without a reason", s.OrderNo, s.Status)
	case s.UserID < 1 || s.ActivityID < 1 || s.ItemID < 1:
		return OrderStatus{}, fmt.Errorf("status event of %s: userId %d, activityId %d, itemId %d, want each 1 or more",
			s.OrderNo, s.UserID, s.ActivityID, s.ItemID)
	case s.Quantity < 1 || s.Quantity > 100:
		return OrderStatus{}, fmt.Errorf("status event of %s: quantity %d, want 1 to 100", s.OrderNo, s.Quantity)
	case s.At.IsZero():
		return OrderStatus{}, fmt.Errorf("status event of %s: no time", s.OrderNo)
	}
	return s, nil
}

// Marshal encodes the event.
func (s OrderStatus) Marshal() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("encoding status event: %v", err)) // plain fields and a time: cannot fail
	}
	return b
}

// StatusMessage is the Kafka message of a status event: key orderNo, the
// schema and request-id headers (StartSend adds the trace context).
func StatusMessage(s OrderStatus) kafka.Message {
	return kafka.Message{
		Key:   []byte(s.OrderNo),
		Value: s.Marshal(),
		Headers: append(make([]kafka.Header, 0, 5),
			kafka.Header{Key: HeaderSchema, Value: []byte(StatusSchemaV1)},
			kafka.Header{Key: HeaderRequestID, Value: []byte(s.RequestID)},
		),
	}
}
