//go:build linux

// Package pagecache measures and drops the page-cache residency of files,
// for the footprint test and scripts/internal/footprint: the proof that
// bounded expert reads leave nothing cached behind.
package pagecache

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cached returns how many bytes of path sit in the page cache: mincore over
// a temporary read-only mapping (mapping faults nothing in, so measuring
// does not change the answer).
func Cached(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, err
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mapping %s: %w", path, err)
	}
	defer unix.Munmap(data)
	page := int64(os.Getpagesize())
	vec := make([]byte, (st.Size()+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	var pages int64
	for _, v := range vec {
		pages += int64(v & 1)
	}
	return pages * page, nil
}

// CachedAll sums Cached over paths.
func CachedAll(paths []string) (int64, error) {
	var total int64
	for _, p := range paths {
		n, err := Cached(p)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// Drop writes back and evicts each file's pages, so residency measured
// afterwards comes from reads made since. Pages another process has mapped
// stay (FADV_DONTNEED skips mapped pages).
func Drop(paths []string) error {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		if err == nil {
			err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("dropping %s from the page cache: %w", p, err)
		}
	}
	return nil
}
