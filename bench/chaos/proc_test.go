package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogTail: a process that exits while starting is reported with the
// end of its log (CI shows only the test's output), and a missing log says
// so instead of failing the report.
func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker.log")
	var b strings.Builder
	for i := range 10 {
		b.WriteString("line " + string(rune('0'+i)) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := logTail(path, 3), "    line 7\n    line 8\n    line 9"; got != want {
		t.Errorf("logTail = %q, want %q", got, want)
	}
	if got := logTail(filepath.Join(t.TempDir(), "none.log"), 3); !strings.Contains(got, "no such file") {
		t.Errorf("logTail of a missing log = %q, want the error", got)
	}
}
