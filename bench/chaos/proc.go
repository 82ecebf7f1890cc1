package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one process the suite owns — an orderpipe component, or a Kafka
// broker (`kafka.sh node`, which execs the JVM, so the pid is the broker's):
// started, killed, paused and restarted with the same command, environment
// and log file.
type proc struct {
	name    string
	bin     string
	args    []string
	env     []string
	logPath string
	// clockPath is the process's DEV_CLOCK_OFFSET_FILE (the clock-step
	// fault); empty for processes that are not orderpipe's.
	clockPath string
	// readyFunc reports whether the process serves (nil error).
	readyFunc func(ctx context.Context) error
	// store marks a data store the suite runs (Redis, Postgres): the
	// nemesis's process faults leave it to the store faults.
	store bool
	// group: the process leads a process group (Postgres's postmaster and
	// its backends) and every signal goes to the whole group, as a frozen
	// or crashed machine would stop all of them at once. cred, when set,
	// is the user it runs as; stopSignal replaces SIGTERM for stop.
	group      bool
	killed     []int // the leader's tree at its last SIGKILL
	cred       *syscall.Credential
	stopSignal syscall.Signal

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
	// stopping is set while the suite stops or kills the process; an exit
	// without it is a crash.
	stopping bool
	// paused is set between SIGSTOP and SIGCONT.
	paused  bool
	crashes []string
}

// start runs the process; its output is appended to the log file.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
		}
	}
	f, err := os.OpenFile(p.logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(f, "==== chaos: start #%d of %s at %s\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttr()
	cmd.SysProcAttr.Setpgid = p.group
	cmd.SysProcAttr.Credential = p.cred
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "==== chaos: %s exited at %s: %v\n", p.name, time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		p.mu.Lock()
		if !p.stopping {
			p.crashes = append(p.crashes, fmt.Sprintf("%s exited by itself (%v) at %s, see %s",
				p.name, err, time.Now().Format(time.TimeOnly), p.logPath))
		}
		p.mu.Unlock()
		close(done)
	}()
	p.cmd, p.done, p.stopping, p.paused = cmd, done, false, false
	return nil
}

// takeCrashes returns the unexpected exits since the last call.
func (p *proc) takeCrashes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.crashes
	p.crashes = nil
	return c
}

// startCount is how often the process was started.
func (p *proc) startCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// running reports whether the process is alive.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// isPaused reports whether the process is stopped by SIGSTOP.
func (p *proc) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// pause is SIGSTOP: the process holds its sockets and answers nothing, as a
// process stuck in a long GC pause or a frozen VM would.
func (p *proc) pause() error { return p.setPaused(true) }

// resume is SIGCONT after pause.
func (p *proc) resume() error { return p.setPaused(false) }

func (p *proc) setPaused(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	if err := p.send(p.cmd, sig); err != nil {
		return fmt.Errorf("signalling %s: %w", p.name, err)
	}
	p.paused = on
	return nil
}

// signal sends sig and waits up to wait for the process to exit; on a
// timeout it is killed.
func (p *proc) signal(sig syscall.Signal, wait time.Duration) error {
	p.mu.Lock()
	cmd, done, paused := p.cmd, p.done, p.paused
	p.stopping = true
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := p.send(cmd, sig); err != nil && !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s: %w", p.name, err)
	}
	if paused && sig != syscall.SIGKILL {
		// A stopped process acts on SIGTERM only once continued.
		p.send(cmd, syscall.SIGCONT) //nolint:errcheck
	}
	select {
	case <-done:
		if p.group && sig == syscall.SIGKILL {
			// The leader is gone; so is the rest of its tree (SIGKILL
			// went to every member), but not necessarily gone yet: a
			// backend still alive holds the cluster's shared memory, and
			// a postmaster started meanwhile refuses to run.
			waitGone(cmd.Process.Pid, p.killed, wait)
		}
		return nil
	case <-time.After(wait):
	}
	p.send(cmd, syscall.SIGKILL) //nolint:errcheck
	<-done
	return fmt.Errorf("%s did not exit within %s of %s; killed", p.name, wait, sig)
}

// send signals the process, or its whole group. A stop, a continue and a
// kill go to the leader's whole tree too: Postgres's backends each lead a
// session of their own (setsid), so a signal to the postmaster's group
// reaches none of them, and a crash or a freeze of the machine stops them
// all.
func (p *proc) send(cmd *exec.Cmd, sig syscall.Signal) error {
	if !p.group {
		return cmd.Process.Signal(sig)
	}
	leader := cmd.Process.Pid
	if sig != syscall.SIGKILL && sig != syscall.SIGSTOP && sig != syscall.SIGCONT {
		return syscall.Kill(-leader, sig)
	}
	if sig != syscall.SIGCONT {
		// Stopped first, the leader forks no child between the listing
		// and the signal.
		if err := syscall.Kill(-leader, syscall.SIGSTOP); err != nil {
			return err
		}
	}
	tree := descendants(leader)
	for _, pid := range tree {
		syscall.Kill(pid, sig) //nolint:errcheck // one may have exited meanwhile
	}
	if sig == syscall.SIGKILL {
		p.killed = tree
	}
	return syscall.Kill(-leader, sig)
}

// descendants are the processes below pid (from /proc), children first.
func descendants(pid int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		parent, _ := strconv.Atoi(f[1])
		children[parent] = append(children[parent], child)
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// waitGone waits until no process of group pgid and none of pids is left
// (a zombie counts as gone: it holds nothing).
func waitGone(pgid int, pids []int, within time.Duration) {
	alive := func() bool {
		if syscall.Kill(-pgid, 0) == nil {
			return true
		}
		for _, pid := range pids {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if i := bytes.LastIndexByte(b, ')'); err == nil && i >= 0 && i+2 < len(b) && b[i+2] != 'Z' {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(within)
	for alive() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// kill is SIGKILL: no draining, no cleanup, as a crash.
func (p *proc) kill() error { return p.signal(syscall.SIGKILL, 10*time.Second) }

// stop is SIGTERM: the process drains and exits.
func (p *proc) stop() error {
	sig := syscall.SIGTERM
	if p.stopSignal != 0 {
		sig = p.stopSignal
	}
	return p.signal(sig, 40*time.Second)
}

// waitReady polls readyFunc until it answers, the process exits or within
// passes.
func (p *proc) waitReady(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error
	for {
		if !p.running() {
			// The log's end says why; CI shows only the test's output.
			return fmt.Errorf("%s exited while starting (see %s); its log ends:\n%s", p.name, p.logPath, logTail(p.logPath, 5))
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last = p.readyFunc(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready within %s: %w (see %s)", p.name, within, last, p.logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stepClock steps the process's wall clock to the real one plus by (0 ⇒
// the real clock); it reads the file every 100 ms, and again at a restart.
func (p *proc) stepClock(by time.Duration) error {
	if p.clockPath == "" {
		return nil
	}
	if by == 0 {
		if err := os.Remove(p.clockPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	// Written whole, then renamed: the process never reads half a value.
	tmp := p.clockPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(by.String()+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p.clockPath)
}

// logTail is the last n lines of the log at path (at most its last 4 KiB),
// indented; an unreadable log says so.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	b = b[max(0, len(b)-4096):]
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	return "    " + strings.Join(lines, "\n    ")
}
