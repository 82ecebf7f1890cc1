package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"orderpipe/pkg/database"
	"orderpipe/schemas"
)

// The pool of test databases, after river's riverdbtest: migrated
// databases named orderpipe_pool_<migrations hash>_<n>, shared by every
// test process on the server (go test runs packages as separate processes).
// A test owns database n while it holds the session advisory lock named
// after it on a connection of its own to TEST_DATABASE_URL's database
// (advisory locks are per database, so every process takes them there);
// the server drops the lock when that connection ends, also when the
// process is killed. On check-out the database is emptied (every table
// TRUNCATEd, sequences restarted, schema_migrations kept), and rebuilt when
// a test altered its schema. The pool grows to the number of tests that
// run at once; a change to the migrations starts a new pool and drops the
// old one's free databases.

const poolPrefix = "orderpipe_pool_"

// poolName is this build's prefix: the migrations' hash, so a test never
// gets a database migrated by other migrations.
var poolName = sync.OnceValue(func() string {
	names, err := fs.Glob(schemas.Migrations, "*.sql")
	if err != nil {
		panic(err)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(schemas.Migrations, n)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return poolPrefix + hex.EncodeToString(h.Sum(nil))[:10] + "_"
})

// schemaFingerprint sums what a migration or a test could change in the
// public schema: relations, columns, constraints, triggers, functions,
// and the schemas themselves. A pool database whose fingerprint is not
// the one recorded when it was migrated (its COMMENT) is rebuilt.
const schemaFingerprint = `SELECT md5(coalesce(string_agg(x, ',' ORDER BY x), '')) FROM (
	SELECT 'n:' || nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'
	UNION ALL SELECT 'c:' || relname || ':' || relkind::text FROM pg_class WHERE relnamespace = 'public'::regnamespace
	UNION ALL SELECT 'a:' || c.relname || '.' || a.attname || ':' || format_type(a.atttypid, a.atttypmod) || ':' || a.attnotnull
		|| ':' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
	UNION ALL SELECT 'k:' || conname || ':' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'public'::regnamespace
	UNION ALL SELECT 'i:' || indexrelid::regclass || ':' || pg_get_indexdef(indexrelid) FROM pg_index
		JOIN pg_class c ON c.oid = indrelid WHERE c.relnamespace = 'public'::regnamespace
	UNION ALL SELECT 't:' || tgname FROM pg_trigger WHERE NOT tgisinternal
	UNION ALL SELECT 'f:' || proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace
) s(x)`

// lockKey is the advisory lock that owns pool database name.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

var pruneOnce sync.Once

// MustDatabase checks a migrated, empty database out of the pool; it goes
// back at cleanup. The test may change the rows as it likes, and even the
// schema (the next check-out rebuilds it).
func MustDatabase(tb testing.TB) Database {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base, err := url.Parse(DatabaseURL())
	if err != nil {
		tb.Fatalf("parsing TEST_DATABASE_URL: %v", err)
	}
	admin, err := pgx.Connect(ctx, base.String())
	if err != nil {
		tb.Fatalf("connecting to test postgres: %v", err)
	}
	// Closing admin gives the database back: the lock goes with the session.
	tb.Cleanup(func() { admin.Close(context.Background()) })
	pruneOnce.Do(func() { prunePool(ctx, admin) })
	for n := 0; ; n++ {
		name := fmt.Sprintf("%s%d", poolName(), n)
		var mine bool
		if err := admin.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lockKey(name)).Scan(&mine); err != nil {
			tb.Fatalf("locking pool database %s: %v", name, err)
		}
		if !mine {
			continue
		}
		u := *base
		u.Path = "/" + name
		db, err := checkOut(ctx, admin, name, u.String())
		if err != nil {
			tb.Fatalf("pool database %s: %v", name, err)
		}
		// Registered after admin's cleanup, so it runs first: the pool's
		// connections end before the lock is released.
		tb.Cleanup(db.Pool.Close)
		return db
	}
}

// checkOut makes pool database name, whose lock the caller holds, ready:
// created and migrated if missing, rebuilt if a test changed its schema,
// else emptied.
func checkOut(ctx context.Context, admin *pgx.Conn, name, dsn string) (Database, error) {
	var exists bool
	var recorded string
	err := admin.QueryRow(ctx, `SELECT true, coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = $1`,
		name).Scan(&exists, &recorded)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Database{}, err
	}
	// Whatever a killed test process left connected is no one's now.
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
		return Database{}, err
	}
	if exists {
		db, err := openPooled(ctx, dsn)
		if err != nil {
			return Database{}, err
		}
		var now string
		if err := db.Pool.QueryRow(ctx, schemaFingerprint).Scan(&now); err != nil {
			db.Pool.Close()
			return Database{}, err
		}
		if now == recorded {
			if err := truncateAll(ctx, db); err != nil {
				db.Pool.Close()
				return Database{}, err
			}
			return db, nil
		}
		db.Pool.Close()
		if _, err := admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return Database{}, err
		}
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return Database{}, err
	}
	db, err := openPooled(ctx, dsn)
	if err != nil {
		return Database{}, err
	}
	if _, err := database.Migrate(ctx, db.Pool); err != nil {
		db.Pool.Close()
		return Database{}, fmt.Errorf("migrating: %w", err)
	}
	var sum string
	if err := db.Pool.QueryRow(ctx, schemaFingerprint).Scan(&sum); err == nil {
		_, err = admin.Exec(ctx, "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS "+quoteLiteral(sum))
	}
	if err != nil {
		db.Pool.Close()
		return Database{}, fmt.Errorf("recording the schema's fingerprint: %w", err)
	}
	return db, nil
}

func openPooled(ctx context.Context, dsn string) (Database, error) {
	pool, err := database.Open(ctx, dsn, 20)
	if err != nil {
		return Database{}, err
	}
	return Database{Pool: pool, URL: dsn}, nil
}

// truncateAll empties every table but schema_migrations and restarts the
// sequences they own.
func truncateAll(ctx context.Context, db Database) error {
	var tables []string
	rows, err := db.Pool.Query(ctx, `SELECT quote_ident(tablename) FROM pg_tables
		WHERE schemaname = 'public' AND tablename <> 'schema_migrations'`)
	if err != nil {
		return err
	}
	if tables, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return err
	}
	if len(tables) == 0 {
		return nil
	}
	_, err = db.Pool.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", ")+" RESTART IDENTITY CASCADE")
	return err
}

// prunePool drops the free databases of pools of other migrations (best
// effort: one in use stays until a later run finds it free).
func prunePool(ctx context.Context, admin *pgx.Conn) {
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'orderpipe\_pool\_%' AND datname NOT LIKE $1 || '%'`,
		poolName())
	if err != nil {
		return
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range stale {
		var mine bool
		if admin.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lockKey(name)).Scan(&mine) != nil || !mine {
			continue
		}
		admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") //nolint:errcheck // best effort
		admin.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lockKey(name))                             //nolint:errcheck
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
