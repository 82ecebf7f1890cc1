package event

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseOrderNo reads the item an order number names. The gateway's numbers
// are "<activityId>-<itemId>-<unique>", with "-b<bucket>" appended for a
// bucket above 0, so a lookup finds a pending reservation's Redis keys from
// the number alone — and an event whose number names another item than the
// event's own is not one the gateway wrote.
//
// A number that is not even a valid one (ValidOrderNo: a control character,
// a byte that is not UTF-8) names nothing: no order can hold it.
func ParseOrderNo(s string) (activityID, itemID int64, bucket int, ok bool) {
	if !ValidOrderNo(s) {
		return 0, 0, 0, false
	}
	var rest string
	if n, err := fmt.Sscanf(s, "%d-%d-%s", &activityID, &itemID, &rest); err != nil || n != 3 {
		return 0, 0, 0, false
	}
	if activityID <= 0 || itemID <= 0 {
		return 0, 0, 0, false
	}
	i := strings.LastIndex(rest, "-b")
	if i < 0 {
		return activityID, itemID, 0, true
	}
	b, err := strconv.Atoi(rest[i+2:])
	if err != nil || b <= 0 || b >= MaxBuckets {
		return 0, 0, 0, false
	}
	return activityID, itemID, b, true
}

// NamesItself reports whether the event's orderNo names the event's own
// activity, item and bucket, as every number the gateway makes does.
func (e OrderRequested) NamesItself() bool {
	a, i, b, ok := ParseOrderNo(e.OrderNo)
	return ok && a == e.ActivityID && i == e.ItemID && b == e.Bucket
}
