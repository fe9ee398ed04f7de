package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/quant"
)

var allEncodings = []Encoding{F32, BF16, F16, Q4, Q8}

// randomMatrix builds a rows×cols matrix of enc from normal weights through
// pkg/quant (the format's reference), never through this package.
func randomMatrix(t testing.TB, rng *rand.Rand, enc Encoding, rows, cols int) *Matrix {
	t.Helper()
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	m := &Matrix{Rows: rows, Cols: cols, Enc: enc}
	switch enc {
	case F32:
		m.Data = make([]byte, 4*len(w))
		for i, v := range w {
			binary.LittleEndian.PutUint32(m.Data[4*i:], math.Float32bits(v))
		}
	case BF16:
		m.Data = make([]byte, 2*len(w))
		quant.NarrowBF16(m.Data, w)
	case F16:
		m.Data = make([]byte, 2*len(w))
		for i, v := range w {
			binary.LittleEndian.PutUint16(m.Data[2*i:], quant.F32ToF16(v))
		}
	case Q4, Q8:
		var err error
		m.Data, m.Scales, m.Biases, err = quant.Quantize(rows, cols, w, bitsOf(enc))
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	return m
}

func bitsOf(enc Encoding) int {
	if enc == Q4 {
		return 4
	}
	return 8
}

// referenceRow widens or dequantizes row r with pkg/quant.
func referenceRow(t testing.TB, m *Matrix, r int) []float32 {
	t.Helper()
	out := make([]float32, m.Cols)
	c := m.Cols
	switch m.Enc {
	case F32:
		quant.WidenF32(out, m.Data[r*c*4:(r+1)*c*4])
	case BF16:
		quant.WidenBF16(out, m.Data[r*c*2:(r+1)*c*2])
	case F16:
		quant.WidenF16(out, m.Data[r*c*2:(r+1)*c*2])
	case Q4, Q8:
		bits := bitsOf(m.Enc)
		pb := quant.ParamBytes(c)
		err := quant.DequantizeRow(out, m.Data[r*c*bits/8:(r+1)*c*bits/8],
			m.Scales[r*pb:(r+1)*pb], m.Biases[r*pb:(r+1)*pb], bits)
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func randomVector(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func colsFor(enc Encoding) []int {
	if enc == Q4 || enc == Q8 {
		var cols []int
		for g := 1; g <= 20; g++ {
			cols = append(cols, g*GroupSize)
		}
		return cols
	}
	cols := []int{255, 256, 257, 1023, 1280}
	for c := 1; c <= 72; c++ {
		cols = append(cols, c)
	}
	return cols
}

// TestMatVecMatchesFloat64Reference: every encoding, every row tail 1..17
// and column tail, against Σ w·x in float64 over pkg/quant's widened or
// dequantized weights. Tolerance: 1e-5 of Σ|w·x| (float32 accumulation over
// at most ~170 dependent adds stays below 1.1e-5 worst case, ~1e-7 typical).
func TestMatVecMatchesFloat64Reference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, enc := range allEncodings {
		for _, cols := range colsFor(enc) {
			for rows := 1; rows <= 17; rows++ {
				m := randomMatrix(t, rng, enc, rows, cols)
				x := randomVector(rng, cols)
				got := make([]float32, rows)
				MatVec(got, m, x)
				for r := range rows {
					w := referenceRow(t, m, r)
					var want, mag float64
					for c, v := range w {
						want += float64(v) * float64(x[c])
						mag += math.Abs(float64(v) * float64(x[c]))
					}
					if d := math.Abs(float64(got[r]) - want); d > 1e-5*mag {
						t.Fatalf("%v %d×%d row %d: got %g, want %g (diff %g > 1e-5·Σ|w·x| = %g)",
							enc, rows, cols, r, got[r], want, d, 1e-5*mag)
					}
				}
			}
		}
	}
}

func TestMatMulIsBitwiseMatVec(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, enc := range allEncodings {
		for _, shape := range [][2]int{{1, 64}, {17, 128}, {5, 640}, {3, 1280}} {
			m := randomMatrix(t, rng, enc, shape[0], shape[1])
			for n := 1; n <= 5; n++ {
				x := randomVector(rng, n*m.Cols)
				got := make([]float32, n*m.Rows)
				MatMul(got, m, x, n)
				for j := range n {
					want := make([]float32, m.Rows)
					MatVec(want, m, x[j*m.Cols:(j+1)*m.Cols])
					assertBitwise(t, fmt.Sprintf("%v %d×%d MatMul n=%d, input row %d", enc, m.Rows, m.Cols, n, j),
						got[j*m.Rows:(j+1)*m.Rows], want)
				}
			}
		}
	}
}

func assertBitwise(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d = %g (%#08x), want %g (%#08x) bit for bit",
				what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

func TestRowMatchesQuant(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, enc := range allEncodings {
		m := randomMatrix(t, rng, enc, 3, 192)
		got := make([]float32, m.Cols)
		for r := range m.Rows {
			m.Row(got, r)
			assertBitwise(t, fmt.Sprintf("%v Row(%d)", enc, r), got, referenceRow(t, m, r))
		}
	}
}

func TestConversionsMatchQuant(t *testing.T) {
	for h := range 1 << 16 {
		for _, c := range []struct {
			name      string
			got, want float32
		}{
			{"bf16", bf16ToF32(uint16(h)), quant.BF16ToF32(uint16(h))},
			{"f16", f16ToF32(uint16(h)), quant.F16ToF32(uint16(h))},
		} {
			if math.Float32bits(c.got) != math.Float32bits(c.want) {
				t.Fatalf("%s %#04x: got %#08x, want %#08x", c.name, h, math.Float32bits(c.got), math.Float32bits(c.want))
			}
		}
	}
}

// The group size must agree with the one the converter writes: a negative
// constant converted to uint does not compile, so either mismatch fails the build.
const _ = uint(GroupSize-limits.QuantGroupSize) + uint(limits.QuantGroupSize-GroupSize) +
	uint(GroupSize-quant.GroupSize) + uint(quant.GroupSize-GroupSize)

func TestValidate(t *testing.T) {
	ok := func(enc Encoding, rows, cols int) Matrix {
		m := randomMatrix(t, rand.New(rand.NewPCG(1, 1)), enc, rows, cols)
		return *m
	}
	with := func(m Matrix, edit func(*Matrix)) Matrix { edit(&m); return m }
	cases := []struct {
		name    string
		m       Matrix
		wantErr string
	}{
		{"F32 ok", ok(F32, 2, 3), ""},
		{"BF16 ok", ok(BF16, 2, 3), ""},
		{"F16 ok", ok(F16, 2, 3), ""},
		{"Q4 ok", ok(Q4, 2, 128), ""},
		{"Q8 ok", ok(Q8, 2, 128), ""},
		{"F32 short", with(ok(F32, 2, 3), func(m *Matrix) { m.Data = m.Data[:23] }), "Data is 23 bytes, want 24"},
		{"BF16 long", with(ok(BF16, 2, 3), func(m *Matrix) { m.Data = append(m.Data, 0) }), "Data is 13 bytes, want 12"},
		{"Q4 data", with(ok(Q4, 2, 128), func(m *Matrix) { m.Data = m.Data[:127] }), "Data is 127 bytes, want 128"},
		{"Q8 scales", with(ok(Q8, 2, 128), func(m *Matrix) { m.Scales = m.Scales[:6] }), "Scales and Biases are 6 and 8 bytes, want 8"},
		{"Q4 biases", with(ok(Q4, 2, 128), func(m *Matrix) { m.Biases = nil }), "Scales and Biases are 8 and 0 bytes"},
		{"Q4 cols", Matrix{Rows: 1, Cols: 96, Enc: Q4, Data: make([]byte, 48), Scales: make([]byte, 2), Biases: make([]byte, 2)},
			"multiple of the group size"},
		{"F32 with scales", with(ok(F32, 2, 3), func(m *Matrix) { m.Scales = make([]byte, 2) }), "only Q4 and Q8 carry them"},
		{"zero rows", Matrix{Rows: 0, Cols: 64, Enc: Q8}, "both dimensions must be positive"},
		{"negative cols", Matrix{Rows: 1, Cols: -1, Enc: F32}, "both dimensions must be positive"},
		{"huge", Matrix{Rows: math.MaxInt / 2, Cols: 1 << 20, Enc: F32}, "too large"},
		{"unknown encoding", Matrix{Rows: 1, Cols: 1, Enc: 9}, "unknown encoding Encoding(9)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestShapeMismatchPanics(t *testing.T) {
	m := randomMatrix(t, rand.New(rand.NewPCG(1, 2)), Q4, 2, 64)
	for name, call := range map[string]func(){
		"MatVec short x":   func() { MatVec(make([]float32, 2), m, make([]float32, 63)) },
		"MatVec long dst":  func() { MatVec(make([]float32, 3), m, make([]float32, 64)) },
		"MatMul n":         func() { MatMul(make([]float32, 4), m, make([]float32, 64), 2) },
		"Row out of range": func() { m.Row(make([]float32, 64), 2) },
		"Pool.MatVec":      func() { NewPool(1).MatVec(make([]float32, 2), m, make([]float32, 65)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			call()
		}()
	}
}

func TestMatVecDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	m := randomMatrix(t, rng, Q4, 8, 4096)
	x := randomVector(rng, m.Cols)
	dst := make([]float32, m.Rows)
	if a := testing.AllocsPerRun(20, func() { MatVec(dst, m, x) }); a != 0 {
		t.Errorf("MatVec allocates %v times per call, want 0", a)
	}
	p := NewPool(2)
	defer p.Close()
	p.minWork = 0
	p.MatVec(dst, m, x) // sizes the pool's Σx buffer
	if a := testing.AllocsPerRun(20, func() { p.MatVec(dst, m, x) }); a != 0 {
		t.Errorf("Pool.MatVec allocates %v times per call, want 0", a)
	}
}
