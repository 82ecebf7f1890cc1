package main

import (
	"os"
	"strings"
	"testing"

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
	for _, kv := range [][2]string{{"CLOSE_AFTER", "-1s"}, {"WORKER_BATCH_SIZE", "many"}, {"KAFKA_PARTITIONS", "0"}, {"RATE_LIMIT_USER_RPS", "-1"}, {"GOGC", "lots"}, {"GATEWAY_PRODUCER", "async"},
		{"RELAY_BATCH_SIZE", "0"}, {"KAFKA_REPLICATION_FACTOR", "0"}, {"REDIS_URL", "ftp://nowhere"}} {
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
