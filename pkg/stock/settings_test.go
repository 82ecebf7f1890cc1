package stock_test

import (
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
)

// TestReplicaWaitTimeoutMustFitRedisTimeout: WAIT counts in milliseconds
// (0 blocks for ever) and runs inside the pipeline's read, which
// REDIS_TIMEOUT bounds.
func TestReplicaWaitTimeoutMustFitRedisTimeout(t *testing.T) {
	read := func(wait string) (stock.Config, error) {
		env := map[string]string{"REDIS_KEY_PREFIX": "p:", "REDIS_WAIT_REPLICAS": "1", "REDIS_WAIT_TIMEOUT": wait}
		r := &setting.Reader{Env: func(name string) string { return env[name] }}
		c := stock.Read(r, time.Second)
		return c, r.Err()
	}
	for _, d := range []string{"1s", "2s", "500us"} {
		if _, err := read(d); err == nil || !strings.Contains(err.Error(), "REDIS_WAIT_TIMEOUT") {
			t.Errorf("REDIS_WAIT_TIMEOUT=%s with REDIS_TIMEOUT=1s: err %v", d, err)
		}
	}
	c, err := read("50ms")
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefix != "p:" || c.Wait.Replicas != 1 || c.Wait.Timeout != 50*time.Millisecond {
		t.Errorf("%+v, want prefix p: and 1 replica within 50ms", c)
	}
}
