package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvmai/nvmai/pkg/quant"
)

var quantEncodings = []Encoding{Q4, Q8}

// codeStyle picks the weight codes, scales and biases of a raw test matrix,
// reaching what pkg/quant never writes.
type codeStyle int

const (
	codesRandom  codeStyle = iota // uniform codes, normal scales and biases of either sign
	codesMax                      // every code 15 or 255, scales and biases of either sign
	codesZero                     // every code 0
	codesExtreme                  // random codes, scales and biases up to ±2¹⁴
)

// rawQMatrix builds a Q4/Q8 matrix from random bytes rather than through
// quantization: every code and sign of scale appears.
func rawQMatrix(rng *rand.Rand, enc Encoding, rows, cols int, style codeStyle) *Matrix {
	m := &Matrix{Rows: rows, Cols: cols, Enc: enc}
	n := rows * cols
	if enc == Q4 {
		m.Data = make([]byte, n/2)
	} else {
		m.Data = make([]byte, n)
	}
	for i := range m.Data {
		switch style {
		case codesMax:
			m.Data[i] = 0xff
		case codesZero:
		default:
			m.Data[i] = byte(rng.Uint32())
		}
	}
	m.Scales = make([]byte, n/GroupSize*2)
	m.Biases = make([]byte, n/GroupSize*2)
	for i := 0; i < len(m.Scales); i += 2 {
		s, b := float32(rng.NormFloat64()*0.02), float32(rng.NormFloat64()*0.1)
		if style == codesExtreme {
			s, b = float32(rng.NormFloat64()*0x1p14), float32(rng.NormFloat64()*0x1p14)
		}
		binary.LittleEndian.PutUint16(m.Scales[i:], quant.F32ToBF16(s))
		binary.LittleEndian.PutUint16(m.Biases[i:], quant.F32ToBF16(b))
	}
	return m
}

// edgyVector is a random activation with the groups quantization treats
// specially: all zero, every value ±max (codes ±127), one huge value among
// small ones, and large magnitudes.
func edgyVector(rng *rand.Rand, n int) []float32 {
	x := randomVector(rng, n)
	for g := 0; g < n/GroupSize; g++ {
		xg := x[g*GroupSize : (g+1)*GroupSize]
		switch rng.IntN(6) {
		case 0:
			clear(xg)
		case 1:
			for i := range xg {
				xg[i] = float32(1 - 2*rng.IntN(2))
			}
		case 2:
			xg[rng.IntN(GroupSize)] = 1e4
		case 3:
			for i := range xg {
				xg[i] *= 1e3
			}
		}
	}
	return x
}

// TestQIntMatchesFloatReference bounds the integer path against Σ w·x in
// float64 over pkg/quant's dequantized weights.
//
// Tolerance, per group g with scale s, bias b, codes q_i: the integer path
// computes s·dx·Σ q_i·xq_i + b·Σx, the exact product s·Σ q_i·x_i + b·Σx. With
// |x_i − dx·xq_i| ≤ dx/2 (rounding to the nearest code; float32 evaluation of
// 127/max and x·inv adds < 1e-4·dx), the difference is at most
// 0.5001·dx·|s|·Σ_i q_i = 0.5001·dx·Σ_i |w_i − b|. Float32 rounding of the
// combination (≤ 25 dependent roundings) and of pkg/quant's w = s·q + b adds
// at most 1e-5 of the magnitudes involved. The test also reports the typical
// error relative to max|y|.
func TestQIntMatchesFloatReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, enc := range quantEncodings {
		for _, edgy := range []bool{false, true} {
			var sqErr, sqY float64
			for _, cols := range colsFor(enc) {
				for _, rows := range []int{1, 2, 5, 17} {
					m := randomMatrix(t, rng, enc, rows, cols)
					x := randomVector(rng, cols)
					if edgy {
						x = edgyVector(rng, cols)
					}
					got := make([]float32, rows)
					qRowsGeneric(got, m, QuantizeActivation(x), 0, 0, rows)
					want, bound := intPathReference(t, m, x)
					for r := range rows {
						d := math.Abs(float64(got[r]) - want[r])
						if d > bound[r] {
							t.Fatalf("%v %d×%d row %d: got %g, want %g (diff %g > bound %g)", enc, rows, cols, r, got[r], want[r], d, bound[r])
						}
						sqErr += d * d
						sqY += want[r] * want[r]
					}
				}
			}
			// Outlier groups (one 1e4 among N(0,1) values) round their small
			// values to 0: the edgy sweep's relative error is large by design.
			t.Logf("%v, edgy activations %v: RMS error / RMS y = %.2e", enc, edgy, math.Sqrt(sqErr/sqY))
		}
	}
}

