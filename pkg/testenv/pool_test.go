package testenv

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestCheckOutEmptiesAndRebuilds checks one database out three times, as
// the pool does for successive tests: rows and sequences a test left are
// gone, and a schema a test changed is rebuilt.
func TestCheckOutEmptiesAndRebuilds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, err := url.Parse(DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, base.String())
	if err != nil {
		t.Fatal(err)
	}
	name := UniqueName("orderpipe_pooltest_")
	t.Cleanup(func() {
		admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") //nolint:errcheck
		admin.Close(ctx)
	})
	u := *base
	u.Path = "/" + name
	checkOut := func() Database {
		t.Helper()
		db, err := checkOut(ctx, admin, name, u.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Pool.Close)
		return db
	}
	one := func(db Database, q string) int64 {
		t.Helper()
		var n int64
		if err := db.Pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	const addCompensation = `INSERT INTO redis_compensations (request_id, order_no, user_id, activity_id, item_id, quantity, reason)
		VALUES ('r', gen_random_uuid()::text, 1, 1, 1, 1, 'x') RETURNING id`

	first := checkOut()
	if _, err := first.Pool.Exec(ctx, `INSERT INTO activities (id, name, starts_at, ends_at) VALUES (1, 'a', now(), now() + interval '1h')`); err != nil {
		t.Fatal(err)
	}
	one(first, addCompensation)
	if id := one(first, addCompensation); id != 2 {
		t.Fatalf("the second compensation's id is %d, want 2", id)
	}
	first.Pool.Close()

	second := checkOut()
	if n := one(second, `SELECT count(*) FROM activities`); n != 0 {
		t.Errorf("%d activities left from the previous check-out", n)
	}
	if id := one(second, addCompensation); id != 1 {
		t.Errorf("the first compensation after a check-out has id %d, want 1 (sequences restarted)", id)
	}
	if n := one(second, `SELECT count(*) FROM schema_migrations`); n == 0 {
		t.Error("schema_migrations was emptied")
	}
	if _, err := second.Pool.Exec(ctx, `CREATE TABLE left_behind (x int); ALTER TABLE orders DROP CONSTRAINT orders_status_matches_times`); err != nil {
		t.Fatal(err)
	}
	second.Pool.Close()

	third := checkOut()
	if n := one(third, `SELECT count(*) FROM pg_tables WHERE tablename = 'left_behind'`); n != 0 {
		t.Error("a table a test created is still there")
	}
	if n := one(third, `SELECT count(*) FROM pg_constraint WHERE conname = 'orders_status_matches_times'`); n != 1 {
		t.Error("a constraint a test dropped is still missing")
	}
}

// TestMustDatabaseIsTheTestsOwn: databases held at once are different
// ones, each empty and migrated.
func TestMustDatabaseIsTheTestsOwn(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 3 {
		db := MustDatabase(t)
		if seen[db.URL] {
			t.Errorf("%s was checked out twice at once", db.URL)
		}
		seen[db.URL] = true
		var rows int64
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM activities`).Scan(&rows); err != nil || rows != 0 {
			t.Errorf("activities: %d rows, %v", rows, err)
		}
		if _, err := db.Pool.Exec(context.Background(), `INSERT INTO activities (id, name, starts_at, ends_at)
			VALUES (1, 'a', now(), now() + interval '1h')`); err != nil {
			t.Error(err)
		}
	}
}
