//go:build !linux

package chaos

import "syscall"

// childAttr: without Pdeathsig, the suite's cleanup is what stops children.
func childAttr() *syscall.SysProcAttr { return nil }
