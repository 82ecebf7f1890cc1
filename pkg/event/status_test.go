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
	// Each case breaks one field of an otherwise valid payload; the schema
	// refuses each too.
	const ok = `"orderNo": "5-1-abc", "requestId": "r-1", "at": "2026-12-03T10:00:00Z"`
	for name, bad := range map[string]string{
		"not JSON":          `{"orderNo": "5-1-abc"`,
		"no orderNo":        `{"requestId": "r-1", "userId": 7, "activityId": 5, "itemId": 1, "quantity": 1, "status": "UNPAID", "version": 1, "at": "2026-12-03T10:00:00Z"}`,
		"no requestId":      `{"orderNo": "5-1-abc", "userId": 7, "activityId": 5, "itemId": 1, "quantity": 1, "status": "UNPAID", "version": 1, "at": "2026-12-03T10:00:00Z"}`,
		"version 0":         `{` + ok + `, "userId": 7, "activityId": 5, "itemId": 1, "quantity": 1, "status": "UNPAID", "version": 0}`,
		"PENDING":           `{` + ok + `, "userId": 7, "activityId": 5, "itemId": 1, "quantity": 1, "status": "PENDING", "version": 1}`,
		"userId 0":          `{` + ok + `, "userId": 0, "activityId": 5, "itemId": 1, "quantity": 1, "status": "UNPAID", "version": 1}`,
		"activityId -1":     `{` + ok + `, "userId": 7, "activityId": -1, "itemId": 1, "quantity": 1, "status": "UNPAID", "version": 1}`,
		"no itemId":         `{` + ok + `, "userId": 7, "activityId": 5, "quantity": 1, "status": "UNPAID", "version": 1}`,
		"quantity 0":        `{` + ok + `, "userId": 7, "activityId": 5, "itemId": 1, "quantity": 0, "status": "UNPAID", "version": 1}`,
		"quantity 101":      `{` + ok + `, "userId": 7, "activityId": 5, "itemId": 1, "quantity": 101, "status": "UNPAID", "version": 1}`,
		"CLOSED, no reason": `{` + ok + `, "userId": 7, "activityId": 5, "itemId": 1, "quantity": 1, "status": "CLOSED", "version": 2}`,
		"no time":           `{"orderNo": "5-1-abc", "requestId": "r-1", "userId": 7, "activityId": 5, "itemId": 1, "quantity": 1, "status": "UNPAID", "version": 1}`,
	} {
		if _, err := ParseStored([]byte(bad)); err == nil {
			t.Errorf("%s: %s parsed", name, bad)
		}
		if _, err := DecodeStatus([]byte(bad)); err == nil {
			t.Errorf("%s: the schema accepts %s", name, bad)
		}
	}
}
