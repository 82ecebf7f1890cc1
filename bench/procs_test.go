package bench

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestProcFlag(t *testing.T) {
	t.Parallel()
	var p procFlags
	for _, v := range []string{"redis=12", "postgres=30,31", "postgres=32"} {
		if err := p.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	if got := p.String(); got != "redis=12 postgres=30,31,32" {
		t.Errorf("parsed %q, want redis=12 postgres=30,31,32", got)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"NotAPid", "redis=notapid", `"notapid" is not a process id`},
		{"NoPid", "redis=", `"" is not a process id`},
		{"Zero", "redis=0", `"0" is not a process id`},
		{"Negative", "redis=-4", `"-4" is not a process id`},
		{"EmptyInList", "pg=1,,2", `"" is not a process id`},
		{"NoName", "=12", "want NAME=PID"},
		{"NoEquals", "12", "want NAME=PID"},
		{"SpaceInName", "my redis=12", "want NAME=PID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p procFlags
			err := p.Set(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Set(%q) = %v, want an error saying %s", tc.in, err, tc.want)
			}
			if len(p) != 0 {
				t.Errorf("Set(%q) failed but kept %v", tc.in, p)
			}
		})
	}
	// Through the command line: exit 2 naming the flag, before any run.
	var stdout, stderr strings.Builder
	if code := run(t.Context(), Env{}, []string{"--proc", "redis=notapid"}, &stdout, &stderr); code != ExitError ||
		!strings.Contains(stderr.String(), `invalid value "redis=notapid" for flag -proc`) {
		t.Errorf("--proc redis=notapid: exit %d, stderr %q", code, stderr.String())
	}
}

// TestReadProcTimes reads this test's own process: its CPU time grows while
// it works, and a process that has exited is an error naming its pid.
func TestReadProcTimes(t *testing.T) {
	t.Parallel()
	before, err := readProcTimes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	x := 1.0
	for {
		for range 1_000_000 {
			x = x*1.0000001 + 1e-9
		}
		after, err := readProcTimes(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after.cpu > before.cpu {
			if after.waitOK && after.wait < before.wait {
				t.Errorf("wait went back from %v to %v", before.wait, after.wait)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %v while the test computed (%v)", after.cpu, x)
		}
	}

	gone := mustExitedPID(t)
	if _, err := readProcTimes(gone); err == nil || !strings.Contains(err.Error(), "no such process") {
		t.Errorf("readProcTimes(exited %d) = %v, want no such process", gone, err)
	}
}

// TestProcMeterNotesWhatItCannotRead: a PID gone at the start is left out
// with a note, not a crash; a name with no readable PID has no figure.
func TestProcMeterNotesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	gone := mustExitedPID(t)
	m := startProcMeter([]Proc{{Name: "self", PIDs: []int{os.Getpid(), gone}}, {Name: "gone", PIDs: []int{gone}}})
	got := m.stop(1000)
	if len(got) != 2 {
		t.Fatalf("%d figures, want 2: %+v", len(got), got)
	}
	if got[0].CPUPerRequest < 0 || !strings.Contains(got[0].Note, "no such process at the start") {
		t.Errorf("self with a gone pid: %+v, want a figure and a note", got[0])
	}
	if got[1].CPUPerRequest != -1 || got[1].Note == "" {
		t.Errorf("gone: %+v, want no figure (-1) and a note", got[1])
	}
	h := &Half{Name: "pipeline", Requests: 1000, Procs: got}
	if notes := procNotes(nil, h); len(notes) != 2 || !strings.HasPrefix(notes[1], "pipeline, gone: not counted") {
		t.Errorf("notes %q", notes)
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a    answer
		want bool
	}{
		{answer{status: http.StatusConflict, code: "SOLD_OUT"}, true},
		{answer{status: http.StatusConflict, code: "ALREADY_PURCHASED"}, true},
		{answer{status: http.StatusForbidden, code: "NOT_ON_SALE"}, true},
		{answer{status: http.StatusConflict, code: "ORDER_PENDING"}, false},
		{answer{status: http.StatusConflict, code: "IDEMPOTENCY_KEY_IN_PROGRESS"}, false},
		{answer{status: http.StatusTooManyRequests, code: "RATE_LIMITED"}, false},
		{answer{status: http.StatusAccepted}, false},
		{answer{status: http.StatusServiceUnavailable, code: "UNAVAILABLE"}, false},
		{answer{status: 0}, false},
	} {
		if got := refused(tc.a); got != tc.want {
			t.Errorf("refused(%d %s) = %v, want %v", tc.a.status, tc.a.code, got, tc.want)
		}
	}
}

// mustExitedPID is the pid of a process that has run and been reaped.
func mustExitedPID(tb testing.TB) int {
	tb.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		tb.Fatalf("running true: %v", err)
	}
	return cmd.Process.Pid
}

// TestSoldOutRefusesAStock: --sold-out with a stock or a share of retries
// or repeats is a contradiction, named before anything is touched.
func TestSoldOutRefusesAStock(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--sold-out", "--stock", "5"}, {"--sold-out", "--retry-share", "0.1", "--repeat-share", "0"}} {
		var stdout, stderr strings.Builder
		code := run(t.Context(), Env{}, args, &stdout, &stderr)
		if code != ExitError || !strings.Contains(stderr.String(), "--sold-out sells no stock to new buyers only: drop --") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