// intPathReference returns Σ w·x in float64 per row and the integer path's
// error bound per row (see TestQIntMatchesFloatReference).
func intPathReference(t testing.TB, m *Matrix, x []float32) (want, bound []float64) {
	want, bound = make([]float64, m.Rows), make([]float64, m.Rows)
	for r := range m.Rows {
		w := referenceRow(t, m, r)
		var mag float64
		for g := range m.Cols / GroupSize {
			b := float64(quant.BF16ToF32(binary.LittleEndian.Uint16(m.Biases[(r*m.Cols/GroupSize+g)*2:])))
			var amax, sumW, sumAbsX float64
			for i := g * GroupSize; i < (g+1)*GroupSize; i++ {
				amax = max(amax, math.Abs(float64(x[i])))
			}
			dx := amax / 127
			for i := g * GroupSize; i < (g+1)*GroupSize; i++ {
				want[r] += float64(w[i]) * float64(x[i])
				sumW += math.Abs(float64(w[i]) - b)
				sumAbsX += math.Abs(float64(x[i]))
				mag += math.Abs(float64(w[i])*float64(x[i])) + math.Abs(float64(w[i])-b)*amax
			}
			bound[r] += 0.5001 * dx * sumW
			mag += math.Abs(b) * sumAbsX
		}
		bound[r] += 1e-5 * mag
	}
	return want, bound
}

// TestQImplementationsBitwise runs every SIMD kernel this CPU has against
// qRowsGeneric over rows 1..17 × groups 1..20, the model widths, random and
// extreme codes and activations, and checks that rows outside [lo, hi) are
// left alone. Under -tags purego there is nothing to compare (the reference
// itself is checked by TestQIntMatchesFloatReference).
func TestQImplementationsBitwise(t *testing.T) {
	if len(qImplementations) == 0 {
		t.Skip("no SIMD integer kernel in this build or on this CPU")
	}
	rng := rand.New(rand.NewPCG(33, 34))
	type shape struct{ rows, groups int }
	var shapes []shape
	for rows := 1; rows <= 17; rows++ {
		for groups := 1; groups <= 20; groups++ {
			shapes = append(shapes, shape{rows, groups})
		}
	}
	shapes = append(shapes, shape{3, 32}, shape{2, 64}, shape{5, 47}, shape{1, 128}, shape{33, 8})
	styles := []codeStyle{codesRandom, codesMax, codesZero, codesExtreme}
	for _, impl := range qImplementations {
		t.Run(impl.name, func(t *testing.T) {
			for _, enc := range quantEncodings {
				for i, sh := range shapes {
					style := styles[i%len(styles)]
					m := rawQMatrix(rng, enc, sh.rows, sh.groups*GroupSize, style)
					x := edgyVector(rng, 2*m.Cols)
					qa := new(QActivation)
					qa.Quantize(x, m.Cols)
					for tok := range 2 {
						want := make([]float32, m.Rows)
						qRowsGeneric(want, m, qa, tok, 0, m.Rows)
						got := make([]float32, m.Rows)
						impl.rows(got, m, qa, tok, 0, m.Rows)
						what := fmt.Sprintf("%s %v %d×%d style %d token %d", impl.name, enc, m.Rows, m.Cols, style, tok)
						assertSameFloats(t, what, got, want)
						if m.Rows >= 3 {
							lo, hi := 1, m.Rows-1
							sentinel := float32(-12345)
							for i := range got {
								got[i] = sentinel
							}
							impl.rows(got, m, qa, tok, lo, hi)
							assertSameFloats(t, what+" rows [1, Rows-1)", got[lo:hi], want[lo:hi])
							if got[0] != sentinel || got[hi] != sentinel {
								t.Fatalf("%s: rows outside [%d, %d) were written", what, lo, hi)
							}
						}
					}
				}
			}
		})
	}
}

