package standin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
	"github.com/jackc/pgx/v5"
)

// errNoBinaries means no local PostgreSQL installation was found.
var errNoBinaries = errors.New("no local PostgreSQL binaries (initdb, postgres)")

// Postgres is a running stand-in PostgreSQL server.
type Postgres struct {
	// URL is the DATABASE_URL of the requested database (which the caller's
	// migration creates: only the maintenance database exists at start).
	URL string
	// Via says what runs it, for the log: a binaries directory or embedded-postgres.
	Via string

	dir       string // removed on Close
	closeFunc func() error
	once      sync.Once
	err       error
}

// Close stops the server and removes its data directory.
func (p *Postgres) Close() error {
	p.once.Do(func() { p.err = p.closeFunc() })
	return p.err
}

// pgOptions are StartPostgres's knobs; tests point them elsewhere.
type pgOptions struct {
	database string
	// binDirs are searched in order for initdb and postgres; nil means
	// PATH and the usual installation directories.
	binDirs []string
	// embedded-postgres: where it downloads from and caches ("" = its defaults).
	repositoryURL, cacheDir string
	embeddedTimeout         time.Duration
}

// StartPostgres starts a throwaway PostgreSQL on a free port of 127.0.0.1,
// with trust authentication for user postgres: the machine's own binaries if
// it has any (they never need the network), else embedded-postgres.
func StartPostgres(ctx context.Context, database string) (*Postgres, error) {
	return startPostgres(ctx, pgOptions{database: database})
}

func startPostgres(ctx context.Context, o pgOptions) (*Postgres, error) {
	if o.database == "" {
		o.database = "orderpipe"
	}
	dirs := o.binDirs
	if dirs == nil {
		dirs = defaultBinDirs()
	}
	if bin, err := findBinaries(dirs); err == nil {
		return startLocal(ctx, bin, o.database)
	}
	p, err := startEmbedded(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("%w; %w", errNoBinaries, err)
	}
	return p, nil
}

// defaultBinDirs: PATH first (Homebrew, Postgres.app, Nix), then where
// Debian/Ubuntu and RHEL-like distributions put versioned servers, newest
// version first.
func defaultBinDirs() []string {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/opt/homebrew/opt/postgresql@*/bin",
		"/usr/local/opt/postgresql@*/bin", "/usr/local/pgsql/bin"} {
		found, _ := filepath.Glob(pattern)
		sort.Slice(found, func(i, j int) bool { return versionOf(found[i]) > versionOf(found[j]) })
		dirs = append(dirs, found...)
	}
	return dirs
}

