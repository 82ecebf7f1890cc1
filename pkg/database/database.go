// Package database opens the Postgres pool, creates the database when it is
// missing and applies the embedded migrations of package schemas. It never
// holds business rules: those live in pkg/order.
package database

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"orderpipe/schemas"
)

// DefaultURL is the local server's orderpipe database.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/orderpipe?sslmode=disable"

// Open connects a pool and checks the server answers.
func Open(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	pool, err := OpenLazy(ctx, dsn, maxConns)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pinging database %s: %w", Redact(dsn), err)
	}
	return pool, nil
}

// OpenLazy is Open without the check: the pool connects when first used, so
// a process that can work without Postgres (the gateway takes orders without
// it) starts during a Postgres outage.
func OpenLazy(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, parseError(dsn, err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	// Query spans (named by the SQL operation, without parameters), made only
	// under a span that records: otelpgx checks.
	cfg.ConnConfig.Tracer = otelpgx.NewTracer()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening database: %w", err)
	}
	return pool, nil
}

// connectMaintenance connects to the server's maintenance database with
// every other setting of dsn, and returns the database dsn names.
func connectMaintenance(ctx context.Context, dsn string) (conn *pgx.Conn, name string, err error) {
	// Parsed by pgx, so the maintenance connection keeps every setting of
	// the URL (TLS: sslmode, sslrootcert, client certificates; passwords
	// from the URL, PGPASSWORD or a passfile) and only the database differs.
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, "", parseError(dsn, err)
	}
	name = cfg.Database
	if name == "" {
		return nil, "", errors.New("database url names no database")
	}
	cfg.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("connecting to maintenance database: %w", err)
	}
	return conn, name, nil
}

// PingServer connects to the server dsn names, through its maintenance
// database (dsn's own database may not exist yet), and disconnects: a
// start-up check that creates nothing.
func PingServer(ctx context.Context, dsn string) error {
	conn, _, err := connectMaintenance(ctx, dsn)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// EnsureDatabase creates the database named in dsn if it does not exist, by
// connecting to the server's maintenance database.
func EnsureDatabase(ctx context.Context, dsn string) error {
	conn, name, err := connectMaintenance(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("looking up database %q: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // created concurrently
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating database %q: %w", name, err)
	}
	return nil
}

// Migrate applies every embedded migration not yet recorded, each in its own
// transaction, serialized across processes by an advisory lock.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (applied []string, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquiring connection: %w", err)
	}
	defer conn.Release()
	const lockKey = 7_402_311 // arbitrary, fixed: "orderpipe migrations"
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		return nil, fmt.Errorf("taking migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockKey) //nolint:errcheck

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("creating schema_migrations: %w", err)
	}
	names, err := fs.Glob(schemas.Migrations, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, name := range names {
		var done bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, name).Scan(&done); err != nil {
			return applied, fmt.Errorf("reading schema_migrations: %w", err)
		}
		if done {
			continue
		}
		body, err := fs.ReadFile(schemas.Migrations, name)
		if err != nil {
			return applied, err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, name)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("applying migration %s: %w", name, err)
		}
		applied = append(applied, name)
	}
	return applied, nil
}

// Redact hides the password of a database url for logs: the userinfo
// password and password=/sslpassword= values, in URL or keyword/value form.
func Redact(dsn string) string {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return kvPassword.ReplaceAllString(dsn, "${1}${2}password=xxxxx")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable database url)"
	}
	q := u.Query()
	masked := false
	for k := range q {
		if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
			q.Set(k, "xxxxx")
			masked = true
		}
	}
	if masked {
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// kvPassword is a password setting in keyword/value form, quoted or not.
var kvPassword = regexp.MustCompile(`(?i)(^|\s)(ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)

// parseError reports a connection string that does not parse, without the
// string itself: url.Parse's error quotes the whole URL, password included,
// so only its reason is kept.
func parseError(dsn string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("parsing database url %s: %v", Redact(dsn), ue.Err)
	}
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		// Its message is the redacted string and the reason.
		return fmt.Errorf("parsing database url: %s", pe.Error())
	}
	return fmt.Errorf("parsing database url %s: %v", Redact(dsn), err)
}
