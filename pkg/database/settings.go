package database

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"

	"orderpipe/pkg/setting"
)

// Settings are the environment variables of the Postgres connection.
var Settings = []setting.Var{
	{Name: "DATABASE_URL", Default: DefaultURL, Help: "Postgres; the database is created if missing"},
	{Name: "DB_MAX_CONNS", Default: "20", Help: "Postgres pool size per process"},
}

// Config is where Postgres is and how many connections a process opens.
type Config struct {
	URL      string // DATABASE_URL
	MaxConns int    // DB_MAX_CONNS
}

// Read is the Config the settings describe.
func Read(r *setting.Reader) Config {
	c := Config{URL: r.String("DATABASE_URL"), MaxConns: r.Int("DB_MAX_CONNS")}
	// Parsed here, so a url that never could connect stops the command
	// before anything starts (`all` would migrate first), as a bad setting.
	if _, err := pgconn.ParseConfig(c.URL); err != nil {
		r.Fail("DATABASE_URL: %v", parseError(c.URL, err))
	}
	return c
}

// MigrateUsage is `orderpipe migrate --help`.
const MigrateUsage = `usage: orderpipe migrate

Creates the database DATABASE_URL names if it is missing (through the
server's maintenance database "postgres") and applies every embedded
migration not applied yet, serialized across processes by an advisory lock.
`

// Prepare is `orderpipe migrate` (and the start of `orderpipe all`): it
// creates the database url names if it is missing and applies every
// migration not applied yet.
func Prepare(ctx context.Context, log *slog.Logger, url string) error {
	if err := EnsureDatabase(ctx, url); err != nil {
		return err
	}
	pool, err := Open(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := Migrate(ctx, pool)
	if err != nil {
		return err
	}
	log.Info("migrated", "database", Redact(url), "applied", applied)
	return nil
}
