package event

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func sample() OrderRequested {
	return OrderRequested{RequestID: "req-1", OrderNo: "a1i1-20261129-00af", UserID: 7, ActivityID: 1, ItemID: 2,
		Quantity: 1, ReservedAt: time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)}
}

func TestDecodeAcceptsWhatTheSchemaAccepts(t *testing.T) {
	t.Parallel()
	canonical := string(sample().Marshal())
	for name, v := range map[string]string{
		"canonical": canonical,
		"spaced":    strings.ReplaceAll(canonical, `,"`, `, "`),
		"keys reordered": `{"orderNo":"o","requestId":"r","userId":1,"activityId":1,"itemId":1,"quantity":100,` +
			`"reservedAt":"2026-11-29T10:00:00+08:00"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := Validate([]byte(v)); err != nil {
				t.Fatalf("the schema refuses %s: %v", v, err)
			}
			e, err := Decode([]byte(v))
			if err != nil {
				t.Fatalf("Decode(%s): %v", v, err)
			}
			if e.RequestID == "" || e.Quantity == 0 || e.ReservedAt.IsZero() {
				t.Fatalf("Decode(%s) = %+v", v, e)
			}
		})
	}
	if _, ok := decodeCanonical([]byte(canonical)); !ok {
		t.Fatal("the gateway's own encoding does not take the fast path")
	}
}

func TestDecodeRefusesWhatTheSchemaRefuses(t *testing.T) {
	t.Parallel()
	canonical := string(sample().Marshal())
	for name, v := range map[string]string{
		"key in another case": strings.Replace(canonical, `"requestId"`, `"RequestID"`, 1),
		"missing reservedAt":  canonical[:strings.Index(canonical, `,"reservedAt"`)] + "}",
		"quantity 101":        strings.Replace(canonical, `"quantity":1`, `"quantity":101`, 1),
		"quantity 0":          strings.Replace(canonical, `"quantity":1`, `"quantity":0`, 1),
		"userId 0":            strings.Replace(canonical, `"userId":7`, `"userId":0`, 1),
		"userId as string":    strings.Replace(canonical, `"userId":7`, `"userId":"7"`, 1),
		"userId fractional":   strings.Replace(canonical, `"userId":7`, `"userId":7.5`, 1),
		"bad requestId":       strings.Replace(canonical, `"req-1"`, `"req 1"`, 1),
		"long orderNo":        strings.Replace(canonical, `"a1i1-20261129-00af"`, `"`+strings.Repeat("o", 97)+`"`, 1),
		"empty orderNo":       strings.Replace(canonical, `"a1i1-20261129-00af"`, `""`, 1),
		"NUL in orderNo":      strings.Replace(canonical, `"a1i1-20261129-00af"`, `"a1i1-\u0000"`, 1),
		"newline in orderNo":  strings.Replace(canonical, `"a1i1-20261129-00af"`, `"a1i1-\n"`, 1),
		"C1 in orderNo":       strings.Replace(canonical, `"a1i1-20261129-00af"`, `"a1i1-\u0085"`, 1),
		"bad time":            strings.Replace(canonical, `2026-11-29T`, `2026-11-29 `, 1),
		"null requestId":      strings.Replace(canonical, `"req-1"`, `null`, 1),
		"array":               "[" + canonical + "]",
	} {
		t.Run(name, func(t *testing.T) {
			if Validate([]byte(v)) == nil {
				t.Fatalf("test case is valid by the schema: %s", v)
			}
			if e, err := Decode([]byte(v)); err == nil {
				t.Fatalf("Decode(%s) = %+v, want an error", v, e)
			}
		})
	}
}

// FuzzDecodeAgreesWithSchema: whatever Decode accepts, the JSON Schema
// accepts too (the fast path never lets through what the schema refuses).
func FuzzDecodeAgreesWithSchema(f *testing.F) {
	f.Add(sample().Marshal())
	f.Add([]byte(`{"requestId":"r","orderNo":"o","userId":1,"activityId":1,"itemId":1,"quantity":1,"reservedAt":"2026-11-29T10:00:00Z"}`))
	f.Add([]byte(`{"RequestId":"r","orderNo":"o","userId":1,"activityId":1,"itemId":1,"quantity":1,"reservedAt":"2026-11-29T10:00:00Z"}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		if _, err := Decode(v); err == nil {
			if err := Validate(v); err != nil {
				t.Fatalf("Decode accepted %q, the schema refuses it: %v", v, err)
			}
		}
	})
}

