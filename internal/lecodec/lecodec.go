// Package lecodec writes and reads arrays of little-endian numbers through
// a staging buffer, keeping the first error: the one implementation the
// CPU state codec (qwen35) and the GPU engine's snapshot codec share.
// Floats are written as their bits, so a round trip is bitwise exact.
package lecodec

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
)

// Chunk is the staging buffer's size: values are converted to and from
// bytes this many bytes at a time.
const Chunk = 64 << 10

// Writer writes values through a staging buffer of Chunk bytes. After the
// first error it writes nothing more; Flush before reading N and Err.
type Writer struct {
	w   io.Writer
	buf []byte
	N   int64 // bytes the underlying writer took
	Err error // the first write error
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, buf: make([]byte, 0, Chunk)} }

// Raw writes b as it is (a header).
func (cw *Writer) Raw(b []byte) {
	if len(cw.buf)+len(b) > cap(cw.buf) {
		cw.Flush()
	}
	if len(b) > cap(cw.buf) {
		cw.write(b)
		return
	}
	cw.buf = append(cw.buf, b...)
}

// Flush writes what the staging buffer holds.
func (cw *Writer) Flush() {
	cw.write(cw.buf)
	cw.buf = cw.buf[:0]
}

func (cw *Writer) write(b []byte) {
	if cw.Err != nil || len(b) == 0 {
		return
	}
	n, err := cw.w.Write(b)
	cw.N += int64(n)
	cw.Err = err
}

func (cw *Writer) room(n int) []byte {
	if len(cw.buf)+n > cap(cw.buf) {
		cw.Flush()
	}
	return cw.buf
}

// F32s writes x, 4 bytes a value.
func (cw *Writer) F32s(x []float32) {
	for len(x) > 0 {
		k := min(len(x), Chunk/4)
		b := cw.room(4 * k)
		for _, v := range x[:k] {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		cw.buf, x = b, x[k:]
	}
}

// U16s writes x, 2 bytes a value.
func (cw *Writer) U16s(x []uint16) {
	for len(x) > 0 {
		k := min(len(x), Chunk/2)
		b := cw.room(2 * k)
		for _, v := range x[:k] {
			b = binary.LittleEndian.AppendUint16(b, v)
		}
		cw.buf, x = b, x[k:]
	}
}

// I8s writes x, a byte a value.
func (cw *Writer) I8s(x []int8) {
	for len(x) > 0 {
		k := min(len(x), Chunk)
		b := cw.room(k)
		for _, v := range x[:k] {
			b = append(b, byte(v))
		}
		cw.buf, x = b, x[k:]
	}
}

// Reader is Writer's inverse: it fills slices from r. After the first
// error it reads nothing more; a clean EOF inside a slice is
// io.ErrUnexpectedEOF (the input was cut).
type Reader struct {
	r   io.Reader
	buf []byte
	N   int64 // bytes read into slices
	Err error // the first read error
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

func (cr *Reader) fill(n int) []byte {
	if cr.Err != nil {
		return nil
	}
	if cr.buf == nil {
		cr.buf = make([]byte, Chunk)
	}
	if _, err := io.ReadFull(cr.r, cr.buf[:n]); err != nil {
		cr.Err = NoEOF(err)
		return nil
	}
	cr.N += int64(n)
	return cr.buf[:n]
}

// F32s fills x.
func (cr *Reader) F32s(x []float32) {
	for len(x) > 0 && cr.Err == nil {
		k := min(len(x), Chunk/4)
		if b := cr.fill(4 * k); b != nil {
			for i := range x[:k] {
				x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
		}
		x = x[k:]
	}
}

// U16s fills x.
func (cr *Reader) U16s(x []uint16) {
	for len(x) > 0 && cr.Err == nil {
		k := min(len(x), Chunk/2)
		if b := cr.fill(2 * k); b != nil {
			for i := range x[:k] {
				x[i] = binary.LittleEndian.Uint16(b[2*i:])
			}
		}
		x = x[k:]
	}
}

// I8s fills x.
func (cr *Reader) I8s(x []int8) {
	for len(x) > 0 && cr.Err == nil {
		k := min(len(x), Chunk)
		if b := cr.fill(k); b != nil {
			for i := range x[:k] {
				x[i] = int8(b[i])
			}
		}
		x = x[k:]
	}
}

// NoEOF turns a clean EOF inside a structure into io.ErrUnexpectedEOF: an
// input cut anywhere is truncated.
func NoEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
