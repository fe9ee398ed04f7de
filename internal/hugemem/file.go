package hugemem

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// LoadFile returns the first size bytes of f as one read-only slice whose
// bytes [0, coldEnd) are f's page-cache pages, mapped, and whose remaining
// bytes are a private copy in huge-page-backed anonymous memory.
//
// The split exists for resident.bin: its embedding table (the cold head) is
// read one row per token, so it stays file-backed and costs RAM only where
// touched; everything after it is read whole every token and runs faster on
// huge pages. coldEnd is rounded down to a 4 KiB page; the copy starts on a
// PageSize boundary. With NVMAI_HUGEPAGES=0 the whole file is mapped.
func LoadFile(f *os.File, size, coldEnd int64) (*Region, error) {
	if size <= 0 {
		return &Region{Bytes: []byte{}}, nil
	}
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if st.Size() < size {
		return nil, fmt.Errorf("%s is %d bytes, expected at least %d", f.Name(), st.Size(), size)
	}
	if Disabled() {
		coldEnd = size
	}
	coldEnd = min(max(coldEnd, 0), size) &^ (4096 - 1)
	// Reserve address space, then place the file mapping and the copy in it
	// so that the copy starts on a huge-page boundary.
	r, err := reserve(int(size), int(coldEnd))
	if err != nil {
		return nil, fmt.Errorf("reserving %d bytes of address space for %s: %w", size, f.Name(), err)
	}
	if coldEnd > 0 {
		if err := mapFixed(addressOf(r.Bytes), coldEnd, f); err != nil {
			r.Free()
			return nil, fmt.Errorf("mapping %s: %w", f.Name(), err)
		}
	}
	hot := r.Bytes[coldEnd:]
	if len(hot) == 0 {
		return r, nil
	}
	_ = unix.Madvise(hot, unix.MADV_HUGEPAGE)
	if _, err := io.ReadFull(io.NewSectionReader(f, coldEnd, size-coldEnd), hot); err != nil {
		r.Free()
		return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
	}
	// The copy is what runs; the page cache's copy of those bytes would only
	// double the RAM they take.
	_ = unix.Fadvise(int(f.Fd()), coldEnd, size-coldEnd, unix.FADV_DONTNEED)
	if err := unix.Mprotect(hot, unix.PROT_READ); err != nil {
		r.Free()
		return nil, fmt.Errorf("write-protecting the copy of %s: %w", f.Name(), err)
	}
	return r, nil
}

// mapFixed maps f's first length bytes read-only at addr, replacing the
// reservation's pages there.
func mapFixed(addr uintptr, length int64, f *os.File) error {
	got, _, errno := syscall.Syscall6(syscall.SYS_MMAP, addr, uintptr(length), unix.PROT_READ,
		unix.MAP_SHARED|unix.MAP_FIXED, f.Fd(), 0)
	if errno != 0 {
		return errno
	}
	if got != addr {
		return fmt.Errorf("the kernel placed the mapping at %#x, not %#x", got, addr)
	}
	return nil
}
