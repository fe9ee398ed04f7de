package quant

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzQuantizeRow reads the input as little-endian float32s (zero-padded to
// whole groups, at most 4 groups) and quantizes them at 4 and 8 bits. It
// must never panic; it may refuse only rows the package's rules reject
// (checked independently here), and every accepted row must round-trip
// within roundTripBound.
func FuzzQuantizeRow(f *testing.F) {
	f.Add([]byte{})
	f.Add(floatBytes(0, 1, -1, 0.5))
	f.Add(floatBytes(-7.5, 7.5))
	f.Add(floatBytes(1e-45, -1e-45, 1e-38))
	f.Add(floatBytes(3e38, 1e38))
	f.Add(floatBytes(float32(math.NaN())))
	f.Fuzz(func(t *testing.T, data []byte) {
		groups := min(4, len(data)/(4*GroupSize)+1)
		row := make([]float32, groups*GroupSize)
		for i := range row {
			if 4*i+4 <= len(data) {
				row[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			}
		}
		refuse := mustRefuse(row)
		for _, bits := range []int{4, 8} {
			n := ParamBytes(len(row))
			err := QuantizeRow(make([]byte, RowBytes(len(row), bits)), make([]byte, n), make([]byte, n), row, bits)
			switch {
			case refuse && err == nil:
				t.Fatalf("%d-bit: accepted a row with a non-finite value, a value beyond MaxBF16 or a range over MaxFloat32/2", bits)
			case !refuse && err != nil:
				t.Fatalf("%d-bit: refused a quantizable row: %v", bits, err)
			case !refuse:
				checkRoundTrip(t, row, bits)
			}
		}
	})
}

// mustRefuse applies the refusal rules in float64, where max−min cannot
// overflow, as an independent check of QuantizeRow's.
func mustRefuse(row []float32) bool {
	for g := 0; g < len(row); g += GroupSize {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range row[g : g+GroupSize] {
			x := float64(v)
			if math.IsNaN(x) || math.Abs(x) > float64(MaxBF16) {
				return true
			}
			lo, hi = min(lo, x), max(hi, x)
		}
		if hi-lo > math.MaxFloat32/2 {
			return true
		}
	}
	return false
}

func floatBytes(vs ...float32) []byte {
	out := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}
