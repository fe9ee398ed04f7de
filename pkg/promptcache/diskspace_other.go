//go:build !unix

package promptcache

import "os"

func statfsFreeSpace(string) (avail, total int64, err error) { return 0, 0, errNoFreeSpaceInfo }

// ownedByMe cannot tell owners apart here, and permission bits mean
// little, so the cache leaves the directory's mode alone.
func ownedByMe(os.FileInfo) (owned, known bool) { return false, false }