// assertSameFloats is assertBitwise with every NaN equal (SIMD and scalar
// code may produce different NaN payloads).
func assertSameFloats(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		g, w := got[i], want[i]
		if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			t.Fatalf("%s: element %d = %g (%#08x), want %g (%#08x) bit for bit",
				what, i, g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
}

// withEachQImplementation runs f once per SIMD kernel (made the active one)
// and once with the reference, restoring the choice afterwards.
func withEachQImplementation(t *testing.T, f func(t *testing.T)) {
	saved := qRowsActive
	defer func() { qRowsActive = saved }()
	for _, impl := range append(qImplementations, qImplementation{"generic", qRowsGeneric}) {
		qRowsActive = impl.rows
		t.Run(impl.name, f)
	}
}

// TestFastEntryPoints: MatVecFast is qRowsGeneric's bits through every
// kernel; MatMulFast rows are MatVecFast's (also across row chunks, with a
// matrix larger than matMulChunkBytes); MatVecQ/MatMulQ on a shared
// QActivation agree; float encodings go to MatVec/MatMul unchanged.
func TestFastEntryPoints(t *testing.T) {
	defer func(saved int) { matMulChunkBytes = saved }(matMulChunkBytes)
	matMulChunkBytes = 4 << 10 // several chunks for the larger shapes
	withEachQImplementation(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(35, 36))
		shapes := [][2]int{{1, 64}, {17, 128}, {5, 640}, {3, 1280}, {40, 512}, {9, 2048}}
		for _, enc := range allEncodings {
			for _, shape := range shapes {
				m := randomMatrix(t, rng, enc, shape[0], shape[1])
				for _, n := range []int{1, 2, 5} {
					x := edgyVector(rng, n*m.Cols)
					got := make([]float32, n*m.Rows)
					MatMulFast(got, m, x, n)
					for j := range n {
						xj := x[j*m.Cols : (j+1)*m.Cols]
						want := make([]float32, m.Rows)
						if enc.quantized() {
							qRowsGeneric(want, m, QuantizeActivation(xj), 0, 0, m.Rows)
						} else {
							MatVec(want, m, xj)
						}
						what := fmt.Sprintf("%v %d×%d n=%d token %d", enc, m.Rows, m.Cols, n, j)
						assertSameFloats(t, what+" MatMulFast", got[j*m.Rows:(j+1)*m.Rows], want)
						vec := make([]float32, m.Rows)
						MatVecFast(vec, m, xj)
						assertSameFloats(t, what+" MatVecFast", vec, want)
					}
					if enc.quantized() {
						qa := new(QActivation)
						qa.Quantize(x, m.Cols)
						q := make([]float32, n*m.Rows)
						MatMulQ(q, m, qa)
						assertSameFloats(t, fmt.Sprintf("%v %d×%d n=%d MatMulQ", enc, m.Rows, m.Cols, n), q, got)
					}
				}
			}
		}
	})
}

func TestQShapeMismatchPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 38))
	q4 := randomMatrix(t, rng, Q4, 2, 128)
	f32 := randomMatrix(t, rng, F32, 2, 128)
	qa := QuantizeActivation(randomVector(rng, 128))
	wide := QuantizeActivation(randomVector(rng, 192))
	for name, call := range map[string]func(){
		"MatVecFast short x": func() { MatVecFast(make([]float32, 2), q4, make([]float32, 64)) },
		"MatMulFast n":       func() { MatMulFast(make([]float32, 2), q4, make([]float32, 128), 2) },
		"MatVecQ float":      func() { MatVecQ(make([]float32, 2), f32, qa) },
		"MatVecQ cols":       func() { MatVecQ(make([]float32, 2), q4, wide) },
		"MatVecQ dst":        func() { MatVecQ(make([]float32, 3), q4, qa) },
		"MatMulQ dst":        func() { MatMulQ(make([]float32, 4), q4, qa) },
		"Pool.MatVecQ":       func() { NewPool(2).MatVecQ(make([]float32, 1), q4, qa) },
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

func TestFastDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(39, 40))
	m := randomMatrix(t, rng, Q4, 8, 4096)
	x := randomVector(rng, m.Cols)
	dst := make([]float32, m.Rows)
	MatVecFast(dst, m, x) // fills the scratch pool
	// The race detector makes sync.Pool drop items on purpose.
	if a := testing.AllocsPerRun(20, func() { MatVecFast(dst, m, x) }); a != 0 && !raceEnabled {
		t.Errorf("MatVecFast allocates %v times per call, want 0", a)
	}
	qa := QuantizeActivation(x)
	if a := testing.AllocsPerRun(20, func() { qa.Quantize(x, m.Cols); MatVecQ(dst, m, qa) }); a != 0 {
		t.Errorf("Quantize + MatVecQ allocate %v times per call, want 0", a)
	}
	p := NewPool(2)
	defer p.Close()
	p.minWorkQ = 0
	p.MatVecFast(dst, m, x)
	if a := testing.AllocsPerRun(20, func() { p.MatVecFast(dst, m, x) }); a != 0 {
		t.Errorf("Pool.MatVecFast allocates %v times per call, want 0", a)
	}
}
