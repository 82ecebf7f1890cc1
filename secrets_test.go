package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"orderpipe/pkg/testenv"
)

// Known secret values: none may appear in anything the binary writes.
var secrets = map[string]string{
	"DATABASE_URL password": "pgPw-Secret-1c9e",
	"ADMIN_TOKEN":           "adminTok-Secret-77ab",
	"API_TOKENS 1":          "apiTok-Secret-a1f0",
	"API_TOKENS 2":          "apiTok-Secret-b2e1",
	"REDIS_URL password":    "redisPw-Secret-5a3d",
	"REDIS_PASSWORD":        "redisPw-Secret-6b4e",
	"KAFKA_SASL_PASSWORD":   "kafkaPw-Secret-d41c",
	"WEBHOOK_SECRET":        "aG9va0tleS1TZWNyZXQtNGIyYy0wMTIzNDU2Nzg5YWI=", // base64 of hookKey-Secret-4b2c-0123456789ab
	"WEBHOOK_URLS password": "hookPw-Secret-3e9a",
}

// secretEnv sets every secret, directly (database and Redis at hostPort),
// plus the rest of env.
func secretEnv(hostPort string, env ...string) []string {
	return append([]string{
		"DATABASE_URL=postgres://postgres:" + secrets["DATABASE_URL password"] + "@" + hostPort + "/orderpipe_secret?sslmode=disable",
		"ADMIN_TOKEN=" + secrets["ADMIN_TOKEN"],
		"API_TOKENS=" + secrets["API_TOKENS 1"] + "," + secrets["API_TOKENS 2"],
		"REDIS_URL=redis://app:" + secrets["REDIS_URL password"] + "@" + hostPort,
		"KAFKA_TLS=true", "KAFKA_SASL_MECHANISM=SCRAM-SHA-512", "KAFKA_SASL_USERNAME=app",
		"KAFKA_SASL_PASSWORD=" + secrets["KAFKA_SASL_PASSWORD"],
		"WEBHOOK_URLS=https://hooks:" + secrets["WEBHOOK_URLS password"] + "@" + hostPort + "/in",
		"WEBHOOK_SECRET=whsec_" + secrets["WEBHOOK_SECRET"],
	}, env...)
}

func assertNoSecret(t *testing.T, what, out string) {
	t.Helper()
	for name, v := range secrets {
		if strings.Contains(out, v) {
			t.Errorf("%s shows the %s:\n%s", what, name, out)
		}
	}
}

