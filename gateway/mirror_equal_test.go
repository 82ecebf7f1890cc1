package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"orderpipe/gateway/client"
)

// Temporary: each gateway response struct and the gateway/client type that
// replaces it encode the same bytes, for zero and for full values.
func TestMirrorsEncodeAsClientTypes(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)
	at2 := at.Add(90 * time.Minute).In(time.FixedZone("x", 3600))
	yes, no := true, false
	n5, n0 := int64(5), int64(0)
	fullItemStatus := itemStatus{ItemID: 7, InitialStock: 24, Stock: 20, RedisStock: &n5, Sold: 3, InFlight: &n0, Closed: 1}
	fullItemStatusC := client.ItemStatus{ItemID: 7, InitialStock: 24, Stock: 20, RedisStock: &n5, Sold: 3, InFlight: &n0, Closed: 1}
	fullStatus := activityStatus{ID: 1, Name: "sale \"<&>\" ü", StartsAt: at, EndsAt: at2, PerUserLimit: 2, Redis: "ok",
		Items: []itemStatus{fullItemStatus, {ItemID: 8}}}
	fullStatusC := client.ActivityStatus{ActivityID: 1, Name: "sale \"<&>\" ü", StartsAt: at, EndsAt: at2, PerUserLimit: 2, Redis: "ok",
		Items: []client.ItemStatus{fullItemStatusC, {ItemID: 8}}}
	for _, c := range []struct {
		name           string
		mirror, client any
	}{
		{"ActivityZero", activityView{}, client.Activity{}},
		{"ActivityEmptyItems", activityView{Items: []itemView{}}, client.Activity{Items: []client.ActivityItem{}}},
		{"ActivityFull", activityView{ID: 1, Name: "n", StartsAt: at, EndsAt: at2, PerUserLimit: 3,
			Items: []itemView{{ItemID: 7, InitialStock: 24, Stock: 20, Buckets: 4, Loaded: &yes}, {ItemID: 8, Loaded: &no}, {ItemID: 9}}},
			client.Activity{ActivityID: 1, Name: "n", StartsAt: at, EndsAt: at2, PerUserLimit: 3,
				Items: []client.ActivityItem{{ItemID: 7, InitialStock: 24, Stock: 20, Buckets: 4, Loaded: &yes}, {ItemID: 8, Loaded: &no}, {ItemID: 9}}}},
		{"ItemStatusZero", itemStatus{}, client.ItemStatus{}},
		{"ItemStatusFull", fullItemStatus, fullItemStatusC},
		{"ActivityStatusZero", activityStatus{}, client.ActivityStatus{}},
		{"ActivityStatusFull", fullStatus, fullStatusC},
		{"PageZero", activityPage{}, client.ActivityPage{}},
		{"PageEmpty", activityPage{Activities: []activityStatus{}}, client.ActivityPage{Activities: []client.ActivityStatus{}}},
		{"PageFull", activityPage{Activities: []activityStatus{fullStatus, {}}, NextCursor: "MTc2NDQxMDQwMDAwMDAwMDoy"},
			client.ActivityPage{Activities: []client.ActivityStatus{fullStatusC, {}}, NextCursor: "MTc2NDQxMDQwMDAwMDAwMDoy"}},
		{"CancelledZero", orderCancelled{}, client.Cancelled{}},
		{"CancelledFull", orderCancelled{OrderNo: "1234", Status: "CLOSED", Reason: "CANCELLED"},
			client.Cancelled{OrderNo: "1234", Status: "CLOSED", Reason: "CANCELLED"}},
		{"AcceptedZero", orderAccepted{}, client.Placed{}},
		{"Accepted", orderAccepted{RequestID: "r", OrderNo: "1234", Status: "PENDING", Remaining: 9, PayBy: &at},
			client.Placed{RequestID: "r", OrderNo: "1234", Status: "PENDING", Remaining: 9, PayBy: &at, HTTPStatus: 202}},
		{"Replayed", orderAccepted{RequestID: "r", OrderNo: "1234", Status: "PENDING", Remaining: 0, Replayed: true, PayBy: &at2},
			client.Placed{RequestID: "r", OrderNo: "1234", Status: "PENDING", Remaining: 0, Replayed: true, PayBy: &at2, HTTPStatus: 200}},
		{"ReplayedNoPayBy", orderAccepted{RequestID: "r", OrderNo: "1234", Status: "PENDING", Remaining: -1, Replayed: true},
			client.Placed{RequestID: "r", OrderNo: "1234", Status: "PENDING", Remaining: -1, Replayed: true}},
		{"OrderZero", orderView{}, client.Order{}},
		{"OrderPending", orderView{OrderNo: "1234", RequestID: "r", UserID: 1, ActivityID: 2, ItemID: 3, Quantity: 1, Status: "PENDING",
			CreatedAt: at, PayBy: &at2, reservedAt: at},
			client.Order{OrderNo: "1234", RequestID: "r", UserID: 1, ActivityID: 2, ItemID: 3, Quantity: 1, Status: "PENDING", CreatedAt: at, PayBy: &at2}},
		{"OrderFull", orderView{OrderNo: "1234", RequestID: "r", UserID: 1, ActivityID: 2, ItemID: 3, Quantity: 1, Status: "CLOSED",
			Reason: "TIMEOUT", CreatedAt: at, PaidAt: &at, ClosedAt: &at2, PayBy: &at2},
			client.Order{OrderNo: "1234", RequestID: "r", UserID: 1, ActivityID: 2, ItemID: 3, Quantity: 1, Status: "CLOSED",
				Reason: "TIMEOUT", CreatedAt: at, PaidAt: &at, ClosedAt: &at2, PayBy: &at2}},
		{"PaidZero", orderPaid{}, client.Paid{}},
		{"PaidFull", orderPaid{OrderNo: "1234", Status: "PAID"}, client.Paid{OrderNo: "1234", Status: "PAID"}},
		{"ReadyOK", map[string]any{"status": "ok", "checks": map[string]string{"kafka": "ok", "redis": "ok"}},
			client.Readiness{Status: "ok", Checks: map[string]string{"redis": "ok", "kafka": "ok"}}},
		{"ReadyEmpty", map[string]any{"status": "unavailable", "checks": map[string]string{}},
			client.Readiness{Status: "unavailable", Checks: map[string]string{}}},
		{"ErrorZero", errorBody{}, client.ErrorBody{}},
		{"ErrorFull", func() (b errorBody) {
			b.Error.Code, b.Error.Message = "SOLD_OUT", "not enough stock <&> \u2028"
			return
		}(),
			func() (b client.ErrorBody) {
				b.Error.Code, b.Error.Message = "SOLD_OUT", "not enough stock <&> \u2028"
				return
			}()},
		{"ReadyNil", map[string]any{"status": "", "checks": map[string]string(nil)}, client.Readiness{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := json.Marshal(c.mirror)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := json.Marshal(c.client)
			if err != nil {
				t.Fatal(err)
			}
			if string(m) != string(cl) {
				t.Errorf("mirror  %s\nclient  %s", m, cl)
			}
		})
	}
}

