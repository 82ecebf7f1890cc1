package chaos

import (
	"net/http"
	"testing"

	"orderpipe/pkg/order"
)

// TestCheckEnd: a pay or a cancel is held to the end its answer told (I6),
// and an answer that tells no end is not judged.
func TestCheckEnd(t *testing.T) {
	t.Parallel()
	paid := order.SnapshotOrder{OrderNo: "A", Status: order.StatusPaid, Paid: true}
	closed := order.SnapshotOrder{OrderNo: "A", Status: order.StatusClosed, Closed: true}
	paidThenClosed := order.SnapshotOrder{OrderNo: "A", Status: order.StatusPaid, Paid: true, Closed: true}
	closedThenPaid := order.SnapshotOrder{OrderNo: "A", Status: order.StatusClosed, Paid: true, Closed: true}
	payOK := Op{Kind: opPay, OrderNo: "A", Status: http.StatusOK}
	cancelOK := Op{Kind: opCancel, OrderNo: "A", Status: http.StatusOK}
	payClosed := Op{Kind: opPay, OrderNo: "A", Status: http.StatusConflict, Code: "ORDER_CLOSED"}
	cancelPaid := Op{Kind: opCancel, OrderNo: "A", Status: http.StatusConflict, Code: "ORDER_PAID"}
	for _, c := range []struct {
		name    string
		op      Op
		order   *order.SnapshotOrder
		violate bool
	}{
		{"PaidIsPaid", payOK, &paid, false},
		{"PaidButClosed", payOK, &closed, true},
		{"PaidButAlsoClosed", payOK, &paidThenClosed, true},
		{"PaidButNoOrder", payOK, nil, true},
		{"CancelledIsClosed", cancelOK, &closed, false},
		{"CancelledButPaid", cancelOK, &paid, true},
		{"CancelledButAlsoPaid", cancelOK, &closedThenPaid, true},
		{"PayToldClosedIsClosed", payClosed, &closed, false},
		{"PayToldClosedButPaid", payClosed, &paid, true},
		{"CancelToldPaidIsPaid", cancelPaid, &paid, false},
		{"CancelToldPaidButClosed", cancelPaid, &closed, true},
		{"CancelToldPaidButNoOrder", cancelPaid, nil, true},
		{"UnavailableIsNotJudged", Op{Kind: opPay, OrderNo: "A", Status: http.StatusServiceUnavailable, Code: "UNAVAILABLE"}, nil, false},
		{"NoAnswerIsNotJudged", Op{Kind: opCancel, OrderNo: "A"}, &paid, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			orders := map[string]order.SnapshotOrder{}
			if c.order != nil {
				orders["A"] = *c.order
			}
			var r checkResult
			r.checkEnd("r1", c.op, orders)
			if got := len(r.violations) > 0; got != c.violate {
				t.Errorf("violations %v, want a violation: %v", r.violations, c.violate)
			}
		})
	}
}
