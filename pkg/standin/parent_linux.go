package standin

import (
	"os/exec"
	"syscall"
)

// stopWithParent asks the kernel to stop the server (fast shutdown) if this
// process dies without closing it, so a killed `orderpipe all` leaves no
// postgres behind.
func stopWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
}
