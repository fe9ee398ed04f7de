package convert

import (
	"errors"

	"golang.org/x/sys/unix"
)

// exchange swaps the directory entries a and b in one step
// (renameat2 RENAME_EXCHANGE). It returns errExchangeUnsupported where the
// kernel or the filesystem cannot (Linux before 3.15, some network and FUSE
// filesystems), so the caller falls back to two renames.
func exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return errExchangeUnsupported
	}
	return err
}