// The gateway's structs as they were, kept here while their replacements are
// checked.

type activityView struct {
	ID           int64      `json:"activityId"`
	Name         string     `json:"name"`
	StartsAt     time.Time  `json:"startsAt"`
	EndsAt       time.Time  `json:"endsAt"`
	PerUserLimit int        `json:"perUserLimit"`
	Items        []itemView `json:"items"`
}

type itemView struct {
	ItemID       int64 `json:"itemId"`
	InitialStock int64 `json:"initialStock"`
	Stock        int64 `json:"stock"`
	Buckets      int   `json:"buckets,omitempty"` // shown when > 1
	Loaded       *bool `json:"loaded,omitempty"`
}

type activityStatus struct {
	ID           int64        `json:"activityId"`
	Name         string       `json:"name"`
	StartsAt     time.Time    `json:"startsAt"`
	EndsAt       time.Time    `json:"endsAt"`
	PerUserLimit int          `json:"perUserLimit"`
	Redis        string       `json:"redis"` // "ok" or "unavailable"
	Items        []itemStatus `json:"items"`
}

type itemStatus struct {
	ItemID       int64  `json:"itemId"`
	InitialStock int64  `json:"initialStock"`
	Stock        int64  `json:"stock"`      // Postgres
	RedisStock   *int64 `json:"redisStock"` // nil: not preheated, expired, or Redis unavailable
	Sold         int64  `json:"sold"`       // UNPAID + PAID
	InFlight     *int64 `json:"inFlight"`   // nil: Redis unavailable
	Closed       int64  `json:"closed"`
}

type activityPage struct {
	Activities []activityStatus `json:"activities"`
	NextCursor string           `json:"nextCursor,omitempty"`
}

type orderAccepted struct {
	RequestID string `json:"requestId"`
	OrderNo   string `json:"orderNo"`
	Status    string `json:"status"`
	Remaining int64  `json:"remaining"`
	Replayed  bool   `json:"replayed,omitempty"`
	// PayBy is when the closer may close the order unpaid (payby.go).
	PayBy *time.Time `json:"payBy,omitempty"`
}

type orderView struct {
	OrderNo    string     `json:"orderNo"`
	RequestID  string     `json:"requestId"`
	UserID     int64      `json:"userId"`
	ActivityID int64      `json:"activityId"`
	ItemID     int64      `json:"itemId"`
	Quantity   int        `json:"quantity"`
	Status     string     `json:"status"`
	Reason     string     `json:"reason,omitempty"`
	CreatedAt  time.Time  `json:"createdAt"`
	PaidAt     *time.Time `json:"paidAt,omitempty"`
	ClosedAt   *time.Time `json:"closedAt,omitempty"`
	PayBy      *time.Time `json:"payBy,omitempty"` // PENDING and UNPAID (payby.go)
	reservedAt time.Time  // what payBy counts from
}

type orderPaid struct {
	OrderNo string `json:"orderNo"`
	Status  string `json:"status"`
}

type orderCancelled struct {
	OrderNo string `json:"orderNo"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}
