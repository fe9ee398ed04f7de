package safetensors

import (
	"fmt"
	"io"
	"math"
	"os"

	"github.com/nvmai/nvmai/pkg/limits"
)

// File is an open safetensors file whose header has been validated.
type File struct {
	f      *os.File
	path   string
	opened os.FileInfo // fstat at Open: the identity, size and mtime the header was validated against
	header *Header
	byName map[string]int
}

// Open opens path and validates its header; see ParseHeader. Anything but a
// regular file is refused before it can block (see limits.OpenRegular).
func Open(path string) (*File, error) {
	f, st, err := limits.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	h, err := ParseHeader(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	byName := make(map[string]int, len(h.Tensors))
	for i, t := range h.Tensors {
		byName[t.Name] = i
	}
	return &File{f: f, path: path, opened: st, header: h, byName: byName}, nil
}

// Close closes the underlying file.
func (f *File) Close() error { return f.f.Close() }

// Path is the path the file was opened with.
func (f *File) Path() string { return f.path }

// Size is the file's size at Open, which ParseHeader checked is exactly
// where the header's data region ends.
func (f *File) Size() int64 { return f.opened.Size() }

// Stream reads the open file from byte 0 up to its end at the time of each
// read (not its size at Open), so a caller that counts the bytes sees a
// file that grew. It reads the descriptor whose header was validated, never
// whatever the path names now.
func (f *File) Stream() io.Reader { return io.NewSectionReader(f.f, 0, math.MaxInt64) }

// ChangedError reports that a file is not the one Open validated any more.
type ChangedError struct {
	Path string
	What string // what differs, in words
}

func (e *ChangedError) Error() string { return e.Path + ": " + e.What + " since it was opened" }

// CheckUnchanged reports a *ChangedError when the open file's size or
// modification time differs from Open's (it was written in place), or when
// the path now names another file (it was replaced, as a download tool's
// rename does). Call it after the last read: bytes read before a nil result
// are bytes of the file whose header was validated.
func (f *File) CheckUnchanged() error {
	now, err := f.f.Stat()
	if err != nil {
		return fmt.Errorf("safetensors %s: %w", f.path, err)
	}
	switch {
	case now.Size() != f.opened.Size():
		return &ChangedError{f.path, fmt.Sprintf("its size went from %d to %d bytes", f.opened.Size(), now.Size())}
	case !now.ModTime().Equal(f.opened.ModTime()):
		return &ChangedError{f.path, "it was modified"}
	}
	at, err := os.Stat(f.path)
	if err != nil {
		return &ChangedError{f.path, fmt.Sprintf("it can no longer be opened (%v)", err)}
	}
	if !os.SameFile(at, f.opened) {
		return &ChangedError{f.path, "it was replaced by another file"}
	}
	return nil
}

// Header is the validated header. Callers must not modify it.
func (f *File) Header() *Header { return f.header }

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.header.Tensors[i], true
}

// ReadTensor reads the bytes of t, which must be a tensor of this file, into
// dst, whose length must be exactly t.Size().
func (f *File) ReadTensor(t TensorInfo, dst []byte) error {
	if err := f.own(t); err != nil {
		return err
	}
	if int64(len(dst)) != t.Size() {
		return fmt.Errorf("safetensors %s: tensor %q is %d bytes, destination buffer is %d", f.path, t.Name, t.Size(), len(dst))
	}
	if _, err := f.f.ReadAt(dst, f.header.DataOffset+t.Begin); err != nil {
		return fmt.Errorf("safetensors %s: reading tensor %q at byte %d: %w", f.path, t.Name, f.header.DataOffset+t.Begin, err)
	}
	return nil
}

// Section returns a reader over the bytes of t, for streaming large tensors.
// It panics if t is not a tensor of this file, which is a caller bug.
func (f *File) Section(t TensorInfo) *io.SectionReader {
	if err := f.own(t); err != nil {
		panic(err)
	}
	return io.NewSectionReader(f.f, f.header.DataOffset+t.Begin, t.Size())
}

// own refuses a TensorInfo that did not come from this file's header, so a
// mixed-up shard cannot make us read bytes of some other tensor.
func (f *File) own(t TensorInfo) error {
	got, ok := f.Tensor(t.Name)
	if !ok || got.Begin != t.Begin || got.End != t.End {
		return fmt.Errorf("safetensors %s: tensor %q [%d, %d) is not a tensor of this file", f.path, t.Name, t.Begin, t.End)
	}
	return nil
}
