// Package hugemem allocates anonymous memory that Linux may back with
// transparent huge pages (2 MiB on x86-64 and most arm64 kernels).
//
// Decode reads every weight once per token, and with 4 KiB pages a
// 550 KiB expert matrix spans 138 pages: each first touch is a TLB miss and
// a page walk, and the hardware prefetchers stop at every page boundary.
// With 2 MiB pages one expert needs one or two TLB entries. Most
// distributions ship THP in "madvise" mode, where only regions marked
// MADV_HUGEPAGE get huge pages; this package marks them.
package hugemem

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PageSize is the huge page size the alignment targets. A kernel with a
// different size still works; the alignment is then merely generous.
const PageSize = 2 << 20

// Region is one allocation: Bytes is PageSize-aligned and zeroed.
type Region struct {
	Bytes   []byte
	mapping []byte // the whole mapping, as unix.Mmap returned it
}

// Disabled reports whether NVMAI_HUGEPAGES=0 asked for 4 KiB pages (to
// measure what huge pages are worth, or to rule them out).
func Disabled() bool { return os.Getenv("NVMAI_HUGEPAGES") == "0" }

// Alloc maps size bytes of anonymous read-write memory, aligned to PageSize
// and advised MADV_HUGEPAGE. The advice is best effort: a kernel without
// THP ignores or refuses it and the memory is still usable.
func Alloc(size int) (*Region, error) {
	if size <= 0 {
		return &Region{Bytes: []byte{}}, nil
	}
	if Disabled() {
		m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("mapping %d bytes of anonymous memory: %w", size, err)
		}
		return &Region{Bytes: m[:size:size], mapping: m}, nil
	}
	r, err := reserve(size, 0)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of anonymous memory: %w", size, err)
	}
	_ = unix.Madvise(r.Bytes, unix.MADV_HUGEPAGE)
	return r, nil
}

// reserve maps size bytes of anonymous read-write memory plus a page of
// slack, placed so that Bytes[at] falls on a PageSize boundary. The slack
// is never touched, so it costs address space only.
func reserve(size, at int) (*Region, error) {
	m, err := unix.Mmap(-1, 0, size+PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	skip := (PageSize - int((addressOf(m)+uintptr(at))%PageSize)) % PageSize
	return &Region{Bytes: m[skip : skip+size : skip+size], mapping: m}, nil
}

// Free unmaps the region; Bytes must not be used afterwards.
func (r *Region) Free() error {
	if r == nil || r.mapping == nil {
		return nil
	}
	err := unix.Munmap(r.mapping)
	r.mapping, r.Bytes = nil, nil
	return err
}

// ProcessHugeBytes is how much of this process's anonymous memory the
// kernel backs with huge pages now (AnonHugePages in smaps_rollup), or -1
// when the kernel does not say.
func ProcessHugeBytes() int64 {
	data, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "AnonHugePages:"); ok {
			f := strings.Fields(v)
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil && len(f) == 2 && f[1] == "kB" {
				return kb << 10
			}
		}
	}
	return -1
}
