package redisconn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/rediskeys"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

func TestConfigChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  redisconn.Config
		want string // "" ⇒ valid
		str  string // String(), when valid
	}{
		{"Addr", redisconn.Config{Addr: "127.0.0.1:6379"}, "", "127.0.0.1:6379"},
		{"AddrCluster", redisconn.Config{Addr: "h1:1, h2:2"}, "", "h1:1,h2:2"},
		{"AddrWithPassword", redisconn.Config{Addr: "h:6379", Password: "pw-12345"}, "", "redis://:xxxxx@h:6379"},
		{"URL", redisconn.Config{URL: "redis://h"}, "", "redis://h:6379"},
		{"URLUserPasswordDB", redisconn.Config{URL: "rediss://app:p%40ss-12345@h:6380/3"}, "", "rediss://app:xxxxx@h:6380/3"},
		{"URLCluster", redisconn.Config{URL: "rediss://app:pw-12345@h1:7000,h2:7001,[::1]:7002"}, "", "rediss://app:xxxxx@h1:7000,h2:7001,[::1]:7002"},
		{"URLUserFromVariables", redisconn.Config{URL: "rediss://h:1", Username: "app", Password: "pw-12345"}, "", "rediss://app:xxxxx@h:1"},
		{"BadScheme", redisconn.Config{URL: "http://h:1"}, "want redis://", ""},
		{"BadPort", redisconn.Config{URL: "redis://u:pw-12345@h:port"}, "bad port", ""},
		{"BadDB", redisconn.Config{URL: "redis://h:1/x"}, "not a number", ""},
		{"Query", redisconn.Config{URL: "redis://h:1/0?dial_timeout=1s"}, "options after ?", ""},
		{"PasswordTwice", redisconn.Config{URL: "redis://:pw-12345@h:1", Password: "other-123"}, "set one", ""},
		{"UserTwice", redisconn.Config{URL: "redis://a:pw-12345@h:1", Username: "b"}, "set one", ""},
		{"TLSFilesWithoutTLS", redisconn.Config{Addr: "h:1", CAFile: "/x"}, "need TLS", ""},
		{"CertWithoutKey", redisconn.Config{URL: "rediss://h:1", CertFile: "/x"}, "go together", ""},
		{"ClusterDB", redisconn.Config{URL: "redis://h1:1,h2:2/1"}, "only database 0", ""},
		{"MissingCA", redisconn.Config{URL: "rediss://h:1", CAFile: "/nonexistent/ca.pem"}, "REDIS_TLS_CA_FILE", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.MustConfigError(t, "Check", tc.cfg.Check(), tc.want, "pw-12345")
			if tc.want == "" {
				if got := tc.cfg.String(); got != tc.str {
					t.Errorf("String() = %q, want %q", got, tc.str)
				}
			}
			for _, p := range tc.cfg.Passwords() {
				if p != "" && strings.Contains(tc.cfg.String(), p) {
					t.Errorf("String() %q shows password %q", tc.cfg.String(), p)
				}
			}
		})
	}
}

const (
	defaultPassword = "default-Pw-9d1c"
	alicePassword   = "alice-Pw-47e0"
)

