package order

import "github.com/jackc/pgx/v5/pgxpool"

// Pool is the store's pool, for this package's own tests: SQL is this
// package's to run, and they check rows no method reads.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// RelayQuery is the relay's read, for the test that explains it.
const RelayQuery = relayQuery

// The statements that change one row by its key, for the test that
// explains them.
const (
	PayOrderSQL    = payOrderSQL
	CancelOrderSQL = cancelOrderSQL
	CloseDueSQL    = closeDueSQL
	MarkAppliedSQL = markAppliedSQL
)
