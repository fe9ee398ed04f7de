package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// floatEdgeVector mixes normal values with zeros, negative zeros, tiny
// (subnormal-producing) and huge values, so a reordered or fused operation
// shows up as a different bit.
func floatEdgeVector(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		switch rng.IntN(12) {
		case 0:
			x[i] = 0
		case 1:
			x[i] = float32(math.Copysign(0, -1))
		case 2:
			x[i] = float32(rng.NormFloat64() * 1e-38)
		case 3:
			x[i] = float32(rng.NormFloat64() * 1e30)
		default:
			x[i] = float32(rng.NormFloat64())
		}
	}
	return x
}

// floatVecShapes covers the assembly's 64- and 16-column blocks and their
// mixes, and widths the reference alone handles.
var floatVecShapes = [][2]int{{1, 64}, {3, 64}, {128, 128}, {7, 192}, {5, 256}, {16, 16}, {32, 32}, {3, 48}, {2, 80}, {5, 112}, {4, 100}, {2, 1}}

// TestDeltaRuleEdgeValuesBitwise: DeltaRule gives the two-pass oracle's
// bits for edge-valued inputs (zeros, signed zeros, huge and tiny values),
// over the assembly's 64- and 16-column blocks, their mixes and widths the
// reference alone handles.
func TestDeltaRuleEdgeValuesBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, sh := range floatVecShapes {
		rows, cols := sh[0], sh[1]
		t.Run(fmt.Sprintf("%dx%d", rows, cols), func(t *testing.T) {
			S := floatEdgeVector(rng, rows*cols)
			k, q := floatEdgeVector(rng, rows), floatEdgeVector(rng, rows)
			v := floatEdgeVector(rng, cols)
			decay, beta := float32(0.93), float32(0.61)

			wantS, wantO := slices.Clone(S), make([]float32, cols)
			twoPassDeltaRule(wantS, decay, beta, k, v, q, wantO)
			gotS, gotO := slices.Clone(S), make([]float32, cols)
			DeltaRule(gotS, decay, beta, k, v, q, gotO)
			assertSameFloats(t, "DeltaRule S", gotS, wantS)
			assertSameFloats(t, "DeltaRule o", gotO, wantO)
		})
	}
}

// TestDeltaRulePanics: mismatched lengths are refused, naming the kernel,
// before any memory is touched.
func TestDeltaRulePanics(t *testing.T) {
	for name, f := range map[string]func(){
		"S": func() {
			DeltaRule(make([]float32, 10), 1, 1, make([]float32, 2), make([]float32, 4), make([]float32, 2), make([]float32, 4))
		},
		"q/o": func() {
			DeltaRule(make([]float32, 8), 1, 1, make([]float32, 2), make([]float32, 4), make([]float32, 1), make([]float32, 4))
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), "DeltaRule") {
					t.Fatalf("panic %v, want one naming DeltaRule", r)
				}
			}()
			f()
		})
	}
}

// TestBF16AsmBitwise: BF16 MatVec and MatMul through the assembly give the
// pure-Go reference's bits for every column count 1..72 and model widths,
// rows 1..9 (four-row blocks and the rest), and sub-ranges of rows.
func TestBF16AsmBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	for _, cols := range colsFor(BF16) {
		for rows := 1; rows <= 9; rows++ {
			m := randomMatrix(t, rng, BF16, rows, cols)
			// 3 tokens take the one-token kernel, 9 the four-token one twice
			// and then the one-token kernel.
			tokens := 3 + rows%2*6
			x := floatEdgeVector(rng, tokens*cols)
			got := make([]float32, tokens*rows)
			MatMul(got, m, x, tokens)
			want := withoutBF16Asm(func() []float32 {
				w := make([]float32, tokens*rows)
				MatMul(w, m, x, tokens)
				return w
			})
			assertSameFloats(t, fmt.Sprintf("BF16 %d×%d", rows, cols), got, want)
			if rows >= 6 {
				part := make([]float32, 3*rows)
				matMulRows(part, m, x, 3, nil, 1, rows-1)
				for j := range 3 {
					assertSameFloats(t, fmt.Sprintf("BF16 %d×%d rows [1,%d) token %d", rows, cols, rows-1, j),
						part[j*rows+1:j*rows+rows-1], want[j*rows+1:j*rows+rows-1])
				}
			}
		}
	}
}

func withoutBF16Asm(f func() []float32) []float32 {
	saved := useBF16AVX2Flag()
	setBF16AVX2(false)
	defer setBF16AVX2(saved)
	return f()
}

// TestDotRowsAndAxpyRowsBitwise: the attention kernels give the scalar
// references' bits for row counts around the 4-row blocks and lengths around
// the 4- and 16-element steps.
func TestDotRowsAndAxpyRowsBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	for _, n := range []int{1, 3, 4, 8, 15, 16, 17, 32, 48, 256, 260} {
		for rows := 1; rows <= 9; rows++ {
			a, b := floatEdgeVector(rng, rows*n), floatEdgeVector(rng, n)
			got := make([]float32, rows)
			DotRows(got, a, b)
			want := make([]float32, rows)
			for j := range want {
				want[j] = dot4Generic(a[j*n:(j+1)*n], b)
			}
			assertSameFloats(t, fmt.Sprintf("DotRows %d×%d", rows, n), got, want)

			alpha := floatEdgeVector(rng, rows)
			gotA, wantA := slices.Clone(a), slices.Clone(a)
			AxpyRows(gotA, alpha, b)
			for j, al := range alpha {
				for i := range n {
					wantA[j*n+i] += float32(al * b[i])
				}
			}
			assertSameFloats(t, fmt.Sprintf("AxpyRows %d×%d", rows, n), gotA, wantA)
		}
	}
}

// BenchmarkRouterBF16 is a router's product in a long pass: 256 experts ×
// 2048 hidden at BF16 against 64 tokens, with the four-token kernel
// (x4x4) and with the one-token kernel alone (x4).
func BenchmarkRouterBF16(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, cols, tokens = 256, 2048, 64
	m := randomMatrix(b, rng, BF16, rows, cols)
	x := floatEdgeVector(rng, tokens*cols)
	dst := make([]float32, tokens*rows)
	for _, four := range []bool{true, false} {
		b.Run(map[bool]string{true: "x4x4", false: "x4"}[four], func(b *testing.B) {
			defer func(f bool) { useFloatAVX512Flag(f) }(useFloatAVX512Flag(four))
			for b.Loop() {
				MatMul(dst, m, x, tokens)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tokens), "ns/token")
		})
	}
}