// TestTLSAndAuth connects to a real redis-server that requires TLS with a
// client certificate (and serves plain TCP beside it), a password for the
// default user and an ACL user alice.
func TestTLSAndAuth(t *testing.T) {
	t.Parallel()
	certs := testenv.MustTLS(t, "orderpipe")
	srv := testenv.MustRedisTLS(t, certs, "--requirepass", defaultPassword,
		"--user", "alice", "on", ">"+alicePassword, "~*", "&*", "+@all")
	tlsPort := srv.TLSAddr[strings.LastIndex(srv.TLSAddr, ":")+1:]
	mTLS := func(c redisconn.Config) redisconn.Config {
		c.CAFile, c.CertFile, c.KeyFile = certs.CA, certs.ClientCert, certs.ClientKey
		return c
	}
	for _, tc := range []struct {
		name    string
		cfg     redisconn.Config
		user    string // ACL WHOAMI when it works
		wantErr string
	}{
		{"TLSDefaultUserInURL", mTLS(redisconn.Config{URL: "rediss://:" + defaultPassword + "@" + srv.TLSAddr}), "default", ""},
		{"TLSACLUserInURL", mTLS(redisconn.Config{URL: "rediss://alice:" + alicePassword + "@" + srv.TLSAddr + "/2"}), "alice", ""},
		{"TLSACLUserFromVariables", mTLS(redisconn.Config{URL: "rediss://" + srv.TLSAddr, Username: "alice", Password: alicePassword}), "alice", ""},
		{"TLSByHostName", mTLS(redisconn.Config{URL: "rediss://alice:" + alicePassword + "@localhost:" + tlsPort}), "alice", ""},
		{"PlainAddrWithPassword", redisconn.Config{Addr: srv.Addr, Password: defaultPassword}, "default", ""},
		{"PlainURLACLUser", redisconn.Config{URL: "redis://alice:" + alicePassword + "@" + srv.Addr}, "alice", ""},
		{"WrongPassword", mTLS(redisconn.Config{URL: "rediss://alice:wrong-" + alicePassword + "@" + srv.TLSAddr}), "", "WRONGPASS"},
		{"NoPassword", mTLS(redisconn.Config{URL: "rediss://" + srv.TLSAddr}), "", "NOAUTH"},
		{"NoClientCertificate", redisconn.Config{URL: "rediss://alice:" + alicePassword + "@" + srv.TLSAddr, CAFile: certs.CA}, "", ""},
		{"OtherCA", redisconn.Config{URL: "rediss://alice:" + alicePassword + "@" + srv.TLSAddr, CAFile: certs.OtherCA,
			CertFile: certs.ClientCert, KeyFile: certs.ClientKey}, "", "certificate signed by unknown authority"},
		{"SystemRoots", redisconn.Config{URL: "rediss://alice:" + alicePassword + "@" + srv.TLSAddr,
			CertFile: certs.ClientCert, KeyFile: certs.ClientKey}, "", "certificate signed by unknown authority"},
		{"PlainToTLSPort", redisconn.Config{URL: "redis://alice:" + alicePassword + "@" + srv.TLSAddr}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Timeout = 5 * time.Second
			rdb, err := tc.cfg.New(redisconn.Options{PoolSize: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			ctx := context.Background()
			who, err := rdb.Do(ctx, "ACL", "WHOAMI").Text()
			if tc.user == "" {
				if err == nil {
					t.Fatalf("connected as %s; want a refusal", who)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %q, want one with %q", err, tc.wantErr)
				}
				for _, pw := range []string{defaultPassword, alicePassword} {
					if strings.Contains(err.Error(), pw) {
						t.Errorf("the error shows a password: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ACL WHOAMI: %v", err)
			}
			if who != tc.user {
				t.Errorf("logged in as %s, want %s", who, tc.user)
			}
			// The scripts the pipeline runs, over this connection.
			prefix := testenv.UniqueName("t") + ":"
			st, sr := stock.New(rdb, prefix), stocktest.On(rdb, prefix)
			it := stock.Item{ActivityID: 1, ItemID: 2}
			now := time.Now()
			if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: 7, StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Cap: 1}); err != nil {
				t.Fatalf("preheat: %v", err)
			}
			if n, err := rdb.Get(ctx, stocktest.KeysOf(sr, it).Stock).Int(); err != nil || n != 7 {
				t.Errorf("stock %d %v, want 7", n, err)
			}
			rdb.Del(ctx, stocktest.KeysOf(sr, it).Stock, stocktest.KeysOf(sr, it).Sale)
		})
	}
}

// TestCluster: several hosts in REDIS_URL make a Redis Cluster client; the
// stock scripts run on every shard over mutual TLS with a password, and the
// cleanup helper reaches every primary.
func TestCluster(t *testing.T) {
	t.Parallel()
	certs := testenv.MustTLS(t, "orderpipe")
	addrs := testenv.MustRedisCluster(t, certs, defaultPassword)
	cfg := redisconn.Config{URL: "rediss://:" + defaultPassword + "@" + strings.Join(addrs, ","),
		CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, Timeout: 5 * time.Second}
	rdb, err := cfg.New(redisconn.Options{PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("client %T, want a cluster client", rdb)
	}
	ctx := context.Background()
	prefix := testenv.UniqueName("t") + ":"
	st, sr := stock.New(rdb, prefix), stocktest.On(rdb, prefix)
	now := time.Now()
	shards := map[string]bool{}
	for i := range 30 {
		it := stock.Item{ActivityID: 1, ItemID: int64(i)}
		if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: int64(i + 1), StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Cap: 1}); err != nil {
			t.Fatalf("preheat item %d: %v", i, err)
		}
		if n, err := rdb.Get(ctx, stocktest.KeysOf(sr, it).Stock).Int(); err != nil || n != i+1 {
			t.Errorf("item %d: stock %d %v", i, n, err)
		}
		node, err := cc.MasterForKey(ctx, stocktest.KeysOf(sr, it).Stock)
		if err != nil {
			t.Fatal(err)
		}
		shards[node.Options().Addr] = true
	}
	if len(shards) != 3 {
		t.Errorf("30 items landed on %d shards, want all 3", len(shards))
	}
	n, err := rediskeys.Delete(ctx, rdb, prefix+"*")
	if err != nil || n != 90 {
		t.Errorf("deleted %d keys (%v), want 90 (stock, sale and marker index of 30 items)", n, err)
	}
}