// testSecretsNeverShown runs the production binary with known secrets,
// every command, failing and running, and greps all it wrote.
func testSecretsNeverShown(t *testing.T, _ engine) {
	t.Parallel()
	closed := freeAddr(t)
	// Each command its own listen addresses: the failing commands run at
	// once, and two listening on one address would fail for that instead.
	dead := func(t *testing.T) []string {
		return []string{"KAFKA_BROKERS=" + closed, "HTTP_ADDR=" + freeAddr(t), "METRICS_ADDR=" + freeAddr(t),
			"REDIS_KEY_PREFIX=secrettest:"}
	}
	pw := secrets["DATABASE_URL password"]
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("FailingCommands", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			env  []string
			args []string
		}{
			{"Env", secretEnv(closed, dead(t)...), []string{"env"}},
			{"Migrate", secretEnv(closed, dead(t)...), []string{"migrate"}},
			{"RedisAddrAndPassword", append(dead(t), "REDIS_ADDR="+closed, "REDIS_PASSWORD="+secrets["REDIS_PASSWORD"],
				"DATABASE_URL=postgres://postgres:"+pw+"@"+closed+"/x"), []string{"closer"}},
			{"RedisPasswordTwice", secretEnv(closed, append(dead(t), "REDIS_PASSWORD="+secrets["REDIS_PASSWORD"])...), []string{"gateway"}},
			{"RedisURLBadPort", append(dead(t), "REDIS_URL=rediss://app:"+secrets["REDIS_URL password"]+"@127.0.0.1:notaport"), []string{"reconciler", "--once"}},
			{"RedisPasswordFromFile", append(dead(t), "REDIS_ADDR="+closed, "REDIS_PASSWORD_FILE="+write("redis_password", secrets["REDIS_PASSWORD"]),
				"DATABASE_URL=postgres://postgres:"+pw+"@"+closed+"/x"), []string{"gateway"}},
			{"KafkaBadMechanism", secretEnv(closed, append(dead(t), "KAFKA_SASL_MECHANISM=GSSAPI")...), []string{"topics"}},
			{"KafkaPasswordFromFile", append(dead(t), "KAFKA_SASL_MECHANISM=PLAIN", "KAFKA_SASL_USERNAME=app",
				"KAFKA_SASL_PASSWORD_FILE="+write("kafka_password", secrets["KAFKA_SASL_PASSWORD"])), []string{"topics"}},
			{"MigrateBadPort", append(dead(t), "DATABASE_URL=postgres://postgres:"+pw+"@127.0.0.1:notaport/x"), []string{"migrate"}},
			{"MigrateBadSSLMode", append(dead(t), "DATABASE_URL=postgres://postgres:"+pw+"@"+closed+"/x?sslmode=bogus"), []string{"migrate"}},
			{"MigrateKeywordValue", append(dead(t), "DATABASE_URL=host=127.0.0.1 port="+strings.Split(closed, ":")[1]+" user=postgres password="+pw+" dbname=x sslmode=disable"), []string{"migrate"}},
			{"MigrateFromFiles", append(dead(t), "DATABASE_URL_FILE="+write("database_url", "postgres://postgres:"+pw+"@"+closed+"/x"),
				"ADMIN_TOKEN_FILE="+write("admin_token", secrets["ADMIN_TOKEN"])), []string{"migrate"}},
			{"All", secretEnv(closed, dead(t)...), []string{"all"}},
			{"Gateway", secretEnv(closed, dead(t)...), []string{"gateway"}},
			{"Worker", secretEnv(closed, dead(t)...), []string{"worker"}},
			{"Closer", secretEnv(closed, dead(t)...), []string{"closer"}},
			{"Reconciler", secretEnv(closed, dead(t)...), []string{"reconciler", "--once"}},
			{"Locate", secretEnv(closed, dead(t)...), []string{"locate", "r-1"}},
			{"Topics", secretEnv(closed, dead(t)...), []string{"topics"}},
			{"BenchPurge", secretEnv(closed, dead(t)...), []string{"bench", "--purge-keys"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				// Most wait out the startup wait on a dead dependency
				// (30 s, an idle retry loop): they wait together.
				t.Parallel()
				res := runBinary(t, tc.env, tc.args...)
				assertNoSecret(t, "orderpipe "+strings.Join(tc.args, " "), res.String())
				if tc.name == "Env" {
					if res.code != 0 || !strings.Contains(res.stdout, "ADMIN_TOKEN") {
						t.Errorf("env: %s", res)
					}
					return
				}
				// Each fails, and says why: the grep above read a real error.
				if res.code == 0 || strings.TrimSpace(res.stderr) == "" {
					t.Errorf("want a failure with a message: %s", res)
				}
			})
		}
	})

	t.Run("RunningGateway", func(t *testing.T) {
		// A gateway taking requests on the real Postgres (trust: the
		// password is sent to nobody, but it is in the URL) and Redis, with
		// Kafka unreachable, at debug level; every route is called with and
		// without the tokens, then it is stopped.
		db := testenv.MustDatabase(t)
		u, err := url.Parse(db.URL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(u.User.Username(), pw)
		httpAddr := freeAddr(t)
		env := secretEnv("unused", "DATABASE_URL="+u.String(), "REDIS_URL=redis://"+testenv.RedisAddr(),
			"REDIS_KEY_PREFIX="+testenv.UniqueName("t")+":", "KAFKA_BROKERS="+closed, "HTTP_ADDR="+httpAddr, "LOG_LEVEL=debug",
			"PRODUCE_TIMEOUT=1s")
		env = slices.DeleteFunc(env, func(kv string) bool { // the live ones replace the dead
			return strings.Contains(kv, "@unused")
		})
		cmd := exec.Command(mustBinary(t), "gateway")
		cmd.Env = cleanEnv(env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		base := "http://" + httpAddr
		testenv.WaitFor(t, time.Minute, "the gateway's /healthz", func() bool {
			select {
			case err := <-exited:
				t.Fatalf("gateway exited: %v\n%s", err, out.String())
			default:
			}
			res, err := http.Get(base + "/healthz")
			if err != nil {
				return false
			}
			res.Body.Close()
			return true
		})
		call := func(method, path, token, body string) int {
			req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			return res.StatusCode
		}
		now := time.Now().UTC()
		activity := fmt.Sprintf(`{"name":"s","startsAt":%q,"endsAt":%q,"perUserLimit":1,"items":[{"itemId":1,"stock":5}]}`,
			now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
		order := `{"requestId":"sec-1","userId":1,"activityId":77,"itemId":1,"quantity":1}`
		for _, c := range []struct {
			method, path, token, body string
			want                      int
		}{
			{"GET", "/readyz", "", "", http.StatusServiceUnavailable},
			{"PUT", "/admin/v1/activities/77", "wrong-" + secrets["ADMIN_TOKEN"], activity, http.StatusUnauthorized},
			{"PUT", "/admin/v1/activities/77", secrets["ADMIN_TOKEN"], activity, http.StatusOK},
			{"POST", "/admin/v1/activities/77/preheat", secrets["ADMIN_TOKEN"], "", http.StatusOK},
			{"POST", "/v1/orders", "", order, http.StatusUnauthorized},
			{"POST", "/v1/orders", secrets["API_TOKENS 2"], order, http.StatusServiceUnavailable}, // Kafka is down
			{"GET", "/v1/orders/77-1-nosuch", secrets["API_TOKENS 1"], "", http.StatusNotFound},
		} {
			if got := call(c.method, c.path, c.token, c.body); got != c.want {
				t.Errorf("%s %s: %d, want %d", c.method, c.path, got, c.want)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Errorf("gateway stopped with %v", err)
		}
		assertNoSecret(t, "the running gateway", out.String())
		if !strings.Contains(out.String(), "xxxxx@") {
			t.Errorf("the gateway logged no (redacted) database url: did the test see its logs?\n%s", out.String())
		}
	})
}
