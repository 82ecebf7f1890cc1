// Package schemas holds the contract's storage and event schemas: the SQL
// migrations applied in file-name order, and the JSON Schema of every event
// version. It owns no code beyond embedding them.
package schemas

import "embed"

// Migrations are the SQL files, applied in lexical order, each exactly once.
//
//go:embed *.sql
var Migrations embed.FS

// OrdersRequestedV1 is the JSON Schema of the orders.requested.v1 event.
//
//go:embed orders.requested.v1.json
var OrdersRequestedV1 []byte

// OrdersStatusV1 is the JSON Schema of the orders.status.v1 event.
//
//go:embed orders.status.v1.json
var OrdersStatusV1 []byte
