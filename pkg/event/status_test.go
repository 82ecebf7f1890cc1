package event

import (
	"testing"
	"time"
)

// TestParseStoredAgreesWithDecodeStatus: a payload as package order stores
// it parses to what the schema-validating decoder gives, and a payload
// missing what the relay keys or orders the message by is refused.
func TestParseStoredAgreesWithDecodeStatus(t *testing.T) {
	t.Parallel()
	// jsonb's text form, as the relay reads it from order_events.
	stored := `{"at": "2026-12-03T10:00:00.123456Z", "itemId": 1, "reason": "CANCELLED", "status": "CLOSED", "userId": 7, "orderNo": "5-1-abc", "version": 2, "quantity": 1, "requestId": "r-1", "activityId": 5}`
	got, err := ParseStored([]byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodeStatus([]byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("ParseStored %+v, DecodeStatus %+v", got, want)
	}
	if !got.At.Equal(time.Date(2026, 12, 3, 10, 0, 0, 123456000, time.UTC)) || got.Version != 2 || got.Reason != "CANCELLED" {
		t.Errorf("parsed %+v", got)
	}
	for name, bad := range map[string]string{
		"not JSON":     `{"orderNo": "5-1-abc"`,
		"no orderNo":   `{"requestId": "r-1", "status": "UNPAID", "version": 1}`,
		"no requestId": `{"orderNo": "5-1-abc", "status": "UNPAID", "version": 1}`,
		"version 0":    `{"orderNo": "5-1-abc", "requestId": "r-1", "status": "UNPAID", "version": 0}`,
		"PENDING":      `{"orderNo": "5-1-abc", "requestId": "r-1", "status": "PENDING", "version": 1}`,
	} {
		if _, err := ParseStored([]byte(bad)); err == nil {
			t.Errorf("%s: %s parsed", name, bad)
		}
	}
}