// versionOf is the major version in a path such as /usr/lib/postgresql/17/bin.
func versionOf(dir string) int {
	for _, part := range strings.FieldsFunc(dir, func(r rune) bool { return r < '0' || r > '9' }) {
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
}

func findBinaries(dirs []string) (string, error) {
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errNoBinaries
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// startLocal runs initdb and postgres from bin in a temporary directory. As
// root it runs them as the postgres user, since PostgreSQL refuses root.
func startLocal(ctx context.Context, bin, database string) (*Postgres, error) {
	as, err := serverUser()
	if err != nil {
		return nil, err
	}
	sweepStale()
	dir, err := os.MkdirTemp("", localDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("creating postgres data directory: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := as.own(dir); err != nil {
		cleanup()
		return nil, err
	}
	data := filepath.Join(dir, "data")
	out := &tailBuffer{max: 8 << 10}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--no-locale", "--no-sync")
	initdb.Stdout, initdb.Stderr = out, out
	as.apply(initdb)
	if err := initdb.Run(); err != nil {
		cleanup()
		return nil, fmt.Errorf("initdb (%s): %w\n%s", bin, err, out)
	}
	port, err := FreePort()
	if err != nil {
		cleanup()
		return nil, err
	}
	// Durability settings are off: the data directory is deleted on Close anyway.
	srv := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	srv.Stdout, srv.Stderr = out, out
	as.apply(srv)
	stopWithParent(srv)
	if err := srv.Start(); err != nil {
		cleanup()
		return nil, fmt.Errorf("starting postgres (%s): %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = srv.Wait(); close(exited) }()
	stop := func() error {
		defer cleanup()
		select {
		case <-exited:
			return nil
		default:
		}
		interrupt(srv.Process) // fast shutdown: roll back, disconnect, exit
		select {
		case <-exited:
			return nil
		case <-time.After(15 * time.Second):
			srv.Process.Kill()
			<-exited
			return errors.New("postgres stand-in did not stop within 15s; killed")
		}
	}

	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := waitReady(ctx, admin, exited, 60*time.Second); err != nil {
		stop()
		if waitErr != nil {
			err = fmt.Errorf("%w (%v)", err, waitErr)
		}
		return nil, fmt.Errorf("postgres from %s: %w\n%s", bin, err, out)
	}
	return &Postgres{URL: dbURL(admin, database), Via: bin, dir: dir, closeFunc: stop}, nil
}

// localDirPrefix names the temporary directories of startLocal.
const localDirPrefix = "orderpipe-pg-"

// sweepStale removes the directories of stand-ins whose process was killed
// before it could clean up: older than a minute (so never one being set up)
// and with no live postmaster.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), localDirPrefix+"*"))
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			first, _, _ := strings.Cut(string(b), "\n")
			if pid, err := strconv.Atoi(strings.TrimSpace(first)); err != nil || processAlive(pid) {
				continue
			}
		}
		os.RemoveAll(d)
	}
}

// waitReady polls until the server accepts a connection, it exits, or the
// deadline passes.
func waitReady(ctx context.Context, dsn string, exited <-chan struct{}, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-exited:
			return errors.New("server exited during start")
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections within %s: %w", within, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func dbURL(admin, database string) string {
	u, _ := url.Parse(admin)
	u.Path = "/" + database
	return u.String()
}

// embeddedVersion is the PostgreSQL embedded-postgres fetches.
const embeddedVersion = embeddedpostgres.V17

// startEmbedded runs PostgreSQL through embedded-postgres, which downloads a
// PostgreSQL build from Maven Central on first use and caches it in
// ~/.embedded-postgres-go. Its Start takes no context, so a slow download is
// bounded here and a late start is stopped again.
func startEmbedded(ctx context.Context, o pgOptions) (*Postgres, error) {
	repo := o.repositoryURL
	if repo == "" {
		repo = "https://repo1.maven.org/maven2"
	}
	hint := fmt.Sprintf("embedded-postgres downloads PostgreSQL %s from %s on first use (cached in ~/.embedded-postgres-go); "+
		"without internet access install PostgreSQL (e.g. apt-get install postgresql) or point DATABASE_URL at a server", embeddedVersion, repo)
	if os.Geteuid() == 0 {
		hint += "; note that PostgreSQL refuses to run as root"
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "orderpipe-embedded-pg-")
	if err != nil {
		return nil, fmt.Errorf("creating postgres runtime directory: %w", err)
	}
	out := &tailBuffer{max: 8 << 10}
	cfg := embeddedpostgres.DefaultConfig().Version(embeddedVersion).Port(uint32(port)).
		Username("postgres").Password("postgres").Database("postgres").
		RuntimePath(dir).BinaryRepositoryURL(repo).Logger(out).StartTimeout(60 * time.Second).
		StartParameters(map[string]string{"listen_addresses": "127.0.0.1", "fsync": "off", "max_connections": "200"})
	if o.cacheDir != "" {
		cfg = cfg.CachePath(o.cacheDir)
	}
	db := embeddedpostgres.NewDatabase(cfg)
	timeout := o.embeddedTimeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	started := make(chan error, 1)
	go func() { started <- db.Start() }()
	select {
	case err = <-started:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(timeout):
		err = fmt.Errorf("no answer within %s", timeout)
	}
	if err != nil {
		go func() { // a start that completes after we gave up must not linger
			if <-started == nil {
				db.Stop()
			}
			os.RemoveAll(dir)
		}()
		return nil, fmt.Errorf("starting embedded-postgres: %w (%s)", err, hint)
	}
	admin := fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return &Postgres{URL: dbURL(admin, o.database), Via: "embedded-postgres " + string(embeddedVersion), dir: dir,
		closeFunc: func() error { defer os.RemoveAll(dir); return db.Stop() }}, nil
}

// tailBuffer keeps the last max bytes written, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = t.b[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
