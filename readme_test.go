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

// tableRows are the rows of a settings table in a Markdown file: variable →
// default, as the docs write them (a default in backticks, or "(empty)").
// With a section, only the table under that "## " heading is read.
func tableRows(t *testing.T, file, section string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	table := string(raw)
	if section != "" {
		var ok bool
		if _, table, ok = strings.Cut(table, "\n## "+section+"\n"); !ok {
			t.Fatalf("%s has no %s section", file, section)
		}
		table, _, _ = strings.Cut(table, "\n## ")
	}
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
	return rows
}

// orderpipeEnv runs `orderpipe env` as a user runs it: variable → default.
func orderpipeEnv(t *testing.T) map[string]string {
	t.Helper()
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
	return printed
}

// agreesWithEnv checks a settings table of file against what `orderpipe
// env` printed (the production build: runBinary) and the development
// build's own settings (devSettings: this test binary is built with -tags
// dev, as make test builds it): every row (OTEL_* aside: the SDK's own
// variables) is a variable one of the two declares, with the same default,
// and the production build prints none of the development build's;
// complete also wants a row for every variable either declares, and the
// OTEL_* row.
func agreesWithEnv(t *testing.T, file string, rows, printed map[string]string, complete bool) {
	t.Helper()
	dev := map[string]string{}
	for _, v := range devSettings() {
		dev[v.Name] = v.Default
		if _, ok := printed[v.Name]; ok {
			t.Errorf("the production build's orderpipe env prints %s, a setting of the development build only", v.Name)
		}
	}
	if len(dev) == 0 {
		t.Log("not a -tags dev test binary: rows of the development build's settings are not checked")
	}
	for name, got := range rows {
		def, ok := printed[name]
		if !ok {
			def, ok = dev[name]
		}
		switch {
		case name == "OTEL_*":
		case !ok && len(dev) == 0:
		case !ok:
			t.Errorf("%s has %s, neither orderpipe env prints it nor is it a setting of the development build", file, name)
		case got != def:
			t.Errorf("%s: declared default %q, %s %q", name, def, file, got)
		}
	}
	if !complete {
		return
	}
	for _, names := range []map[string]string{printed, dev} {
		for name := range names {
			if _, ok := rows[name]; !ok {
				t.Errorf("%s is a setting of the binary, %s has no row for it", name, file)
			}
		}
	}
	if _, ok := rows["OTEL_*"]; !ok {
		t.Errorf("%s has no OTEL_* row", file)
	}
}

// TestReadmeAgreesWithOrderpipeEnv holds README to its claims: every
// setting its Configuration table names is one `orderpipe env` prints,
// with the same default.
func TestReadmeAgreesWithOrderpipeEnv(t *testing.T) {
	t.Parallel()
	tableAgreesWithEnv(t, "README.md", "Configuration", 5, false)
}

// TestConfigDocAgreesWithOrderpipeEnv holds docs/config.md to its claim:
// its table is every variable `orderpipe env` prints, with the same
// default, plus the development build's own and OTEL_*.
func TestConfigDocAgreesWithOrderpipeEnv(t *testing.T) {
	t.Parallel()
	tableAgreesWithEnv(t, "docs/config.md", "", 10, true)
}

// tableAgreesWithEnv reads the settings table of file (under section, if
// named), which must have at least atLeast rows, and holds it to what
// `orderpipe env` prints (agreesWithEnv).
func tableAgreesWithEnv(t *testing.T, file, section string, atLeast int, complete bool) {
	t.Helper()
	rows := tableRows(t, file, section)
	if len(rows) < atLeast {
		t.Fatalf("%s: only %d rows found in its settings table (section %q), want at least %d", file, len(rows), section, atLeast)
	}
	agreesWithEnv(t, file, rows, orderpipeEnv(t), complete)
}

// testMakeRunCtrlCEndsClean runs the README's first command as a user at a
// terminal does, pastes the README's "Try it" block and then
// docs/lifecycle.md's into another shell (runReadmeTryIt,
// runLifecycleTryIt), then presses Ctrl-C (SIGINT to the whole foreground
// process group): the pipeline drains and stops, and make reports no failed
// recipe.
func testMakeRunCtrlCEndsClean(t *testing.T, _ engine) {
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
		"HTTP_ADDR="+httpAddr, "KAFKA_EMBEDDED_PORT="+kafkaPort, "TRACES=", "TRACE_STORE_DIR=",
		// Below the lifecycle block's 5 s, for a margin on a busy machine.
		"CLOSE_AFTER=3s")
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
	runReadmeTryIt(t, httpAddr, cmd.Env)
	runLifecycleTryIt(t, httpAddr, cmd.Env)
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

