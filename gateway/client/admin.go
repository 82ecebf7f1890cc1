package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The admin API: every call sends AdminToken. With no ADMIN_TOKEN set on
// the gateway the admin API is off and answers ErrNotFound.

// ActivityUpsert is the body of PUT /admin/v1/activities/{activityId}.
type ActivityUpsert struct {
	Name     string    `json:"name"`
	StartsAt time.Time `json:"startsAt"`
	EndsAt   time.Time `json:"endsAt"`
	// PerUserLimit is the units one user may hold in live orders of an
	// item (and the largest quantity of one order); 0 means 1.
	PerUserLimit int          `json:"perUserLimit,omitempty"`
	Items        []ItemUpsert `json:"items"`
}

// ItemUpsert is one item of an ActivityUpsert.
type ItemUpsert struct {
	ItemID int64 `json:"itemId"`
	Stock  int64 `json:"stock"`
	// Buckets splits the item's Redis stock (0: 1 for a new item, unchanged
	// for an existing one); fixed from the item's first preheat on.
	Buckets int `json:"buckets,omitempty"`
}

// ActivityInfo is an activity's own fields, its items aside, as every
// answer about it begins.
type ActivityInfo struct {
	ActivityID   int64     `json:"activityId"`
	Name         string    `json:"name"`
	StartsAt     time.Time `json:"startsAt"`
	EndsAt       time.Time `json:"endsAt"`
	PerUserLimit int       `json:"perUserLimit"`
}

// Activity is an activity as PUT, preheat and end answer it.
type Activity struct {
	ActivityInfo
	Items []ActivityItem `json:"items"`
}

// ActivityItem is one item's stock in Postgres.
type ActivityItem struct {
	ItemID       int64 `json:"itemId"`
	InitialStock int64 `json:"initialStock"`
	Stock        int64 `json:"stock"`
	Buckets      int   `json:"buckets,omitempty"` // shown when more than 1
	// Loaded is set by Preheat only: this call loaded the item into Redis
	// (false: it was loaded already and keeps its running stock).
	Loaded *bool `json:"loaded,omitempty"`
}

// ActivityStatus is an activity as GET shows it, with Redis beside Postgres.
type ActivityStatus struct {
	ActivityInfo
	Redis string       `json:"redis"` // "ok" or "unavailable"
	Items []ItemStatus `json:"items"`
}

// ItemStatus is one item of an ActivityStatus.
type ItemStatus struct {
	ItemID       int64  `json:"itemId"`
	InitialStock int64  `json:"initialStock"`
	Stock        int64  `json:"stock"`      // Postgres
	RedisStock   *int64 `json:"redisStock"` // nil: not preheated, expired, or Redis unavailable
	Sold         int64  `json:"sold"`       // Σ quantity of UNPAID and PAID orders
	InFlight     *int64 `json:"inFlight"`   // nil: Redis unavailable
	Closed       int64  `json:"closed"`
}

// ActivityPage is one page of ListActivities, newest first.
type ActivityPage struct {
	Activities []ActivityStatus `json:"activities"`
	NextCursor string           `json:"nextCursor,omitempty"` // "" on the last page
}

func activityPath(id int64) string { return "/admin/v1/activities/" + strconv.FormatInt(id, 10) }

// PutActivity creates or updates an activity (ErrStockBelowSold,
// ErrBucketsFixed, ErrItemPreheated, ErrSaleEnded, ErrInvalidRequest).
func (c *Client) PutActivity(ctx context.Context, id int64, a ActivityUpsert) (Activity, error) {
	var out Activity
	_, err := c.call(ctx, http.MethodPut, activityPath(id), c.AdminToken, a, &out)
	return out, err
}

// Preheat loads the activity's stock into Redis (idempotent).
func (c *Client) Preheat(ctx context.Context, id int64) (Activity, error) {
	var out Activity
	_, err := c.call(ctx, http.MethodPost, activityPath(id)+"/preheat", c.AdminToken, nil, &out)
	return out, err
}

// EndActivity is the kill switch: the sale stops taking orders (idempotent).
func (c *Client) EndActivity(ctx context.Context, id int64) (Activity, error) {
	var out Activity
	_, err := c.call(ctx, http.MethodPost, activityPath(id)+"/end", c.AdminToken, nil, &out)
	return out, err
}

// GetActivity is one activity with its items' Postgres and Redis state.
func (c *Client) GetActivity(ctx context.Context, id int64) (ActivityStatus, error) {
	var out ActivityStatus
	_, err := c.call(ctx, http.MethodGet, activityPath(id), c.AdminToken, nil, &out)
	return out, err
}

// ListActivities is one page of activities, newest first: limit 0 is the
// gateway's default (20), cursor "" the first page, else the NextCursor of
// the page before.
func (c *Client) ListActivities(ctx context.Context, limit int, cursor string) (ActivityPage, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/admin/v1/activities"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out ActivityPage
	_, err := c.call(ctx, http.MethodGet, path, c.AdminToken, nil, &out)
	return out, err
}
