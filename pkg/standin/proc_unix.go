//go:build unix

package standin

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// runAs is the account the server runs under: the current one, or the
// postgres user when the current one is root.
type runAs struct {
	set      bool
	uid, gid uint32
}

func serverUser() (runAs, error) {
	if os.Geteuid() != 0 {
		return runAs{}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return runAs{}, fmt.Errorf("running as root, and PostgreSQL refuses root: no postgres user to run it as (%w)", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return runAs{}, fmt.Errorf("postgres user has ids %s:%s", u.Uid, u.Gid)
	}
	return runAs{set: true, uid: uint32(uid), gid: uint32(gid)}, nil
}

// own hands dir (and anything in it) to the account.
func (a runAs) own(dir string) error {
	if !a.set {
		return nil
	}
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(a.uid), int(a.gid))
	})
}

func (a runAs) apply(cmd *exec.Cmd) {
	if !a.set {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: a.uid, Gid: a.gid}
}

func interrupt(p *os.Process) { p.Signal(syscall.SIGINT) }

// processAlive: signal 0 checks existence; EPERM means it exists under
// another user.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
