package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// FuzzQuantizedMatVec decodes a small Q4/Q8 matrix and an activation from
// the input and checks the integer path end to end:
//
//   - nothing panics, whatever the floats (NaN, ±Inf, subnormals) or codes;
//   - every SIMD kernel gives qRowsGeneric's bits;
//   - every code is within ±127;
//   - with finite, moderate values (all magnitudes in [1e-30, 1e15] or 0, so
//     nothing overflows and no dx is subnormal), each row is within
//     TestQIntMatchesFloatReference's bound of Σ w·x in float64, plus 1e-30
//     for products that underflow.
//
// Layout: byte 0 bit 0 picks Q4 or Q8, bit 1 "small numbers"; byte 1 the
// groups (1–4), byte 2 the rows (1–3); then the activation, the scales and
// biases, then the codes; missing bytes are zero. Raw, the activation is
// little-endian float32s and the scales and biases bfloat16s; with small
// numbers each is one signed byte (x/16, s/512, b/64), so the float64 bound
// is checked on most inputs rather than on the few moderate raw floats.
func FuzzQuantizedMatVec(f *testing.F) {
	f.Add([]byte{0, 0, 0})
	f.Add(append([]byte{1, 3, 2}, floatBytes(1, -2, 0.5, 127, -0.25)...))
	f.Add(append([]byte{0, 1, 1}, floatBytes(float32(math.NaN()), float32(math.Inf(1)), 1e-40, 3e38)...))
	f.Add([]byte{3, 2, 2, 0x7f, 0x81, 0x40, 0xc0, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, x := decodeFuzzProduct(data)
		qa := QuantizeActivation(x)
		for _, q := range qa.q8 {
			if q < -127 {
				t.Fatalf("code %d below -127", q)
			}
		}
		want := make([]float32, m.Rows)
		qRowsGeneric(want, m, qa, 0, 0, m.Rows)
		for _, impl := range qImplementations {
			got := make([]float32, m.Rows)
			impl.rows(got, m, qa, 0, 0, m.Rows)
			assertSameFloats(t, fmt.Sprintf("%s %v %d×%d", impl.name, m.Enc, m.Rows, m.Cols), got, want)
		}
		if !moderate(x, m) {
			return
		}
		ref, bound := intPathReference(t, m, x)
		for r := range m.Rows {
			if d := math.Abs(float64(want[r]) - ref[r]); d > bound[r]+1e-30 {
				t.Fatalf("%v %d×%d row %d: got %g, want %g (diff %g > bound %g)", m.Enc, m.Rows, m.Cols, r, want[r], ref[r], d, bound[r])
			}
		}
	})
}

func decodeFuzzProduct(data []byte) (*Matrix, []float32) {
	next := 0
	take := func() byte {
		next++
		if next-1 < len(data) {
			return data[next-1]
		}
		return 0
	}
	mode, groups, rows := take(), 1+int(take())%4, 1+int(take())%3
	enc, small := Q4, mode&2 != 0
	if mode&1 == 1 {
		enc = Q8
	}
	cols := groups * GroupSize
	x := make([]float32, cols)
	for i := range x {
		if small {
			x[i] = float32(int8(take())) / 16
		} else {
			x[i] = math.Float32frombits(uint32(take()) | uint32(take())<<8 | uint32(take())<<16 | uint32(take())<<24)
		}
	}
	m := &Matrix{Rows: rows, Cols: cols, Enc: enc}
	m.Scales, m.Biases = make([]byte, rows*groups*2), make([]byte, rows*groups*2)
	for i := 0; i < len(m.Scales); i += 2 {
		if small {
			binary.LittleEndian.PutUint16(m.Scales[i:], uint16(math.Float32bits(float32(int8(take()))/512)>>16))
			binary.LittleEndian.PutUint16(m.Biases[i:], uint16(math.Float32bits(float32(int8(take()))/64)>>16))
		} else {
			m.Scales[i], m.Scales[i+1], m.Biases[i], m.Biases[i+1] = take(), take(), take(), take()
		}
	}
	m.Data = make([]byte, rows*cols*bitsOf(enc)/8)
	for i := range m.Data {
		m.Data[i] = take()
	}
	return m, x
}

// moderate reports whether every activation, scale and bias is finite with
// magnitude 0 or in [1e-30, 1e15].
func moderate(x []float32, m *Matrix) bool {
	ok := func(v float64) bool { a := math.Abs(v); return a == 0 || (a >= 1e-30 && a <= 1e15) }
	for _, v := range x {
		if !ok(float64(v)) {
			return false
		}
	}
	for i := 0; i < len(m.Scales); i += 2 {
		if !ok(float64(bf16ToF32(binary.LittleEndian.Uint16(m.Scales[i:])))) ||
			!ok(float64(bf16ToF32(binary.LittleEndian.Uint16(m.Biases[i:])))) {
			return false
		}
	}
	return true
}

func floatBytes(vs ...float32) []byte {
	out := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}
