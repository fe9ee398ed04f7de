//go:build unix

package download

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const oNoFollow = unix.O_NOFOLLOW

// lockFile takes an exclusive advisory lock without waiting. On some network
// filesystems flock silently succeeds for everyone; the inode check after
// locking and the final hash check are what keep a blob correct there.
func lockFile(f *os.File) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return errors.New("another process is downloading this file into the same cache: wait for it to finish")
	}
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	return nil
}

// statfsFree is the space an unprivileged user may still fill on the
// filesystem holding path.
func statfsFree(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
