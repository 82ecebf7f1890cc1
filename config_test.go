package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/setting"
)

// TestConfigDocDocumentsEveryVariable keeps docs/config.md's table true:
// every variable the binary reads (the development build's too) appears in
// it with its declared default.
func TestConfigDocDocumentsEveryVariable(t *testing.T) {
	doc := tableRows(t, "docs/config.md", "")
	for _, e := range settings() {
		def, ok := doc[e.Name]
		switch {
		case !ok:
			t.Errorf("docs/config.md's table lacks %s", e.Name)
		case def != e.Default:
			t.Errorf("docs/config.md gives %s the default %q, its declaration %q", e.Name, def, e.Default)
		}
	}
}

func TestBadConfigurationIsRefused(t *testing.T) {
	for _, kv := range [][2]string{{"CLOSE_AFTER", "-1s"}, {"WORKER_BATCH_SIZE", "many"}, {"KAFKA_PARTITIONS", "0"}, {"RATE_LIMIT_USER_RPS", "-1"}, {"GOGC", "lots"}, {"GATEWAY_PRODUCER", "async"}} {
		t.Run(kv[0], func(t *testing.T) {
			t.Setenv(kv[0], kv[1])
			if _, err := loadConfig(); err == nil || !strings.Contains(err.Error(), kv[0]) {
				t.Errorf("%s=%s: err %v", kv[0], kv[1], err)
			}
		})
	}
}

// TestFileVariables: NAME_FILE supplies a variable (Docker/Kubernetes
// secrets); setting both, or naming a missing file, is a configuration error.
func TestFileVariables(t *testing.T) {
	dir := t.TempDir()
	secret := dir + "/admin_token"
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unsetenv(t, "ADMIN_TOKEN", "ADMIN_TOKEN_FILE", "DATABASE_URL", "DATABASE_URL_FILE")

	t.Setenv("ADMIN_TOKEN_FILE", secret)
	cfg, err := loadConfig()
	if err != nil || cfg.Gateway.AdminToken != "s3cret" {
		t.Fatalf("from file: %q %v", cfg.Gateway.AdminToken, err)
	}
	if !setting.Set("ADMIN_TOKEN") || setting.Set("DATABASE_URL") {
		t.Errorf("setting.Set: ADMIN_TOKEN %v, DATABASE_URL %v", setting.Set("ADMIN_TOKEN"), setting.Set("DATABASE_URL"))
	}

	t.Setenv("ADMIN_TOKEN", "direct")
	if _, err := loadConfig(); err == nil {
		t.Error("ADMIN_TOKEN and ADMIN_TOKEN_FILE both set: no error")
	}
	os.Unsetenv("ADMIN_TOKEN")

	t.Setenv("ADMIN_TOKEN_FILE", dir+"/missing")
	if _, err := loadConfig(); err == nil {
		t.Error("missing ADMIN_TOKEN_FILE: no error")
	}
}

// WAIT counts in milliseconds (0 blocks for ever) and runs inside the
// pipeline's read, which REDIS_TIMEOUT bounds.
func TestReplicaWaitTimeoutMustFitRedisTimeout(t *testing.T) {
	t.Setenv("REDIS_WAIT_REPLICAS", "1")
	t.Setenv("REDIS_TIMEOUT", "1s")
	for _, d := range []string{"1s", "2s", "500us"} {
		t.Setenv("REDIS_WAIT_TIMEOUT", d)
		if _, err := loadConfig(); err == nil || !strings.Contains(err.Error(), "REDIS_WAIT_TIMEOUT") {
			t.Errorf("REDIS_WAIT_TIMEOUT=%s with REDIS_TIMEOUT=1s: err %v", d, err)
		}
	}
	t.Setenv("REDIS_WAIT_TIMEOUT", "50ms")
	c, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.Stock.Wait.Replicas != 1 || c.Stock.Wait.Timeout != 50*time.Millisecond {
		t.Errorf("RedisWait %+v, want 1 replica within 50ms", c.Stock.Wait)
	}
}
