package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"orderpipe/pkg/testenv"
)

// The suite's own PostgreSQL: a throwaway cluster (initdb) in a temporary
// folder, its postmaster a process of the suite on a port of its own, run as
// the postgres user when the suite runs as root (initdb refuses root). The
// pipeline's database lives there, so the nemesis can crash it — SIGKILL of
// the postmaster and every backend at once, as a machine losing power would
// (without losing the page cache: fsync is off, which a crash of processes
// does not notice) — and start it again: crash recovery replays the WAL, and
// nothing committed may be missing. A pause stops every backend too.

// pgBinDir is where initdb and postgres are: CHAOS_PG_BIN, else the newest
// Debian-style /usr/lib/postgresql/<v>/bin, else the PATH.
func pgBinDir() (string, error) {
	if d := os.Getenv("CHAOS_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		return "", fmt.Errorf("the chaos suite runs a PostgreSQL of its own and needs initdb (CHAOS_PG_BIN, /usr/lib/postgresql/*/bin or the PATH): %w", err)
	}
	return filepath.Dir(p), nil
}

// startPostgres creates and starts the cluster; it returns the URL of its
// maintenance database.
func (s *Suite) startPostgres(ctx context.Context) (string, error) {
	bin, err := pgBinDir()
	if err != nil {
		return "", err
	}
	// Under /tmp: the postgres user may not traverse the suite's log folder.
	if s.pgDir, err = os.MkdirTemp("", "orderpipe-chaos-pg-"); err != nil {
		return "", err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", fmt.Errorf("running as root, the suite's PostgreSQL runs as the user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(s.pgDir, uid, gid); err != nil {
			return "", err
		}
	}
	data := filepath.Join(s.pgDir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--no-sync", "--no-instructions")
	initdb.SysProcAttr = childAttr()
	initdb.SysProcAttr.Credential = cred
	var out bytes.Buffer
	initdb.Stdout, initdb.Stderr = &out, &out
	if err := initdb.Run(); err != nil {
		return "", fmt.Errorf("initdb %s: %w\n%s", data, err, out.String())
	}
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	u := "postgres://postgres@" + addr + "/postgres?sslmode=disable"
	s.pg = &proc{name: "postgres", bin: filepath.Join(bin, "postgres"), env: os.Environ(), logPath: filepath.Join(s.Dir, "postgres.log"),
		store: true, group: true, cred: cred, stopSignal: syscall.SIGINT, // fast shutdown
		args: []string{"-D", data, "-p", port, "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + s.pgDir,
			"-c", "max_connections=200", "-c", "shared_buffers=64MB", "-c", "fsync=off", "-c", "full_page_writes=off",
			"-c", "log_min_messages=warning", "-c", "log_connections=off"},
		readyFunc: func(ctx context.Context) error { return testenv.PingPostgres(ctx, u) }}
	s.procs = append(s.procs, s.pg)
	if err := s.pg.start(); err != nil {
		return "", err
	}
	if err := s.pg.waitReady(ctx, 60*time.Second); err != nil {
		return "", err
	}
	return u, nil
}

// pgRestart crashes the suite's PostgreSQL (SIGKILL to the postmaster and
// every backend) and starts it again after down.
func (s *Suite) pgRestart(ctx context.Context, down time.Duration) (string, error) {
	at := s.since()
	if err := s.pg.kill(); err != nil {
		return "pg-restart at " + at, err
	}
	time.Sleep(down)
	restart := time.Now()
	restartAt := s.since()
	if err := s.pg.start(); err != nil {
		return "pg-restart at " + at, err
	}
	err := s.pg.waitReady(ctx, 60*time.Second)
	return fmt.Sprintf("SIGKILL postgres (postmaster and backends) at %s, started at %s, recovered and ready in %s",
		at, restartAt, time.Since(restart).Round(10*time.Millisecond)), err
}
