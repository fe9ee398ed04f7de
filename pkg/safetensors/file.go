package safetensors

import (
	"fmt"
	"io"
	"os"
)

// File is an open safetensors file whose header has been validated.
type File struct {
	f      *os.File
	path   string
	header *Header
	byName map[string]int
}

// Open opens path and validates its header; see ParseHeader.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("safetensors %s: not a regular file", path)
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
	return &File{f: f, path: path, header: h, byName: byName}, nil
}

// Close closes the underlying file.
func (f *File) Close() error { return f.f.Close() }

// Path is the path the file was opened with.
func (f *File) Path() string { return f.path }

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
