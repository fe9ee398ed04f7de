// Package safetensors reads and writes the safetensors file format: an 8-byte
// little-endian header length N, N bytes of JSON describing each tensor's
// dtype, shape and byte range, then the tensor data. Headers come from
// untrusted downloads, so ParseHeader checks everything the reference
// implementation (huggingface/safetensors, src/tensor.rs) checks before any
// tensor byte is trusted: the length ceiling, UTF-8, duplicate names, that
// every byte range matches its dtype and shape, and that the ranges tile the
// data region exactly.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"
	"unicode/utf8"

	"github.com/nvmai/nvmai/internal/jsonwalk"
	"github.com/nvmai/nvmai/pkg/limits"
)

// metadataKey is the reserved header entry holding string-to-string metadata.
const metadataKey = "__metadata__"

// TensorInfo locates one tensor. Begin and End are byte offsets relative to
// the start of the data region (Header.DataOffset), End exclusive.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
	Begin int64
	End   int64
}

// NumElements is the product of the shape (1 for a scalar). ParseHeader and
// NewWriter refuse shapes whose product overflows, so it is exact for any
// TensorInfo they produced.
func (t TensorInfo) NumElements() int64 {
	n, _ := numElements(t.Shape)
	return n
}

// Size is End-Begin, the tensor's length in bytes.
func (t TensorInfo) Size() int64 { return t.End - t.Begin }

// Header is a parsed and validated safetensors header.
type Header struct {
	Tensors    []TensorInfo      // sorted by Begin: the order the data is laid out in
	Metadata   map[string]string // nil when the file has no __metadata__
	DataOffset int64             // 8+N: where the data region starts in the file
}

// FormatError reports a malformed safetensors file. Offset is the byte of the
// file the problem was found at, or -1 when it concerns the file as a whole.
type FormatError struct {
	File   string
	Offset int64
	Tensor string
	Msg    string
}

func (e *FormatError) Error() string {
	s := "safetensors " + e.File + ": "
	if e.Tensor != "" {
		s += fmt.Sprintf("tensor %q: ", e.Tensor)
	}
	s += e.Msg
	if e.Offset >= 0 {
		s += fmt.Sprintf(" (at byte %d)", e.Offset)
	}
	return s
}

