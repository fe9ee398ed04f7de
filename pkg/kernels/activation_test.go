package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// activationInputs is n values mixing ordinary activations with the edges:
// zeros, ±large (clamped), tiny, and a NaN when withNaN.
func activationInputs(rng *rand.Rand, n int, withNaN bool) []float32 {
	edges := []float32{0, float32(math.Copysign(0, -1)), 100, -100, 87.5, -87.5, 88.1, -88.1, 1e-30, -1e-30, 20, -20}
	x := make([]float32, n)
	for i := range x {
		switch k := rng.IntN(8); {
		case k == 0:
			x[i] = edges[rng.IntN(len(edges))]
		case k == 1:
			x[i] = float32(rng.NormFloat64() * 40)
		default:
			x[i] = float32(rng.NormFloat64() * 3)
		}
	}
	if withNaN && n > 0 {
		x[rng.IntN(n)] = float32(math.NaN())
	}
	return x
}

func sameBits(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// TestActivationsMatchReference runs every mode at every length through
// 70 (all tails of the 16- and 8-lane assembly, several blocks) with each
// implementation this CPU has, and checks the result against
// activateGeneric bit for bit.
func TestActivationsMatchReference(t *testing.T) {
	for _, level := range floatAsmLevels() {
		restore := level.set()
		checkActivations(t, level.name)
		restore()
	}
}

func checkActivations(t *testing.T, level string) {
	rng := rand.New(rand.NewPCG(11, 12))
	modes := []struct {
		name string
		mode int
		run  func(dst, x, y []float32)
	}{
		{"Sigmoid", actSigmoid, func(dst, x, y []float32) { Sigmoid(dst, x) }},
		{"SiLU", actSiLU, func(dst, x, y []float32) { SiLU(dst, x) }},
		{"SwiGLU", actSwiGLU, func(dst, x, y []float32) { copy(dst, x); SwiGLU(dst, y) }},
		{"MulSigmoid", actMulSigmoid, func(dst, x, y []float32) { copy(dst, y); MulSigmoid(dst, x) }},
	}
	for _, m := range modes {
		for n := 0; n <= 70; n++ {
			x := activationInputs(rng, n, n%5 == 3)
			y := activationInputs(rng, n, false)
			got := make([]float32, n)
			m.run(got, x, y)
			want := make([]float32, n)
			var ry []float32
			if m.mode == actSwiGLU || m.mode == actMulSigmoid {
				ry = y
			}
			activateGeneric(want, x, ry, m.mode)
			for i := range want {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("%s %s n=%d [%d]: x=%g y=%g: got %g (%#x), reference %g (%#x)", level, m.name, n, i, x[i], y[i],
						got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

// TestActivationsInPlace checks dst may alias x, as the callers use it.
// TestExpMatchesReference: Exp gives expGeneric's bits at every length
// through 70, for shifts inside and at the edges of the clamp, in place too.
func TestExpMatchesReference(t *testing.T) {
	for _, level := range floatAsmLevels() {
		restore := level.set()
		checkExp(t, level.name)
		restore()
	}
}

func checkExp(t *testing.T, level string) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, shift := range []float32{0, 1.5, -3, 40, 100, float32(math.Copysign(0, -1))} {
		for n := 0; n <= 70; n++ {
			x := activationInputs(rng, n, n%5 == 3)
			got, want := make([]float32, n), make([]float32, n)
			Exp(got, x, shift)
			expGeneric(want, x, shift)
			for i := range want {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("%s: shift %g, n %d: Exp(%g)[%d] = %g, want %g", level, shift, n, x[i], i, got[i], want[i])
				}
			}
			Exp(x, x, shift)
			for i := range want {
				if !sameBits(x[i], want[i]) {
					t.Fatalf("%s: shift %g, n %d, in place: [%d] = %g, want %g", level, shift, n, i, x[i], want[i])
				}
			}
		}
	}
}

func TestActivationsInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	x := activationInputs(rng, 37, false)
	want := make([]float32, len(x))
	activateGeneric(want, x, nil, actSiLU)
	SiLU(x, x)
	for i := range x {
		if !sameBits(x[i], want[i]) {
			t.Fatalf("[%d]: in place %g, reference %g", i, x[i], want[i])
		}
	}
}

func TestActivationLengthMismatchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("SwiGLU with lengths 4 and 3 did not panic")
		}
	}()
	SwiGLU(make([]float32, 4), make([]float32, 3))
}

// ulpDiff is how many float32 steps apart a and b are.
func ulpDiff(a, b float32) int64 {
	ia, ib := int64(int32(math.Float32bits(a))), int64(int32(math.Float32bits(b)))
	if ia < 0 {
		ia = math.MinInt32 - ia
	}
	if ib < 0 {
		ib = math.MinInt32 - ib
	}
	return max(ia-ib, ib-ia)
}

// TestExp32Accuracy sweeps exp32 over its whole unclamped range against
// math.Exp rounded to float32: at most 2 ulp apart.
func TestExp32Accuracy(t *testing.T) {
	worst, at := int64(0), float32(0)
	for i := 0; i <= 2_000_000; i++ {
		x := float32(expMin + (expMax-expMin)*float64(i)/2_000_000)
		want := float32(math.Exp(float64(x)))
		if d := ulpDiff(exp32(x), want); d > worst {
			worst, at = d, x
		}
	}
	if worst > 2 {
		t.Fatalf("exp32 is %d ulp from math.Exp at x=%g", worst, at)
	}
	t.Logf("exp32: at most %d ulp from the correctly rounded value (worst at %g)", worst, at)
	if got := exp32(float32(math.NaN())); got == got {
		t.Fatalf("exp32(NaN) = %g", got)
	}
	if got := exp32(1000); got != exp32(expMax) {
		t.Fatalf("exp32(1000) = %g, want the clamp %g", got, exp32(expMax))
	}
}

// TestSigmoidAccuracy compares Sigmoid and SiLU with their float64 forms.
func TestSigmoidAccuracy(t *testing.T) {
	const n = 100_000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(-40 + 80*float64(i)/n)
	}
	sig, silu := make([]float32, n), make([]float32, n)
	Sigmoid(sig, x)
	SiLU(silu, x)
	for i, v := range x {
		s := 1 / (1 + math.Exp(-float64(v)))
		if d := ulpDiff(sig[i], float32(s)); d > 3 {
			t.Fatalf("Sigmoid(%g) = %g, float64 gives %g: %d ulp", v, sig[i], s, d)
		}
		if d := ulpDiff(silu[i], float32(float64(v)*s)); d > 4 {
			t.Fatalf("SiLU(%g) = %g, float64 gives %g: %d ulp", v, silu[i], float64(v)*s, d)
		}
	}
}

func BenchmarkActivations(b *testing.B) {
	for _, n := range []int{512, 8192} {
		x := activationInputs(rand.New(rand.NewPCG(1, 2)), n, false)
		dst := make([]float32, n)
		b.Run(fmt.Sprintf("SiLU/%d", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				SiLU(dst, x)
			}
		})
		b.Run(fmt.Sprintf("float64-exp/%d", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				for i, v := range x {
					dst[i] = v * float32(1/(1+math.Exp(-float64(v))))
				}
			}
		})
	}
}
