package chaos

import "syscall"

// childAttr makes a child die with the suite: a suite killed by a test
// timeout leaves no orderpipe process behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
