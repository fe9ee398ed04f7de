//go:build unix

package install

import (
	"errors"
	"syscall"
)

// processAlive reports whether pid is a running process (signal 0 probes
// without sending; EPERM means it exists but is another user's).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
