// Package layout is the one place that names package stock's Redis keys:
// every key of an activity item (or bucket) under its hash tag. Only
// package stock and its test helper (stocktest) may import it; nothing else
// names a key.
package layout

import "strconv"

// For is the keys of the item (bucket) whose hash tag is tag.
func For(prefix, tag string) Keys {
	return Keys{
		Stock:     prefix + "stock:" + tag,
		Sale:      prefix + "sale:" + tag,
		Journal:   prefix + "resv:" + tag,
		Transfers: prefix + "xfers:" + tag,
		Prefix:    prefix,
		Tag:       tag,
	}
}

// WaitMark is the store's one key outside any item: each write of it is a
// point in the replication stream that a WAIT after it on the same
// connection waits for (stock.Store.AwaitReplicas). Never on Redis Cluster,
// where WAIT is refused.
func WaitMark(prefix string) string { return prefix + "waitmark" }

// IdemKey is the record of one Idempotency-Key of a pay or cancel request,
// outside any item (the key names no order until its request is read): its
// own hash tag, so each record is one slot on Redis Cluster.
func IdemKey(prefix, key string) string { return prefix + "idem:{" + key + "}" }

// Keys are an item's Redis keys.
type Keys struct {
	Stock string // remaining stock
	// Sale: hash of starts, ends (unix ms), cap (max quantity per user)
	// and, bucketed, buckets; written last by a preheat (Arm): without it
	// the bucket does not sell.
	Sale    string
	Journal string // hash: requestId → event JSON, until the worker commits
	// Transfers: hash of the mover's transfers out of this bucket, id →
	// "<target bucket>:<units>", until the target has them.
	Transfers string
	Prefix    string // the store's, before every key
	Tag       string // the item's (bucket's) hash tag
}

// Limit is the user's live-order marker; its value is the owning requestId.
func (k Keys) Limit(userID int64) string {
	return k.Prefix + "limit:" + k.Tag + ":" + strconv.FormatInt(userID, 10)
}

// Req is the dedup record of a requestId: fp, orderNo, remaining, event.
func (k Keys) Req(requestID string) string { return k.Prefix + "req:" + k.Tag + ":" + requestID }

// Order maps an orderNo to its requestId while the dedup record lives.
func (k Keys) Order(orderNo string) string { return k.Prefix + "ord:" + k.Tag + ":" + orderNo }

// Fate guards one reservation's release: "claimed:<orderNo>" or
// "released:<orderNo>". It is keyed by orderNo, not requestId: a requestId
// whose produce failed twice has two aborted reservations, and each must stay
// remembered as released.
func (k Keys) Fate(orderNo string) string { return k.Prefix + "fate:" + k.Tag + ":" + orderNo }

// Given marks that this bucket received transfer id (give.lua in package stock).
func (k Keys) Given(id string) string { return k.Prefix + "xfer:" + k.Tag + ":" + id }

// Hold marks a bucket that just received units from the mover (the mover).
func (k Keys) Hold() string { return k.Prefix + "xhold:" + k.Tag }

// MarkerIndex is the set of users that hold a limit marker in this item
// (bucket): every script that sets or deletes a marker adds or removes its
// user in the same call, so the reconciler reads an item's markers from it
// instead of scanning the keyspace. It may hold stale members (a marker that
// expired, or was deleted by a binary older than the index): a reader checks
// the marker itself. The member IndexComplete says that every marker of the
// item is in it (package stock's IndexComplete).
func (k Keys) MarkerIndex() string { return k.Prefix + "lmk:" + k.Tag }

// LimitPattern matches every limit marker of the item.
func (k Keys) LimitPattern() string { return k.Prefix + "limit:" + k.Tag + ":*" }

// Fence is the bucket's fence: the newest fencing token of the item's
// bucket lock that claimed the bucket.
func (k Keys) Fence() string { return k.Prefix + "bfence:" + k.Tag }
