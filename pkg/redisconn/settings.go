package redisconn

import "orderpipe/pkg/setting"

// TimeoutVar is REDIS_TIMEOUT, the bound on one Redis call.
var TimeoutVar = setting.Var{Name: "REDIS_TIMEOUT", Default: "1s",
	Help: "bound on one Redis call (dial, read, write) and on a reserve call's wait for a pipeline"}

// Settings are the environment variables of the Redis connection.
var Settings = []setting.Var{
	{Name: "REDIS_ADDR", Default: "127.0.0.1:6379", Help: "Redis host:port; comma-separated nodes ⇒ Redis Cluster"},
	{Name: "REDIS_URL", Default: "", Help: "instead of REDIS_ADDR: redis://[user[:password]@]host:port[/db], rediss:// for TLS; several hosts after one userinfo (rediss://u:p@h1:6379,h2:6379) ⇒ Redis Cluster"},
	{Name: "REDIS_USERNAME", Default: "", Help: "Redis ACL user (when REDIS_URL names none)"},
	{Name: "REDIS_PASSWORD", Default: "", Help: "Redis password of REDIS_USERNAME, or of the default user (requirepass); when REDIS_URL has none"},
	{Name: "REDIS_TLS_CA_FILE", Default: "", Help: "PEM CA certificate(s) that verify the Redis server (rediss:// only); empty ⇒ the system's roots"},
	{Name: "REDIS_TLS_CERT_FILE", Default: "", Help: "PEM client certificate for mutual TLS with Redis (with REDIS_TLS_KEY_FILE)"},
	{Name: "REDIS_TLS_KEY_FILE", Default: "", Help: "PEM private key of REDIS_TLS_CERT_FILE"},
	TimeoutVar,
}

// Read is the connection the settings describe. Whether it is a usable one
// is Check's to say (or ReadChecked's).
func Read(r *setting.Reader) Config {
	return Config{URL: r.String("REDIS_URL"), Addr: r.String("REDIS_ADDR"), Username: r.String("REDIS_USERNAME"),
		Password: r.String("REDIS_PASSWORD"), CAFile: r.String("REDIS_TLS_CA_FILE"), CertFile: r.String("REDIS_TLS_CERT_FILE"),
		KeyFile: r.String("REDIS_TLS_KEY_FILE"), Timeout: r.Duration("REDIS_TIMEOUT")}
}

// ReadChecked is Read, and a failure of r when the settings do not describe
// a usable connection (both REDIS_URL and REDIS_ADDR given among them).
func ReadChecked(r *setting.Reader) Config {
	c := Read(r)
	if c.URL != "" && setting.Set("REDIS_ADDR") {
		r.Fail("REDIS_URL and REDIS_ADDR are both set: set one")
	} else if err := c.Check(); err != nil {
		r.Fail("%s", err.Error())
	}
	return c
}
