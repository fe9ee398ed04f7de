package promptcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The cache keeps this much of its filesystem free, whatever the budget:
// 5 % of the filesystem's size, at least 1 GiB and at most 10 GiB. The
// floor leaves a small filesystem to the programs that need it (a 20 MiB
// one gets no entries at all); the ceiling keeps a large, nearly full disk
// usable by the cache without reserving hundreds of GB.
const (
	minFreeMargin     = 1 << 30
	maxFreeMargin     = 10 << 30
	freeMarginPercent = 5
)

// FreeMargin is the free space the cache leaves on a filesystem of total
// bytes.
func FreeMargin(total int64) int64 {
	return min(max(total/100*freeMarginPercent, minFreeMargin), maxFreeMargin)
}

// FreeSpaceFunc reports the bytes an unprivileged writer may still use on
// dir's filesystem, and the filesystem's size.
type FreeSpaceFunc func(dir string) (avail, total int64, err error)

// errNoFreeSpaceInfo is what freeSpace says where the platform cannot tell.
var errNoFreeSpaceInfo = errors.New("free space unknown on this platform")

// checkCacheDir refuses a directory the cache must not use: one on a
// virtual filesystem (procfs, sysfs, /dev…), where files are not storage.
// It looks at dir or, when dir does not exist yet, its nearest existing
// parent, so nothing is created there first (a mkdir in cgroupfs makes a
// cgroup).
func checkCacheDir(dir string) error {
	p := filepath.Clean(dir)
	for {
		if _, err := os.Stat(p); err == nil {
			break
		}
		parent := filepath.Dir(p)
		if parent == p {
			return nil
		}
		p = parent
	}
	if fs := virtualFS(p); fs != "" {
		return fmt.Errorf("prompt cache: %s is on %s, a virtual filesystem that stores nothing; give a directory on a disk, such as ~/.cache/nvmai/prompts", dir, fs)
	}
	return nil
}
