package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"orderpipe/pkg/testenv"
)

// readmeRows are the configuration table's rows: variable → default, as
// README writes them (a default in backticks, or "(empty)").
func readmeRows(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "\n## Configuration\n")
	if !ok {
		t.Fatal("README has no Configuration section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([A-Z0-9_*]+)` \\| (`[^`]*`|\\(empty\\)|[^|]+) \\|")
	rows := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		def := strings.TrimSpace(m[2])
		switch {
		case def == "(empty)":
			def = ""
		case strings.HasPrefix(def, "`"):
			def = strings.Trim(def, "`")
		}
		rows[m[1]] = def
	}
	if len(rows) < 10 {
		t.Fatalf("README's configuration table: only %d rows found", len(rows))
	}
	return rows
}

// TestReadmeAgreesWithOrderpipeEnv holds README to its claim: `orderpipe
// env`, run as a user runs it, prints every row of the configuration table
// with the same default, except OTEL_* (the SDK's own variables) and the
// development build's own (devSettings: this test binary's, built with
// -tags dev as make test builds it), and nothing else.
func TestReadmeAgreesWithOrderpipeEnv(t *testing.T) {
	res := runBinary(t, cleanEnv(), "env")
	if res.code != 0 {
		t.Fatalf("orderpipe env: %s", res)
	}
	line := regexp.MustCompile(`^(\S+)\s+("(?:[^"\\]|\\.)*")\s`)
	printed := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("orderpipe env printed a line that is not `NAME \"default\" meaning`: %q", l)
		}
		def, err := strconv.Unquote(m[2])
		if err != nil {
			t.Fatalf("%s: default %s: %v", m[1], m[2], err)
		}
		printed[m[1]] = def
	}
	readme := readmeRows(t)
	for name, def := range printed {
		got, ok := readme[name]
		switch {
		case !ok:
			t.Errorf("orderpipe env prints %s, README's table has no row for it", name)
		case got != def:
			t.Errorf("%s: orderpipe env says the default is %q, README %q", name, def, got)
		}
	}
	dev := map[string]bool{}
	for _, v := range devSettings() {
		dev[v.Name] = true
		if _, ok := printed[v.Name]; ok {
			t.Errorf("the production build's orderpipe env prints %s, a setting of the development build only", v.Name)
		}
		if got, ok := readme[v.Name]; !ok || got != v.Default {
			t.Errorf("%s (development builds): README's default %q (row found: %v), declared %q", v.Name, got, ok, v.Default)
		}
	}
	if len(dev) == 0 {
		t.Log("not a -tags dev test binary: README's rows of the development build's settings are not checked")
	}
	for name := range readme {
		if _, ok := printed[name]; !ok && name != "OTEL_*" && !dev[name] && len(dev) > 0 {
			t.Errorf("README's table has %s, orderpipe env does not print it, nor is it a setting of the development build", name)
		}
	}
	if _, ok := readme["OTEL_*"]; !ok {
		t.Error("README's table has no OTEL_* row, yet says orderpipe env leaves it out")
	}
}

// TestMakeRunCtrlCEndsClean runs the README's first command as a user at a
// terminal does and presses Ctrl-C (SIGINT to the whole foreground process
// group): the pipeline drains and stops, and make reports no failed recipe.
func TestMakeRunCtrlCEndsClean(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	db := testenv.MustDatabase(t)
	rdb := testenv.MustRedis(t)
	httpAddr := freeAddr(t)
	_, kafkaPort, _ := strings.Cut(freeAddr(t), ":")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "run")
	cmd.Env = cleanEnv("DATABASE_URL="+db.URL, "REDIS_ADDR="+testenv.RedisAddr(), "REDIS_KEY_PREFIX="+rdb.Prefix,
		"HTTP_ADDR="+httpAddr, "KAFKA_EMBEDDED_PORT="+kafkaPort, "TRACES=", "TRACE_STORE_DIR=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, as a shell gives a foreground job; the
	// signal goes to the group, as the terminal sends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := false
	for !ready && ctx.Err() == nil {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
		if !ready {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !ready {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck // the test has failed already
		cmd.Wait()                                      //nolint:errcheck
		t.Fatalf("make run never became ready:\n%s", out.String())
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	// make itself takes the terminal's SIGINT and ends by it, as any
	// Ctrl-C'd command does (the shell shows status 130, prints nothing);
	// an exit status of its own would be a failed recipe.
	if exit, ok := err.(*exec.ExitError); ok && exit.ExitCode() != -1 {
		t.Errorf("make run ended with exit status %d after Ctrl-C, want no status of its own:\n%s", exit.ExitCode(), out.String())
	} else if err != nil && !ok {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, "make: ***") || !strings.Contains(s, `"msg":"stopped"`) {
		t.Errorf("make run after Ctrl-C: want the pipeline's \"stopped\" and no make error:\n%s", s)
	}
}
