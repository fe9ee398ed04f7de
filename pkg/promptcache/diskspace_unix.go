//go:build unix

package promptcache

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

func statfsFreeSpace(dir string) (avail, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	bs := int64(st.Bsize)
	return int64(st.Bavail) * bs, int64(st.Blocks) * bs, nil
}

// ownedByMe says whether this process's user owns the file fi describes.
func ownedByMe(fi os.FileInfo) (owned, known bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false, false
	}
	return int(st.Uid) == os.Geteuid(), true
}
