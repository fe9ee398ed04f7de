package lecodec

import (
	"bytes"
	"errors"
	"io"
	"math"
	"slices"
	"testing"
)

// Arrays longer than the staging buffer round-trip bitwise, NaN payloads
// and negative zero included, and a cut input reads as truncated.
func TestRoundTripAcrossChunks(t *testing.T) {
	f := make([]float32, Chunk/4+3)
	for i := range f {
		f[i] = math.Float32frombits(uint32(i) * 2654435761)
	}
	u := make([]uint16, Chunk/2+1)
	for i := range u {
		u[i] = uint16(i * 40503)
	}
	q := make([]int8, Chunk+7)
	for i := range q {
		q[i] = int8(i)
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Raw([]byte("HEAD"))
	w.F32s(f)
	w.U16s(u)
	w.I8s(q)
	w.Flush()
	if w.Err != nil || w.N != int64(buf.Len()) || buf.Len() != 4+4*len(f)+2*len(u)+len(q) {
		t.Fatalf("wrote %d bytes (N %d, err %v)", buf.Len(), w.N, w.Err)
	}
	data := buf.Bytes()
	r := NewReader(bytes.NewReader(data[4:]))
	gf, gu, gq := make([]float32, len(f)), make([]uint16, len(u)), make([]int8, len(q))
	r.F32s(gf)
	r.U16s(gu)
	r.I8s(gq)
	if r.Err != nil || r.N != int64(len(data)-4) {
		t.Fatalf("read %d bytes, err %v", r.N, r.Err)
	}
	for i := range f {
		if math.Float32bits(gf[i]) != math.Float32bits(f[i]) {
			t.Fatalf("float %d: %08x, want %08x", i, math.Float32bits(gf[i]), math.Float32bits(f[i]))
		}
	}
	if !slices.Equal(gu, u) || !slices.Equal(gq, q) {
		t.Fatal("uint16 or int8 values differ after a round trip")
	}
	cut := NewReader(bytes.NewReader(data[4 : 4+4*len(f)-1]))
	cut.F32s(gf)
	if !errors.Is(cut.Err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut input: %v, want io.ErrUnexpectedEOF", cut.Err)
	}
}
