package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PostgresTLS is a private PostgreSQL server that takes only TLS
// connections (hostssl; a plain one is refused by pg_hba) with a
// scram-sha-256 password for user postgres, its certificate signed by the
// test CA, listening on 127.0.0.1 and 127.0.0.2 (an address its certificate
// does not name). Stopped and removed at cleanup.
type PostgresTLS struct {
	Port     int
	Password string
}

// URL is a connection URL to database db on host with the given query.
func (p PostgresTLS) URL(host, db, query string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", p.Password),
		Host: host + ":" + strconv.Itoa(p.Port), Path: "/" + db, RawQuery: query}
	return u.String()
}

// MustPostgresTLS initdb's and starts one from the machine's PostgreSQL
// binaries (as the postgres user when the tests run as root: PostgreSQL
// refuses root); skips when there are none.
func MustPostgresTLS(tb testing.TB, certs TLSFiles, password string) PostgresTLS {
	tb.Helper()
	bin, dir := postgresPlace(tb, "tls")
	cred := postgresCredential(tb)
	data := filepath.Join(dir, "data")
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	chown(tb, dir, cred)
	runPostgresTool(tb, bin, cred, "initdb", "-D", data, "-U", "postgres", "--pwfile", pwFile, "-A", "scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync")
	// The server's key must be private to the server's account.
	key := filepath.Join(data, "server.key")
	b, err := os.ReadFile(certs.ServerKey)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(key, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	hba := "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhostssl all all 127.0.0.2/32 scram-sha-256\n" +
		"host all all 0.0.0.0/0 reject\n"
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		tb.Fatal(err)
	}
	chown(tb, data, cred)
	port := mustFreePort(tb, 0)
	exited := startPostgres(tb, bin, dir, cred, "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1,127.0.0.2", "-c", "unix_socket_directories="+dir,
		"-c", "ssl=on", "-c", "ssl_cert_file="+certs.ServerCert, "-c", "ssl_key_file="+key, "-c", "ssl_ca_file="+certs.CA,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	p := PostgresTLS{Port: port, Password: password}
	dsn := p.URL("127.0.0.1", "postgres", "sslmode=verify-full&sslrootcert="+url.QueryEscape(certs.CA))
	waitPostgres(tb, "the TLS postgres to accept connections", dir, exited, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return false
		}
		conn.Close(ctx)
		return true
	})
	return p
}

// postgresPlace is the machine's PostgreSQL binaries and a new directory
// for a private server, removed at cleanup; skips when there are no
// binaries.
func postgresPlace(tb testing.TB, kind string) (bin, dir string) {
	tb.Helper()
	bin = postgresBinaries()
	if bin == "" {
		tb.Skip("no PostgreSQL binaries (initdb, postgres)")
	}
	dir, err := os.MkdirTemp("", "orderpipe-pg"+kind+"-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return bin, dir
}

// startPostgres runs the postgres server with args as cred, its output in
// dir/postgres.log, and stops it (fast shutdown) at cleanup; the channel
// closes when it exits.
func startPostgres(tb testing.TB, bin, dir string, cred *syscall.Credential, args ...string) <-chan struct{} {
	tb.Helper()
	srv := exec.Command(filepath.Join(bin, "postgres"), args...)
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		tb.Fatal(err)
	}
	srv.Stdout, srv.Stderr = logFile, logFile
	if err := srv.Start(); err != nil {
		tb.Fatalf("starting postgres: %v", err)
	}
	exited := make(chan struct{})
	go func() { srv.Wait(); logFile.Close(); close(exited) }() //nolint:errcheck
	tb.Cleanup(func() {
		srv.Process.Signal(syscall.SIGINT) //nolint:errcheck // fast shutdown
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			srv.Process.Kill() //nolint:errcheck
			<-exited
		}
	})
	return exited
}

// waitPostgres waits (a minute at most) until up, failing the test with
// the server's log if it exits first.
func waitPostgres(tb testing.TB, what, dir string, exited <-chan struct{}, up func() bool) {
	tb.Helper()
	WaitFor(tb, time.Minute, what, func() bool {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			tb.Fatalf("postgres exited:\n%s", log)
		default:
		}
		return up()
	})
}

// PostgresStandby is a private PostgreSQL server held in recovery: a
// standby with no primary to follow and hot_standby off, so every
// connection is refused with SQLSTATE 57P03 ("the database system is not
// accepting connections"), as while a restarted server replays its WAL,
// until Promote. Trust authentication for user postgres on 127.0.0.1.
type PostgresStandby struct {
	URL  string // database postgres
	bin  string
	data string
	cred *syscall.Credential
}

// MustPostgresStandby initdb's one from the machine's PostgreSQL binaries,
// starts it in recovery and checks that a connection is refused with 57P03;
// stopped and removed at cleanup. Skips when there are no binaries.
func MustPostgresStandby(tb testing.TB) *PostgresStandby {
	tb.Helper()
	bin, dir := postgresPlace(tb, "standby")
	s := &PostgresStandby{bin: bin, data: filepath.Join(dir, "data"), cred: postgresCredential(tb)}
	chown(tb, dir, s.cred)
	runPostgresTool(tb, bin, s.cred, "initdb", "-D", s.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	if err := os.WriteFile(filepath.Join(s.data, "standby.signal"), nil, 0o600); err != nil {
		tb.Fatal(err)
	}
	chown(tb, s.data, s.cred)
	port := mustFreePort(tb, 0)
	exited := startPostgres(tb, bin, dir, s.cred, "-D", s.data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir, "-c", "hot_standby=off",
		"-c", "fsync=off")
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	waitPostgres(tb, "the standby postgres to listen", dir, exited, func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57P03" {
		if conn != nil {
			conn.Close(ctx)
		}
		tb.Fatalf("connecting to the server in recovery: %v, want SQLSTATE 57P03", err)
	}
	return s
}

// Promote ends the recovery (pg_ctl promote): from then on the server
// takes connections.
func (s *PostgresStandby) Promote(tb testing.TB) {
	tb.Helper()
	runPostgresTool(tb, s.bin, s.cred, "pg_ctl", "promote", "-w", "-D", s.data)
}

// runPostgresTool runs one of PostgreSQL's programs (initdb, pg_ctl) in bin
// as cred, failing the test with its output if it fails.
func runPostgresTool(tb testing.TB, bin string, cred *syscall.Credential, name string, args ...string) {
	tb.Helper()
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", name, err, out)
	}
}

// postgresBinaries is a directory with initdb and postgres: PATH, else the
// newest /usr/lib/postgresql/*/bin; "" when there is none.
func postgresBinaries() string {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(found)))
	for _, d := range append(dirs, found...) {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				return d
			}
		}
	}
	return ""
}

// postgresCredential is the account the server runs as: the postgres user
// when running as root, else the current one.
func postgresCredential(tb testing.TB) *syscall.Credential {
	tb.Helper()
	if os.Geteuid() != 0 {
		return &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		tb.Skip("running as root without a postgres user to run PostgreSQL as")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func chown(tb testing.TB, dir string, cred *syscall.Credential) {
	tb.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
	if err != nil {
		tb.Fatal(fmt.Errorf("handing %s to the server's account: %w", dir, err))
	}
}
