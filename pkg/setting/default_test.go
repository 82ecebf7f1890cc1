package setting

import (
	"testing"
	"time"
)

// TestDefaultTo: only a value that is zero or less takes the default.
func TestDefaultTo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v, want time.Duration
	}{
		{name: "Zero", v: 0, want: time.Minute},
		{name: "Negative", v: -time.Second, want: time.Minute},
		{name: "Set", v: time.Second, want: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.v
			DefaultTo(&v, time.Minute)
			if v != tc.want {
				t.Errorf("%s defaulted to a minute is %s, want %s", tc.v, v, tc.want)
			}
		})
	}
	n := 0
	DefaultTo(&n, 3)
	if n != 3 {
		t.Errorf("an unset int defaulted to 3 is %d", n)
	}
}
