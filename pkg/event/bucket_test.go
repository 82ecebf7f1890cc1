package event

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBucketField: the bucket is written only when not 0 (an item of one
// bucket produces exactly the event it always did), round-trips through the
// fast path and the schema, and out-of-range buckets are refused.
func TestBucketField(t *testing.T) {
	t.Parallel()
	e := sample()
	if strings.Contains(string(e.Marshal()), "bucket") {
		t.Errorf("bucket 0 is written: %s", e.Marshal())
	}
	e.Bucket = 5
	raw := e.Marshal()
	std, _ := json.Marshal(e)
	if string(raw) != string(std) || !strings.HasSuffix(string(raw), `,"bucket":5}`) {
		t.Fatalf("Marshal %s, encoding/json %s", raw, std)
	}
	if err := Validate(raw); err != nil {
		t.Fatalf("the schema refuses %s: %v", raw, err)
	}
	if got, ok := decodeCanonical(raw); !ok || got != e {
		t.Errorf("fast path: %+v %v", got, ok)
	}
	if ref, ok := DecodeRef(raw); !ok || ref.Bucket != 5 {
		t.Errorf("DecodeRef: %+v %v", ref, ok)
	}
	for _, bad := range []string{`-1`, `64`, `"3"`, `1.5`} {
		v := strings.Replace(string(raw), `"bucket":5`, `"bucket":`+bad, 1)
		if _, err := Decode([]byte(v)); err == nil {
			t.Errorf("Decode accepts bucket %s", bad)
		}
	}
}
