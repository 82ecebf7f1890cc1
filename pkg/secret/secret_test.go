package secret

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestScrubMasksRegisteredValues(t *testing.T) {
	Register("hunter2-token", "ab", "", "p@ss/word+1")
	for _, tc := range []struct{ in, want string }{
		{"token hunter2-token here", "token " + Mask + " here"},
		{"ab stays: too short to mask", "ab stays: too short to mask"},
		{"url redis://u:p%40ss%2Fword%2B1@h:6379", "url redis://u:" + Mask + "@h:6379"},
		{`quoted "p@ss/word+1"`, `quoted "` + Mask + `"`},
		{"nothing secret", "nothing secret"},
	} {
		if got := Scrub(tc.in); got != tc.want {
			t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestHandlerScrubsEverything(t *testing.T) {
	Register("sekret-value-42")
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil))).With("base", "with sekret-value-42")
	log.Error("msg sekret-value-42",
		"s", "x sekret-value-42",
		"err", fmt.Errorf("dialing: %w", errors.New("auth sekret-value-42 failed")),
		slog.Group("g", "inner", "sekret-value-42"),
		"list", []string{"a", "sekret-value-42"},
		"n", 7)
	out := buf.String()
	if strings.Contains(out, "sekret-value-42") {
		t.Errorf("secret in the log line: %s", out)
	}
	if strings.Count(out, Mask) != 6 || !strings.Contains(out, `"n":7`) {
		t.Errorf("want 6 masks and the rest intact: %s", out)
	}
	var w bytes.Buffer
	fmt.Fprintf(Writer(&w), "report: %s\n", "sekret-value-42")
	if w.String() != "report: "+Mask+"\n" {
		t.Errorf("Writer wrote %q", w.String())
	}
}

func TestURLPassword(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"postgres://u:pw1x@h/db", []string{"pw1x"}},
		{"rediss://default:pw2x@h:6380/0", []string{"pw2x"}},
		{"postgres://u@h/db?password=pw3x", []string{"pw3x"}},
		{"postgres://u:pw4x@h:badport/db", []string{"pw4x"}},
		{"host=h password='pw 5x' dbname=d", []string{"pw 5x"}},
		{"host=h sslpassword=pw6x", []string{"pw6x"}},
		{"postgres://u@h/db", nil},
	} {
		got := URLPassword(tc.in)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("URLPassword(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
