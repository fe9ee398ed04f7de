package expertcache

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmai/nvmai/pkg/limits"
)

// BlockFile reads pieces of one install file other than the expert layers
// (Qwen3.8's n-gram tables) by the expert cache's own read path: the same
// mode choice (IOBounded probes O_DIRECT, then RWF_DONTCACHE, then
// drop-behind; IOBuffered is plain pread) and the same read loop, so the
// page cache stays out of the footprint for these reads as it does for the
// experts. It knows nothing of what the file holds: callers ask for
// aligned blocks (ReadBlock) or any range (ReadRange, through an aligned
// scratch buffer they own). Safe for concurrent reads.
type BlockFile struct {
	path string
	fd   int
	mode IOMode
	size int64
}

// OpenBlockFile opens path for reads in mode. IOBounded is resolved by
// probing the file as New probes the first expert layer; pass a Cache's
// IOMode to read it exactly as that cache reads its experts. A forced mode
// that does not work here fails with the reason.
func OpenBlockFile(path string, mode IOMode) (*BlockFile, error) {
	scratch := AlignedBuffer(limits.DirectIOAlign)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.Size == 0 {
		// Nothing to probe: an empty file has no block to read.
		return nil, fmt.Errorf("%s is empty", path)
	}
	got, err := chooseMode(path, mode, scratch)
	if err != nil {
		return nil, err
	}
	fd, err := openLayer(path, got)
	if err != nil {
		return nil, err
	}
	return &BlockFile{path: path, fd: fd, mode: got, size: st.Size}, nil
}

// Path is the file's path, for error messages.
func (f *BlockFile) Path() string { return f.path }

// Mode is the read mode in use (never IOBounded).
func (f *BlockFile) Mode() IOMode { return f.mode }

// Size is the file's size when it was opened.
func (f *BlockFile) Size() int64 { return f.size }

// ReadBlock fills buf from byte off. In IODirect mode buf's address, its
// length and off must be multiples of limits.DirectIOAlign (AlignedBuffer
// gives such buffers). A read that ends early (the file shrank) returns
// io.ErrUnexpectedEOF.
func (f *BlockFile) ReadBlock(buf []byte, off int64) error {
	if f.mode == IODirect && !Aligned(buf, off) {
		return fmt.Errorf("%s: direct read of %d bytes at %d into %p is not %d-aligned", f.path, len(buf), off, unsafe.SliceData(buf), limits.DirectIOAlign)
	}
	return readFull(f.fd, f.mode, buf, off)
}

// Span is the aligned range [start, start+length) a read of n bytes at off
// takes in this file's mode: the range itself for IOBuffered, else the
// limits.DirectIOAlign pages holding it (the unit the kernel reads and
// drops anyway, and what O_DIRECT requires).
func (f *BlockFile) Span(off, n int64) (start, length int64) {
	if f.mode == IOBuffered {
		return off, n
	}
	const a = limits.DirectIOAlign
	start = off &^ (a - 1)
	end := (off + n + a - 1) &^ (a - 1)
	return start, end - start
}

// Close closes the file.
func (f *BlockFile) Close() error {
	if f.fd < 0 {
		return nil
	}
	err := unix.Close(f.fd)
	f.fd = -1
	return err
}

// AlignedBuffer is n bytes (rounded up to limits.DirectIOAlign) whose
// address is a multiple of limits.DirectIOAlign, on the Go heap (which
// never moves), for BlockFile reads.
func AlignedBuffer(n int) []byte {
	const a = limits.DirectIOAlign
	n = (n + a - 1) &^ (a - 1)
	b := make([]byte, n+a)
	skip := int((a - uintptr(unsafe.Pointer(unsafe.SliceData(b)))%a) % a)
	return b[skip : skip+n : skip+n]
}

// Aligned reports whether buf's address and length and off are multiples
// of limits.DirectIOAlign, as O_DIRECT needs.
func Aligned(buf []byte, off int64) bool {
	const a = limits.DirectIOAlign
	return uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%a == 0 && len(buf)%a == 0 && off%a == 0
}

// IOMode is the read mode the cache resolved (never IOBounded): what
// OpenBlockFile takes to read another file of the install the same way.
func (c *Cache) IOMode() IOMode { return c.mode }