// runReadmeTryIt runs the README's "Try it" block as pasted into bash, with
// the make run at addr for localhost:8080 and env for what its last line,
// `bin/orderpipe-dev locate`, reads: every command of it works, and each
// answer is what the comment above it says — pay answers 200 PAID, or 409
// ORDER_PENDING while the worker has not persisted the order yet (and
// cancel then 200 CANCELLED, or ORDER_PENDING again), as the comments allow.
func runReadmeTryIt(t *testing.T, addr string, env []string) {
	t.Helper()
	statuses, out := runDocBlock(t, "README.md", "\n## Try it\n", addr, env)
	for _, want := range []struct{ statuses, codes string }{
		{"200 200 202 200 200 200 409", `"status":"PAID"|ORDER_PAID|status        PAID`},
		{"200 200 202 200 200 409 200", `ORDER_PENDING|"reason":"CANCELLED"|status        CLOSED`},
		{"200 200 202 200 200 409 409", `ORDER_PENDING|status        `}, // not persisted yet: "wait a moment and repeat"
	} {
		if statuses != want.statuses {
			continue
		}
		for _, code := range strings.Split(want.codes, "|") {
			if !strings.Contains(out, code) {
				t.Errorf("README's Try it block: statuses %s but no %s in its output:\n%s", statuses, code, out)
			}
		}
		if !strings.Contains(out, `"replayed":true`) || !strings.Contains(out, `"remaining":99`) {
			t.Errorf("README's Try it block: no replay, or not the first unit sold:\n%s", out)
		}
		return
	}
	t.Errorf("README's Try it block: statuses %s, want those its comments name:\n%s", statuses, out)
}

// runLifecycleTryIt runs docs/lifecycle.md's Try it block (an unpaid order
// closed, a paid one kept, the buyer's chance given back) against a make
// run whose CLOSE_AFTER is at most the block's 5 s.
func runLifecycleTryIt(t *testing.T, addr string, env []string) {
	t.Helper()
	statuses, out := runDocBlock(t, "docs/lifecycle.md", "\n### Try it (`CLOSE_AFTER=5s make run`)\n", addr, env)
	if statuses != "200 200 200 200 409 200 202" {
		t.Errorf("docs/lifecycle.md's Try it block: statuses %s, want 200 200 200 200 409 200 202:\n%s", statuses, out)
	}
	for _, want := range []string{`"status":"CLOSED","reason":"PAYMENT_TIMEOUT"`, "ORDER_CLOSED", `"status":"PAID","createdAt"`} {
		if !strings.Contains(out, want) {
			t.Errorf("docs/lifecycle.md's Try it block: no %s in its output:\n%s", want, out)
		}
	}
}

// runDocBlock runs the first sh block after heading in file, as pasted into
// bash, with addr for localhost:8080, and returns the HTTP statuses it
// printed (the lines of three digits, space-separated) and its output. The
// block's last command must succeed.
func runDocBlock(t *testing.T, file, heading, addr string, env []string) (statuses, out string) {
	t.Helper()
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), heading)
	_, block, _ := strings.Cut(section, "```sh\n")
	block, _, found := strings.Cut(block, "```")
	if !found || !strings.Contains(block, "localhost:8080") {
		t.Fatalf("%s: no sh block with localhost:8080 under %q", file, strings.TrimSpace(heading))
	}
	cmd := exec.Command("bash", "-c", strings.ReplaceAll(block, "localhost:8080", addr))
	cmd.Env = env
	raw, err := cmd.CombinedOutput()
	out = string(raw)
	if err != nil {
		t.Fatalf("%s's block under %q: %v (its last command failed, or bash could not run it):\n%s", file, strings.TrimSpace(heading), err, out)
	}
	return strings.Join(regexp.MustCompile(`(?m)^\d{3}$`).FindAllString(out, -1), " "), out
}
