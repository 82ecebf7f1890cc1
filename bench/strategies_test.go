package bench

import (
	"context"
	"testing"

	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/testenv"
)

func TestRedisStrategies(t *testing.T) {
	t.Parallel()
	rd := testenv.MustRedis(t)
	prefix := rd.Prefix
	const requests, units = 400, 60
	rep, err := RunStrategies(context.Background(), StrategyConfig{Redis: redisconn.Config{Addr: testenv.RedisAddr()}, Concurrency: 40,
		Requests: requests, Stock: units, RepeatShare: 0.2, Seed: 3, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Repeats == 0 {
		t.Fatal("the workload holds no repeated user: duplicates could not show")
	}
	byName := map[string]StrategyResult{}
	for _, r := range rep.Results {
		byName[r.Name] = r
		// Every request is accounted for, whatever the strategy did.
		if n := r.Granted + r.SoldOut + r.AlreadyPurchased + r.GaveUp + r.Errors; n != requests {
			t.Errorf("%s: outcomes add up to %d, want %d", r.Name, n, requests)
		}
		if r.FinalStock != units-int64(r.Granted) && r.Errors == 0 {
			t.Errorf("%s: final stock %d after %d granted of %d", r.Name, r.FinalStock, r.Granted, units)
		}
	}
	res, ok := byName["reserve"]
	if !ok || !rep.OK {
		t.Fatalf("reserve script: %+v (report ok %v)", res, rep.OK)
	}
	// More distinct users than units: the script sells out exactly.
	if res.Granted != units || res.OversoldUnits != 0 || res.DuplicateUsers != 0 || res.FinalStock != 0 || res.Errors != 0 {
		t.Errorf("reserve script: %+v", res)
	}
	// The naive path is measured, not judged: its races are probabilistic.
	if naive, ok := byName["naive"]; !ok || naive.Requests != requests || naive.Latency.Max <= 0 {
		t.Errorf("naive result not reported: %+v", naive)
	}
	if _, ok := byName["lock"]; !ok {
		t.Error("lock result not reported")
	}
	// Nothing left behind.
	if keys := testenv.Keys(t, rd.Client, prefix); len(keys) != 0 {
		t.Errorf("keys left behind: %v", keys[:min(len(keys), 5)])
	}
}