// ParseHeader reads and validates the header of the safetensors file of the
// given size that r reads. name identifies the file in errors.
func ParseHeader(r io.ReaderAt, size int64, name string) (*Header, error) {
	fail := func(off int64, tensor, format string, args ...any) error {
		return &FormatError{File: name, Offset: off, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
	}
	if size < 8 {
		return nil, fail(-1, "", "file is %d bytes, too short for the 8-byte header length; the download is probably truncated", size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fail(0, "", "reading header length: %v", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > limits.SafetensorsHeader {
		return nil, fail(0, "", "header length %d exceeds the format's ceiling of %d bytes; this is not a safetensors file or it is corrupt", n, limits.SafetensorsHeader)
	}
	if int64(n) > size-8 {
		return nil, fail(0, "", "header length %d runs past the end of the %d-byte file; the download is probably truncated", n, size)
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(io.NewSectionReader(r, 8, int64(n)), raw); err != nil {
		return nil, fail(8, "", "reading header: %v", err)
	}
	h := &Header{DataOffset: 8 + int64(n)}
	if err := h.decode(raw, fail); err != nil {
		return nil, err
	}
	if err := h.validateLayout(size-h.DataOffset, fail); err != nil {
		return nil, err
	}
	return h, nil
}

type failFunc func(off int64, tensor, format string, args ...any) error

// decode fills h from the JSON header, refusing anything serde would refuse
// plus duplicate names, which encoding/json would otherwise silently merge.
func (h *Header) decode(raw []byte, fail failFunc) error {
	if !utf8.Valid(raw) {
		return fail(8, "", "header is not valid UTF-8")
	}
	if len(raw) == 0 || raw[0] != '{' {
		return fail(8, "", "header does not start with '{'")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	seen := map[string]bool{}
	err := jsonwalk.Object(dec, func(key string) error {
		entryOff := 8 + dec.InputOffset()
		if seen[key] {
			return fail(entryOff, key, "appears twice in the header")
		}
		seen[key] = true
		if key == metadataKey {
			m, err := decodeMetadata(dec)
			if err != nil {
				return fail(entryOff, "", "__metadata__: %v", jsonwalk.NoEOF(err))
			}
			h.Metadata = m
			return nil
		}
		t, err := decodeTensorInfo(dec, key)
		if err != nil {
			return fail(entryOff, key, "invalid entry: %v", jsonwalk.NoEOF(err))
		}
		h.Tensors = append(h.Tensors, t)
		return nil
	})
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			return err
		}
		return fail(8+dec.InputOffset(), "", "invalid header JSON: %v", jsonwalk.NoEOF(err))
	}
	// Padding after the object must be whitespace only.
	if _, err := dec.Token(); err != io.EOF {
		return fail(8+dec.InputOffset(), "", "unexpected data after the header's JSON object")
	}
	return nil
}

func decodeMetadata(dec *json.Decoder) (map[string]string, error) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	if string(raw) == "null" {
		return nil, nil
	}
	inner := json.NewDecoder(bytes.NewReader(raw))
	m := map[string]string{}
	err := jsonwalk.Object(inner, func(key string) error {
		var v json.RawMessage
		if err := inner.Decode(&v); err != nil {
			return err
		}
		if len(v) == 0 || v[0] != '"' {
			return fmt.Errorf("value of %q is %s, not a string", key, truncate(v))
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return err
		}
		m[key] = s
		return nil
	})
	return m, err
}

func decodeTensorInfo(dec *json.Decoder, name string) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	var offsets []int64
	var haveDType bool
	err := jsonwalk.Object(dec, func(key string) error {
		switch key {
		case "dtype":
			var s string
			if err := dec.Decode(&s); err != nil {
				return fmt.Errorf("dtype: %v", err)
			}
			t.DType, haveDType = DType(s), true
		case "shape":
			if err := dec.Decode(&t.Shape); err != nil {
				return fmt.Errorf("shape: %v", err)
			}
		case "data_offsets":
			if err := dec.Decode(&offsets); err != nil {
				return fmt.Errorf("data_offsets: %v", err)
			}
		default:
			var skip json.RawMessage // serde ignores unknown fields; so do we
			return dec.Decode(&skip)
		}
		return nil
	})
	if err != nil {
		return t, err
	}
	switch {
	case !haveDType:
		return t, errors.New("missing dtype")
	case t.Shape == nil:
		return t, errors.New("missing shape")
	case len(offsets) != 2:
		return t, fmt.Errorf("data_offsets must be [begin, end], found %d numbers", len(offsets))
	}
	t.Begin, t.End = offsets[0], offsets[1]
	return t, nil
}

// validateLayout checks each tensor on its own, then that the sorted ranges
// tile [0, dataLen) with no gap, overlap or trailing byte.
func (h *Header) validateLayout(dataLen int64, fail failFunc) error {
	for _, t := range h.Tensors {
		if err := checkTensor(t, dataLen); err != nil {
			return fail(h.DataOffset+max(0, min(t.Begin, dataLen)), t.Name, "%v", err)
		}
	}
	sort.Slice(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		if a.End != b.End {
			return a.End < b.End
		}
		return a.Name < b.Name
	})
	var next int64
	prev := ""
	for _, t := range h.Tensors {
		switch {
		case t.Begin < next:
			return fail(h.DataOffset+t.Begin, t.Name, "byte range [%d, %d) overlaps tensor %q, which ends at %d", t.Begin, t.End, prev, next)
		case t.Begin > next:
			return fail(h.DataOffset+next, t.Name, "%d unclaimed bytes before this tensor's range [%d, %d)", t.Begin-next, t.Begin, t.End)
		}
		next, prev = t.End, t.Name
	}
	if next != dataLen {
		return fail(h.DataOffset+next, "", "%d trailing bytes after the last tensor; the data region must end exactly at end of file", dataLen-next)
	}
	return nil
}

func checkTensor(t TensorInfo, dataLen int64) error {
	if err := t.DType.check(); err != nil {
		return err
	}
	if len(t.Shape) > limits.MaxTensorRank {
		return fmt.Errorf("rank %d exceeds the supported maximum of %d", len(t.Shape), limits.MaxTensorRank)
	}
	n, err := numElements(t.Shape)
	if err != nil {
		return err
	}
	if t.Begin < 0 || t.End < t.Begin {
		return fmt.Errorf("invalid data_offsets [%d, %d]", t.Begin, t.End)
	}
	if t.End > dataLen {
		return fmt.Errorf("data_offsets [%d, %d] run past the %d-byte data region; the file is truncated or corrupt", t.Begin, t.End, dataLen)
	}
	want, ok := mulInt64(n, int64(t.DType.Size()))
	if !ok {
		return fmt.Errorf("shape %v of %s is too large", t.Shape, t.DType)
	}
	if t.End-t.Begin != want {
		return fmt.Errorf("shape %v of %s needs %d bytes but data_offsets [%d, %d] hold %d", t.Shape, t.DType, want, t.Begin, t.End, t.End-t.Begin)
	}
	return nil
}

// numElements multiplies the dimensions, refusing negative dimensions and any
// product that does not fit an int64.
func numElements(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		var ok bool
		if n, ok = mulInt64(n, d); !ok {
			return 0, fmt.Errorf("shape %v has more elements than fit in 63 bits", shape)
		}
	}
	return n, nil
}

func mulInt64(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

func truncate(b []byte) string {
	const n = 40
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