// TestMarshalIsEncodingJSON: the hand-written encoding is byte for byte
// encoding/json's, which the worker's fast path (and every stored journal
// entry) relies on.
func TestMarshalIsEncodingJSON(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "r-1", "a1i1-20261129-00af", `q"uote`, `back\slash`, "<tag>&", "tab\t", "é", "\u2028", strings.Repeat("x", 64)}
	zones := []*time.Location{time.UTC, time.FixedZone("UTC+8", 8*3600), time.FixedZone("odd", -3*3600-1800)}
	for i := range 2000 {
		e := OrderRequested{RequestID: strs[rng.IntN(len(strs))], OrderNo: strs[rng.IntN(len(strs))],
			UserID: rng.Int64() - rng.Int64(), ActivityID: rng.Int64N(1 << 40), ItemID: rng.Int64N(100), Quantity: rng.IntN(200) - 50,
			ReservedAt: time.Unix(rng.Int64N(1<<34), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])}
		if i%7 == 0 {
			e.ReservedAt = e.ReservedAt.Truncate(time.Second) // no fraction
		}
		want, err := json.Marshal(e)
		if err != nil {
			continue
		}
		if got := e.Marshal(); !bytes.Equal(got, want) {
			t.Fatalf("Marshal(%+v)\n got %s\nwant %s", e, got, want)
		}
	}
}

func FuzzMarshalIsEncodingJSON(f *testing.F) {
	f.Add("r-1", "1-1-abc", int64(7), int64(1), int64(2), 1, int64(1_800_000_000_123_456_789))
	f.Fuzz(func(t *testing.T, rid, ono string, user, act, item int64, q int, nanos int64) {
		e := OrderRequested{RequestID: rid, OrderNo: ono, UserID: user, ActivityID: act, ItemID: item, Quantity: q,
			ReservedAt: time.Unix(0, nanos).UTC()}
		want, err := json.Marshal(e)
		if err != nil {
			return
		}
		if got := e.Marshal(); !bytes.Equal(got, want) {
			t.Fatalf("Marshal(%+v)\n got %s\nwant %s", e, got, want)
		}
	})
}

// TestDecodeIsATolerantReader: a newer gateway's optional field is ignored,
// within orders.requested.v1; only the schema's names, exactly as spelt,
// fill the event.
func TestDecodeIsATolerantReader(t *testing.T) {
	t.Parallel()
	want := sample()
	canonical := string(want.Marshal())
	for name, v := range map[string]string{
		"field added":            strings.Replace(canonical, `}`, `,"giftWrap":{"paper":"red"}}`, 1),
		"field added first":      strings.Replace(canonical, `{`, `{"x":1,`, 1),
		"other case ignored":     strings.Replace(canonical, `{`, `{"RequestID":"someone-else","USERID":99,`, 1),
		"other case ignored too": strings.Replace(canonical, `}`, `,"RequestID":"someone-else","UserId":99}`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			if err := Validate([]byte(v)); err != nil {
				t.Fatalf("the schema refuses %s: %v", v, err)
			}
			got, err := Decode([]byte(v))
			if err != nil {
				t.Fatalf("Decode(%s): %v", v, err)
			}
			if got.RequestID != want.RequestID || got.UserID != want.UserID || got.OrderNo != want.OrderNo ||
				got.Quantity != want.Quantity || !got.ReservedAt.Equal(want.ReservedAt) {
				t.Errorf("Decode(%s) = %+v, want %+v", v, got, want)
			}
		})
	}
}

func TestParseOrderNo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		a, i int64
		b    int
		ok   bool
	}{
		{"1-2-mx5xpfa69571c6b56016", 1, 2, 0, true},
		{"101-7-mx5xpfa69571c6b56016-b3", 101, 7, 3, true},
		{"1-2-x-b64", 0, 0, 0, false},
		{"1-2-x-b0", 0, 0, 0, false},
		{"0-2-x", 0, 0, 0, false},
		{"o1", 0, 0, 0, false},
		{"1-10-abc\x00", 0, 0, 0, false},
		{"1-10-abc\xff", 0, 0, 0, false},
		{"1-10-\xc3\x28", 0, 0, 0, false},
		{"1-10-abc\n", 0, 0, 0, false},
		{"1-2-" + strings.Repeat("x", 93), 0, 0, 0, false},
		{"1-2-" + strings.Repeat("x", 92), 1, 2, 0, true},
	} {
		a, i, b, ok := ParseOrderNo(tc.in)
		if a != tc.a || i != tc.i || b != tc.b || ok != tc.ok {
			t.Errorf("ParseOrderNo(%q) = %d %d %d %v, want %d %d %d %v", tc.in, a, i, b, ok, tc.a, tc.i, tc.b, tc.ok)
		}
	}
}
