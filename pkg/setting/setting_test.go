package setting

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var testVars = []Var{
	{Name: "ST_ADDR", Default: ":8080", Help: "an address"},
	{Name: "ST_WAIT", Default: "2s", Help: "a duration"},
	{Name: "ST_SIZE", Default: "500", Help: "a count"},
}

// TestLookup: the environment wins, then NAME_FILE's content, then the
// declared default; an undeclared name is a programming error.
func TestLookup(t *testing.T) {
	env := Lookup(testVars)
	t.Setenv("ST_ADDR", ":9")
	file := filepath.Join(t.TempDir(), "wait")
	if err := os.WriteFile(file, []byte("5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ST_WAIT_FILE", file)
	if got := env("ST_ADDR"); got != ":9" {
		t.Errorf("ST_ADDR %q", got)
	}
	if got := env("ST_WAIT"); got != "5s" {
		t.Errorf("ST_WAIT from its file %q", got)
	}
	if got := env("ST_SIZE"); got != "500" {
		t.Errorf("ST_SIZE default %q", got)
	}
	if !Set("ST_WAIT") || Set("ST_SIZE") {
		t.Errorf("Set: ST_WAIT %v, ST_SIZE %v", Set("ST_WAIT"), Set("ST_SIZE"))
	}
	t.Setenv("ST_WAIT", "1s")
	if errs := Check(testVars); len(errs) != 1 || !strings.Contains(errs[0], "ST_WAIT and ST_WAIT_FILE are both set") {
		t.Errorf("Check with both set: %v", errs)
	}
	defer func() {
		if recover() == nil {
			t.Error("an undeclared name did not panic")
		}
	}()
	env("ST_NOPE")
}

// TestReaderCollectsEveryFailure: one start names every bad setting.
func TestReaderCollectsEveryFailure(t *testing.T) {
	values := map[string]string{"D": "-1s", "I": "many", "F": "-2", "B": "yes", "OK": "3s", "L": " a, ,b "}
	r := &Reader{Env: func(n string) string { return values[n] }}
	if d := r.Duration("OK"); d != 3*time.Second {
		t.Errorf("Duration %v", d)
	}
	if l := r.List("L"); strings.Join(l, "|") != "a|b" {
		t.Errorf("List %q", l)
	}
	r.Duration("D")
	r.Int("I")
	r.Float("F")
	r.Bool("B")
	err := r.Err()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"bad configuration:", "D: want a positive Go duration", "I: want a non-negative integer",
		"F: want a non-negative number", "B: want true or false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
}

// TestTypedDefaults: a component's Config takes its defaults from the
// declaration, so a default is written once.
func TestTypedDefaults(t *testing.T) {
	if d := testVars[1].Duration(); d != 2*time.Second {
		t.Errorf("Duration %v", d)
	}
	if n := testVars[2].Int(); n != 500 {
		t.Errorf("Int %d", n)
	}
}
