package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	// readyFunc reports whether the process serves (nil error).
	readyFunc func(ctx context.Context) error

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
	if err := p.cmd.Process.Signal(sig); err != nil {
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
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s: %w", p.name, err)
	}
	if paused && sig != syscall.SIGKILL {
		// A stopped process acts on SIGTERM only once continued.
		cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck
	}
	select {
	case <-done:
		return nil
	case <-time.After(wait):
	}
	cmd.Process.Kill() //nolint:errcheck
	<-done
	return fmt.Errorf("%s did not exit within %s of %s; killed", p.name, wait, sig)
}

// kill is SIGKILL: no draining, no cleanup, as a crash.
func (p *proc) kill() error { return p.signal(syscall.SIGKILL, 10*time.Second) }

// stop is SIGTERM: the process drains and exits.
func (p *proc) stop() error { return p.signal(syscall.SIGTERM, 40*time.Second) }

// waitReady polls readyFunc until it answers, the process exits or within
// passes.
func (p *proc) waitReady(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error
	for {
		if !p.running() {
			return fmt.Errorf("%s exited while starting (see %s)", p.name, p.logPath)
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
