// Package redisconn builds the Redis client of every component and command
// from the configuration: one node or a Redis Cluster, an ACL user or the
// default user's password, TLS with a private CA and a client certificate.
// It is the one place that knows REDIS_URL's form; it never logs, and never
// puts a password in an error or in String.
package redisconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config is where Redis is and how to log in.
type Config struct {
	// URL is REDIS_URL: redis://[user[:password]@]host[:port][/db] or
	// rediss:// (TLS). Several hosts, comma-separated after one scheme and
	// one userinfo, mean a Redis Cluster:
	// rediss://user:pass@h1:6379,h2:6379,h3:6379. Wins over Addr.
	URL string
	// Addr is REDIS_ADDR: host:port, or comma-separated nodes of a Cluster.
	Addr string
	// Username and Password (REDIS_USERNAME, REDIS_PASSWORD): an ACL user,
	// or with Username empty the default user's requirepass. They fill in
	// what the URL does not say; saying it twice is an error.
	Username, Password string
	// CAFile verifies the server (rediss:// only; else the system roots);
	// CertFile and KeyFile are a client certificate for mutual TLS.
	CAFile, CertFile, KeyFile string
	// Timeout bounds a dial, a read and a write (REDIS_TIMEOUT).
	Timeout time.Duration
}

// target is Config resolved.
type target struct {
	addrs              []string
	username, password string
	db                 int
	tls                bool
}

// resolve checks the configuration and says where to connect. Errors name
// the variable and never quote a password.
func (c Config) resolve() (target, error) {
	var t target
	if c.URL != "" {
		var err error
		if t, err = parseURL(c.URL); err != nil {
			return t, err
		}
	} else {
		for _, a := range strings.Split(c.Addr, ",") {
			if a = strings.TrimSpace(a); a != "" {
				if _, port, err := net.SplitHostPort(a); err != nil || !validPort(port) {
					return t, fmt.Errorf("REDIS_ADDR: want host:port (comma-separated for a Cluster), got %q", a)
				}
				t.addrs = append(t.addrs, a)
			}
		}
		if len(t.addrs) == 0 {
			return t, errors.New("REDIS_ADDR: no address")
		}
	}
	if c.Username != "" {
		if t.username != "" {
			return t, errors.New("REDIS_URL names a user and REDIS_USERNAME is set: set one")
		}
		t.username = c.Username
	}
	if c.Password != "" {
		if t.password != "" {
			return t, errors.New("REDIS_URL carries a password and REDIS_PASSWORD is set: set one")
		}
		t.password = c.Password
	}
	if !t.tls && (c.CAFile != "" || c.CertFile != "" || c.KeyFile != "") {
		return t, errors.New("REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE and REDIS_TLS_KEY_FILE need TLS: a rediss:// REDIS_URL")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return t, errors.New("REDIS_TLS_CERT_FILE and REDIS_TLS_KEY_FILE go together: set both or neither")
	}
	if len(t.addrs) > 1 && t.db != 0 {
		return t, errors.New("REDIS_URL: a Redis Cluster has only database 0")
	}
	return t, nil
}

// parseURL reads redis[s]://[user[:password]@]host[:port][,host[:port]...][/db].
func parseURL(raw string) (target, error) {
	var t target
	scheme, rest, ok := strings.Cut(raw, "://")
	switch {
	case !ok || (scheme != "redis" && scheme != "rediss"):
		return t, errors.New("REDIS_URL: want redis://[user[:password]@]host[:port][/db] or rediss://... (TLS)")
	case scheme == "rediss":
		t.tls = true
	}
	authority, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	hosts := authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		var userinfo string
		userinfo, hosts = authority[:i], authority[i+1:]
		u, err := url.Parse("redis://" + userinfo + "@host")
		if err != nil || u.User == nil {
			return t, errors.New("REDIS_URL: bad user or password (percent-encode @ : / ? # % in them)")
		}
		t.username = u.User.Username()
		t.password, _ = u.User.Password()
	}
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.Trim(h, "[]"), "6379"
		}
		if host == "" {
			return t, fmt.Errorf("REDIS_URL: host %q has no name", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return t, fmt.Errorf("REDIS_URL: host %q has a bad port", h)
		}
		t.addrs = append(t.addrs, net.JoinHostPort(host, port))
	}
	if len(t.addrs) == 0 {
		return t, errors.New("REDIS_URL: no host")
	}
	switch {
	case path == "" || path == "/":
	case strings.HasPrefix(path, "/") && !strings.ContainsAny(path, "?#"):
		n, err := strconv.Atoi(path[1:])
		if err != nil || n < 0 {
			return t, fmt.Errorf("REDIS_URL: database %q is not a number", path[1:])
		}
		t.db = n
	default:
		return t, errors.New("REDIS_URL: options after ? are not read (use the REDIS_* variables)")
	}
	return t, nil
}

