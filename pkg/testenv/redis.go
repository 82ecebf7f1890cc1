package testenv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// RedisTLS is a private redis-server serving TLS (mutual: a client
// certificate signed by the test CA is required) on TLSAddr and plain TCP on
// Addr, started with the extra arguments the test gave (requirepass, ACL
// users). Stopped at cleanup.
type RedisTLS struct {
	Addr, TLSAddr string
}

// MustRedisTLS starts one; skips if redis-server is not installed.
func MustRedisTLS(tb testing.TB, certs TLSFiles, extra ...string) RedisTLS {
	tb.Helper()
	plain, tlsPort := mustFreePort(tb, 0), mustFreePort(tb, 0)
	args := append([]string{"--port", strconv.Itoa(plain), "--tls-port", strconv.Itoa(tlsPort)}, redisTLSArgs(certs)...)
	mustRedisProcess(tb, tb.TempDir(), tlsPort, append(args, extra...)...)
	return RedisTLS{Addr: "127.0.0.1:" + strconv.Itoa(plain), TLSAddr: "127.0.0.1:" + strconv.Itoa(tlsPort)}
}

func redisTLSArgs(c TLSFiles) []string {
	return []string{"--tls-cert-file", c.ServerCert, "--tls-key-file", c.ServerKey, "--tls-ca-cert-file", c.CA,
		"--tls-auth-clients", "yes"}
}

// MustRedisCluster starts a three-primary Redis Cluster on TLS only (mutual,
// also between the nodes), every node with requirepass password, and
// returns the nodes' addresses once every slot is served. Skips if
// redis-server or redis-cli is not installed.
func MustRedisCluster(tb testing.TB, certs TLSFiles, password string) []string {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		tb.Skip("redis-cli not installed")
	}
	var addrs []string
	for range 3 {
		// The cluster bus listens on port+10000: both must be free.
		port := mustFreePort(tb, 10000)
		dir := tb.TempDir()
		args := append([]string{"--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cluster", "yes", "--tls-replication", "yes",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--requirepass", password, "--masterauth", password}, redisTLSArgs(certs)...)
		mustRedisProcess(tb, dir, port, args...)
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port))
	}
	cli := func(args ...string) (string, error) {
		base := []string{"--tls", "--cacert", certs.CA, "--cert", certs.ClientCert, "--key", certs.ClientKey, "--no-auth-warning", "-a", password}
		out, err := exec.Command("redis-cli", append(base, args...)...).CombinedOutput()
		return string(out), err
	}
	create := append([]string{"--cluster", "create"}, addrs...)
	if out, err := cli(append(create, "--cluster-yes")...); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	host, port, _ := net.SplitHostPort(addrs[0])
	WaitFor(tb, 30*time.Second, "the cluster to serve every slot", func() bool {
		out, err := cli("-h", host, "-p", port, "cluster", "info")
		return err == nil && bytes.Contains([]byte(out), []byte("cluster_state:ok"))
	})
	return addrs
}

// mustRedisProcess runs redis-server in dir without persistence until
// cleanup, and waits until port accepts connections.
func mustRedisProcess(tb testing.TB, dir string, port int, args ...string) {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server not installed")
	}
	args = append([]string{"--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
		"--logfile", filepath.Join(dir, "redis.log")}, args...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() //nolint:errcheck
	tb.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck
		<-exited
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	WaitFor(tb, 15*time.Second, "redis-server on "+addr, func() bool {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			tb.Fatalf("redis-server exited:\n%s", log)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// FreeAddr is a 127.0.0.1 address that was free a moment ago, on a port
// below the kernel's ephemeral range (mustFreePort): for a server the test
// starts there later, which no client socket of the machine may take in
// the meantime.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return "127.0.0.1:" + strconv.Itoa(mustFreePort(tb, 0))
}

// mustFreePort finds a port on 127.0.0.1 that is free, and with plus > 0
// also port+plus: from a random spot of 15000–30000, under
// the kernel's ephemeral range, so no client socket takes it meanwhile.
func mustFreePort(tb testing.TB, plus int) int {
	tb.Helper()
	free := func(p int) bool {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		ln.Close()
		return true
	}
	for range 1000 {
		p := 15000 + rand.IntN(15000)
		if free(p) && (plus == 0 || free(p+plus)) {
			return p
		}
	}
	tb.Fatal("no free port")
	return 0
}
