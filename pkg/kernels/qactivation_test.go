package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestQuantizeActivation checks the definition (dx = max|x|/127, xq =
// round(x/dx) half to even, Σx = the reference's sum8), the Q4 pair layout
// against the element-order one, and that padding is zero even when a
// QActivation is reused for a smaller batch after a larger one.
func TestQuantizeActivation(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	qa := new(QActivation)
	for _, shape := range [][2]int{{3, 40 * GroupSize}, {1, GroupSize}, {2, 17 * GroupSize}, {1, 3 * GroupSize}, {4, 16 * GroupSize}, {1, 15 * GroupSize}} {
		tokens, cols := shape[0], shape[1]
		x := randomVector(rng, tokens*cols)
		if cols > GroupSize {
			clear(x[GroupSize : 2*GroupSize]) // a zero group
		}
		x[0] = 1e30
		qa.Quantize(x, cols)
		if qa.Tokens() != tokens || qa.Cols() != cols {
			t.Fatalf("%d×%d: Tokens, Cols = %d, %d", tokens, cols, qa.Tokens(), qa.Cols())
		}
		for tok := range tokens {
			checkQuantizedToken(t, fmt.Sprintf("%d×%d token %d", tokens, cols, tok), qa, tok, x[tok*cols:(tok+1)*cols])
		}
	}
}

func checkQuantizedToken(t *testing.T, what string, qa *QActivation, tok int, x []float32) {
	t.Helper()
	q8, q4, ds, sumQ := qa.tokenQ8(tok), qa.tokenQ4(tok), qa.tokenDS(tok), qa.tokenSumQ(tok)
	groups := len(x) / GroupSize
	for g := range qa.blocks * blockGroups {
		dx, sx := ds[dsIndex(g)], ds[dsIndex(g)+blockGroups]
		if g >= groups {
			if dx != 0 || sx != 0 || sumQ[g] != 0 {
				t.Fatalf("%s: padding group %d has dx %g, Σx %g, Σxq %d", what, g, dx, sx, sumQ[g])
			}
			for i := range GroupSize {
				if q8[g*GroupSize+i] != 0 || q4[q4Index(g, i)] != 0 {
					t.Fatalf("%s: padding group %d has nonzero codes", what, g)
				}
			}
			continue
		}
		xg := x[g*GroupSize : (g+1)*GroupSize]
		var amax float64
		for _, v := range xg {
			amax = max(amax, math.Abs(float64(v)))
		}
		if want := float32(amax) / 127; dx != want {
			t.Fatalf("%s group %d: dx = %g, want %g", what, g, dx, want)
		}
		if sx != sum8(xg) {
			t.Fatalf("%s group %d: Σx = %g, want the reference's %g", what, g, sx, sum8(xg))
		}
		var sq int32
		for i, v := range xg {
			q := q8[g*GroupSize+i]
			sq += int32(q)
			if amax == 0 {
				if q != 0 {
					t.Fatalf("%s group %d: zero group has code %d", what, g, q)
				}
				continue
			}
			exact := float64(v) / float64(dx)
			if math.Abs(exact-float64(q)) > 0.5+1e-4 {
				t.Fatalf("%s group %d element %d: x = %g, dx = %g gives %d, want round(%g)", what, g, i, v, dx, q, exact)
			}
			if at := q4Index(g, i); q4[at] != q {
				t.Fatalf("%s group %d element %d: Q4 layout holds %d at %d, want %d", what, g, i, q4[at], at, q)
			}
		}
		if sq != sumQ[g] {
			t.Fatalf("%s group %d: Σxq = %d, want %d", what, g, sumQ[g], sq)
		}
	}
}

func TestQuantizeGroupEdges(t *testing.T) {
	cases := []struct {
		name string
		x    float32 // element 0; elements 1 and 2 are ∓x/2, ties at ∓63.5
		want [3]int8
	}{
		{"unit", 1, [3]int8{127, -64, 64}},
		{"negative max", -4, [3]int8{-127, 64, -64}},
		{"huge", 0x1p126, [3]int8{127, -64, 64}},
		{"tiny", 0x1p-126, [3]int8{127, -64, 64}},
	}
	for _, tc := range cases {
		x := make([]float32, GroupSize)
		x[0], x[1], x[2] = tc.x, -tc.x/2, tc.x/2
		q := make([]int8, GroupSize)
		if dx := quantizeGroup(q, x); dx <= 0 {
			t.Errorf("%s: dx = %g", tc.name, dx)
		}
		if got := [3]int8{q[0], q[1], q[2]}; got != tc.want {
			t.Errorf("%s: codes %v, want %v", tc.name, got, tc.want)
		}
	}
	// Below ~2⁻¹²¹, 127/max|x| overflows; codes must stay sane (dx is subnormal
	// and imprecise, so only the extremes and signs are pinned).
	sub := make([]float32, GroupSize)
	sub[0], sub[1] = 0x1p-140, -0x1p-141
	q := make([]int8, GroupSize)
	quantizeGroup(q, sub)
	if q[0] != 127 || q[1] >= 0 || q[1] < -127 || q[2] != 0 {
		t.Errorf("subnormal group: codes %v…, want 127, negative, 0", q[:3])
	}
	// NaN stays out of the maximum and quantizes to 0; Σx carries it into
	// every product.
	nan := make([]float32, GroupSize)
	nan[3], nan[4] = float32(math.NaN()), 2
	if dx := quantizeGroup(q, nan); dx != 2.0/127 || q[3] != 0 || q[4] != 127 {
		t.Errorf("NaN group: dx = %g, codes %v…, want dx = 2/127 and codes 0, 127", dx, q[3:5])
	}
	m := rawQMatrix(rand.New(rand.NewPCG(1, 1)), Q4, 2, GroupSize, codesRandom)
	y := make([]float32, 2)
	MatVecFast(y, m, nan)
	if !math.IsNaN(float64(y[0])) || !math.IsNaN(float64(y[1])) {
		t.Errorf("MatVecFast over a NaN activation = %v, want NaN", y)
	}
}

// TestQuantizeImplementationsBitwise checks each assembly quantizer this
// CPU has (AVX-512, AVX2) against quantizeGroupsGeneric on random and
// special values: zero and negative-zero groups, NaN, ±Inf, subnormals, a
// tiny maximum that makes the Go code divide, ties.
func TestQuantizeImplementationsBitwise(t *testing.T) {
	forEachQuantizer(t, testQuantizeImplementationsBitwise)
}

func testQuantizeImplementationsBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		0x1p-149, -0x1p-140, 0x1p-126, 3e38, -3e38, 63.5, -0.5, 1}
	for groups := 1; groups <= 40; groups++ {
		cols := groups * GroupSize
		x := edgyVector(rng, cols)
		for g := range groups {
			xg := x[g*GroupSize : (g+1)*GroupSize]
			switch g % 5 {
			case 1: // a few specials among normal values
				for range 3 {
					xg[rng.IntN(GroupSize)] = specials[rng.IntN(len(specials))]
				}
			case 2: // a group of tiny values only (the assembly hands the token to Go)
				if groups%7 != 0 {
					continue
				}
				for i := range xg {
					xg[i] = float32(rng.NormFloat64()) * 0x1p-130
				}
			case 3: // all negative zero
				for i := range xg {
					xg[i] = float32(math.Copysign(0, -1))
				}
			}
		}
		want, got := new(QActivation), new(QActivation)
		want.resize(1, cols)
		got.resize(1, cols)
		quantizeGroupsGeneric(x, groups, want.tokenQ8(0), want.tokenQ4(0), want.tokenDS(0), want.tokenSumQ(0))
		got.Quantize(x, cols) // the assembly where this CPU has it
		want.zeroPadding(want.tokenQ8(0), want.tokenQ4(0), want.tokenDS(0), want.tokenSumQ(0))
		what := fmt.Sprintf("%d groups", groups)
		if fmt.Sprint(got.q8) != fmt.Sprint(want.q8) || fmt.Sprint(got.q4) != fmt.Sprint(want.q4) ||
			fmt.Sprint(got.sumQ) != fmt.Sprint(want.sumQ) {
			t.Fatalf("%s: codes differ from the Go quantizer", what)
		}
		assertSameFloats(t, what+" dx/Σx", got.ds, want.ds)
	}
}

func TestQuantizeRejectsBadShapes(t *testing.T) {
	for name, call := range map[string]func(){
		"cols not a group multiple": func() { new(QActivation).Quantize(make([]float32, 96), 96) },
		"len not a cols multiple":   func() { new(QActivation).Quantize(make([]float32, 192), 128) },
		"empty":                     func() { QuantizeActivation(nil) },
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

// q4Index is where element i of group g sits in the Q4 pair layout.
func q4Index(g, i int) int {
	at := g/2*2*GroupSize + g%2*GroupSize/2 + i/2
	if i%2 == 1 {
		at += GroupSize
	}
	return at
}
