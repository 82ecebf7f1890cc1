// Package handle lets ordertest reach the pool behind an order.Store, which
// hands it out to nobody else. Only package order and ordertest import it.
package handle

import "github.com/jackc/pgx/v5/pgxpool"

// Pool is set by package order: the pool of an *order.Store (an any, as
// this package cannot import order).
var Pool func(store any) *pgxpool.Pool
