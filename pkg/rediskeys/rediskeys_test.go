package rediskeys_test

import (
	"context"
	"fmt"
	"testing"

	"orderpipe/pkg/rediskeys"
	"orderpipe/pkg/testenv"
)

func TestDeleteTakesOnlyTheMatchingKeys(t *testing.T) {
	r := testenv.MustRedis(t)
	ctx := context.Background()
	for i := range 1234 { // more than one UNLINK batch
		r.Client.Set(ctx, fmt.Sprintf("%sgone:%d", r.Prefix, i), 1, 0)
	}
	r.Client.Set(ctx, r.Prefix+"kept", 1, 0)
	n, err := rediskeys.Delete(ctx, r.Client, r.Prefix+"gone:*")
	if err != nil || n != 1234 {
		t.Fatalf("Delete = %d, %v; want 1234", n, err)
	}
	if left := testenv.Keys(t, r.Client, r.Prefix); len(left) != 1 || left[0] != r.Prefix+"kept" {
		t.Fatalf("left %v, want only %skept", left, r.Prefix)
	}
}