// Check reports a configuration that cannot work (for startup, before any
// connection): a bad URL, a setting given twice, a certificate file that
// does not load.
func (c Config) Check() error {
	if _, err := c.resolve(); err != nil {
		return err
	}
	_, err := c.tlsConfig()
	return err
}

func (c Config) tlsConfig() (*tls.Config, error) {
	t, err := c.resolve()
	if err != nil || !t.tls {
		return nil, err
	}
	// ServerName stays empty: each connection verifies the host it dialed
	// (crypto/tls takes it from the address), so every node of a Cluster is
	// checked against its own name or IP.
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CA_FILE: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("REDIS_TLS_CA_FILE %s: no PEM certificate in it", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CERT_FILE/REDIS_TLS_KEY_FILE: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Options are what differs between the clients of the components.
type Options struct {
	PoolSize, MinIdleConns int
	// MaxRetries: 0 ⇒ go-redis's default (3); -1 ⇒ a single Redis's client
	// never resends. A Cluster client resends regardless, up to its
	// MaxRedirects: on MOVED and ASK, and on a connection that failed or
	// timed out after the command was written, so a script may run twice.
	MaxRetries int
	// DialTimeout and ReadTimeout (also the write timeout): 0 ⇒ Config.Timeout.
	DialTimeout, ReadTimeout time.Duration
	// PoolTimeout: how long a command waits for a free connection; 0 ⇒
	// go-redis's default (ReadTimeout + 1 s).
	PoolTimeout time.Duration
}

// New builds the client: a *redis.Client for one address, a
// *redis.ClusterClient for several. It does not connect yet.
func (c Config) New(o Options) (redis.UniversalClient, error) {
	t, err := c.resolve()
	if err != nil {
		return nil, err
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	dial, read := o.DialTimeout, o.ReadTimeout
	if dial == 0 {
		dial = c.Timeout
	}
	if read == 0 {
		read = c.Timeout
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: t.addrs, Username: t.username, Password: t.password, DB: t.db, TLSConfig: tc,
		PoolSize: o.PoolSize, MinIdleConns: o.MinIdleConns, MaxRetries: o.MaxRetries,
		DialTimeout: dial, ReadTimeout: read, WriteTimeout: read, PoolTimeout: o.PoolTimeout,
	}), nil
}

// String says where Redis is, for logs and errors, password masked:
// "rediss://app:xxxxx@h1:6380,h2:6380" or "127.0.0.1:6379".
func (c Config) String() string {
	t, err := c.resolve()
	if err != nil {
		return "(bad redis configuration)"
	}
	hosts := strings.Join(t.addrs, ",")
	if c.URL == "" && t.username == "" && t.password == "" {
		return hosts
	}
	scheme := "redis"
	if t.tls {
		scheme = "rediss"
	}
	user := url.PathEscape(t.username)
	if t.password != "" {
		user += ":xxxxx"
	}
	if user != "" {
		user += "@"
	}
	s := scheme + "://" + user + hosts
	if t.db != 0 {
		s += "/" + strconv.Itoa(t.db)
	}
	return s
}

// Passwords are the secrets in the configuration, for masking.
func (c Config) Passwords() []string {
	out := []string{c.Password}
	if t, err := parseURL(c.URL); err == nil && t.password != "" {
		out = append(out, t.password)
	} else if i := strings.LastIndex(c.URL, "@"); i >= 0 {
		// A URL that does not parse may still hold one.
		if _, rest, ok := strings.Cut(c.URL[:i], "://"); ok {
			if _, pw, ok := strings.Cut(rest, ":"); ok {
				out = append(out, pw)
				if dec, err := url.PathUnescape(pw); err == nil {
					out = append(out, dec)
				}
			}
		}
	}
	return out
}

// validPort is a TCP port number a client can dial: 1-65535.
func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}
