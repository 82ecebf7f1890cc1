//go:build !linux

package standin

import "os/exec"

// stopWithParent: only Linux can tie a child's life to its parent's.
func stopWithParent(*exec.Cmd) {}
