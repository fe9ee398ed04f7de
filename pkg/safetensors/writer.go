package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"unicode/utf8"

	"github.com/nvmai/nvmai/pkg/limits"
)

// TensorSpec declares one tensor a Writer will write.
type TensorSpec struct {
	Name  string
	DType DType
	Shape []int64
}

// Tensor is a TensorSpec with its data, for WriteFile.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
}

// Writer streams a safetensors file: NewWriter writes the header, then each
// tensor's bytes follow through WriteTensor, in the order the specs were given.
type Writer struct {
	w     io.Writer
	specs []TensorInfo
	next  int
	err   error // sticky: once a write failed the output is unusable
}

// NewWriter validates specs, lays the tensors out contiguously in the given
// order and writes the header to w.
func NewWriter(w io.Writer, specs []TensorSpec, metadata map[string]string) (*Writer, error) {
	infos, err := layout(specs)
	if err != nil {
		return nil, err
	}
	hdr, err := encodeHeader(infos, metadata)
	if err != nil {
		return nil, err
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return nil, err
	}
	if _, err := w.Write(hdr); err != nil {
		return nil, err
	}
	return &Writer{w: w, specs: infos}, nil
}

// WriteTensor writes the data of the next tensor; name and len(data) must
// match its spec.
func (w *Writer) WriteTensor(name string, data []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.next >= len(w.specs) {
		return fmt.Errorf("safetensors writer: tensor %q written after all %d declared tensors", name, len(w.specs))
	}
	want := w.specs[w.next]
	if name != want.Name {
		return fmt.Errorf("safetensors writer: tensor %q written where %q was declared next", name, want.Name)
	}
	if int64(len(data)) != want.Size() {
		return fmt.Errorf("safetensors writer: tensor %q: got %d bytes, shape %v of %s needs %d", name, len(data), want.Shape, want.DType, want.Size())
	}
	if _, err := w.w.Write(data); err != nil {
		w.err = fmt.Errorf("safetensors writer: tensor %q: %w", name, err)
		return w.err
	}
	w.next++
	return nil
}

// Close reports whether every declared tensor was written. It does not close
// the underlying io.Writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.next != len(w.specs) {
		return fmt.Errorf("safetensors writer: only %d of %d declared tensors were written; %q is missing", w.next, len(w.specs), w.specs[w.next].Name)
	}
	return nil
}

// WriteFile writes tensors, in the given order, to path through a temporary
// file in the same directory renamed into place, so path never holds a
// partial file.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) (err error) {
	specs := make([]TensorSpec, len(tensors))
	for i, t := range tensors {
		specs[i] = TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	w, err := NewWriter(bw, specs, metadata)
	if err != nil {
		return err
	}
	for _, t := range tensors {
		if err := w.WriteTensor(t.Name, t.Data); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// layout checks each spec and assigns contiguous byte ranges in spec order.
func layout(specs []TensorSpec) ([]TensorInfo, error) {
	infos := make([]TensorInfo, len(specs))
	names := make(map[string]bool, len(specs))
	var off int64
	for i, s := range specs {
		if err := checkSpec(s); err != nil {
			return nil, fmt.Errorf("safetensors writer: tensor %q: %w", s.Name, err)
		}
		if names[s.Name] {
			return nil, fmt.Errorf("safetensors writer: tensor %q declared twice", s.Name)
		}
		names[s.Name] = true
		n, _ := numElements(s.Shape)
		size, ok := mulInt64(n, int64(s.DType.Size()))
		if !ok || size > 1<<62-off {
			return nil, fmt.Errorf("safetensors writer: tensor %q: file would exceed 2^62 bytes", s.Name)
		}
		infos[i] = TensorInfo{Name: s.Name, DType: s.DType, Shape: append([]int64{}, s.Shape...), Begin: off, End: off + size}
		off += size
	}
	return infos, nil
}

func checkSpec(s TensorSpec) error {
	if s.Name == metadataKey {
		return errors.New("name is reserved for metadata")
	}
	if !utf8.ValidString(s.Name) {
		return errors.New("name is not valid UTF-8")
	}
	if err := s.DType.check(); err != nil {
		return err
	}
	if len(s.Shape) > limits.MaxTensorRank {
		return fmt.Errorf("rank %d exceeds the supported maximum of %d", len(s.Shape), limits.MaxTensorRank)
	}
	_, err := numElements(s.Shape)
	return err
}

// encodeHeader writes metadata first, then the tensors in layout order, and
// pads with spaces to a multiple of 8 bytes as the reference writer does, so
// the data region starts 8-byte aligned.
func encodeHeader(infos []TensorInfo, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			b.WriteByte(',')
		}
		first = false
	}
	if metadata != nil {
		keys := make([]string, 0, len(metadata))
		for k, v := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, fmt.Errorf("safetensors writer: metadata %q is not valid UTF-8", k)
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		sep()
		writeJSONString(&b, metadataKey)
		b.WriteString(":{")
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(&b, k)
			b.WriteByte(':')
			writeJSONString(&b, metadata[k])
		}
		b.WriteByte('}')
	}
	for _, t := range infos {
		sep()
		writeJSONString(&b, t.Name)
		b.WriteString(`:{"dtype":`)
		writeJSONString(&b, string(t.DType))
		b.WriteString(`,"shape":[`)
		for i, d := range t.Shape {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, d)
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, t.Begin, t.End)
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > limits.SafetensorsHeader {
		return nil, fmt.Errorf("safetensors writer: header would be %d bytes, over the format's ceiling of %d", b.Len(), limits.SafetensorsHeader)
	}
	return b.Bytes(), nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // cannot fail for a string
	b.Write(enc)
}
