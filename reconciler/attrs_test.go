package reconciler

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestItemAttrsLogTheStock: a drift line names Redis's stock as a number
// (or nothing when the key is missing), whichever handler writes it — a
// text handler printed the pointer's address.
func TestItemAttrsLogTheStock(t *testing.T) {
	five := int64(5)
	for _, c := range []struct {
		stock *int64
		text  string
		json  string
	}{{&five, "redis_stock=5 ", `"redis_stock":5,`}, {nil, "redis_stock=<nil> ", `"redis_stock":null,`}} {
		var text, js bytes.Buffer
		slog.New(slog.NewTextHandler(&text, nil)).Warn("drift", itemAttrs(ItemReport{RedisStock: c.stock})...)
		slog.New(slog.NewJSONHandler(&js, nil)).Warn("drift", itemAttrs(ItemReport{RedisStock: c.stock})...)
		if !strings.Contains(text.String(), c.text) || !strings.Contains(js.String(), c.json) {
			t.Errorf("logged\n%s%s want %q and %q", text.String(), js.String(), c.text, c.json)
		}
	}
}
