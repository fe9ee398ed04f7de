package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMaxScaleBitwise checks Max and Scale against their references, bit for
// bit, at every length to 200 (all tails of the 64- and 16-lane loops) and
// with the values where VMAXPS differs from Go's max: NaN anywhere, a zero
// maximum of either sign, infinities.
func TestMaxScaleBitwise(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	specials := []struct {
		name string
		set  func(x []float32, rng *rand.Rand)
	}{
		{"random", func(x []float32, rng *rand.Rand) {}},
		{"nan", func(x []float32, rng *rand.Rand) { x[rng.IntN(len(x))] = nan }},
		{"negative with zeros", func(x []float32, rng *rand.Rand) {
			for i := range x {
				x[i] = -1 - x[i]*x[i]
			}
			x[rng.IntN(len(x))] = negZero
			x[rng.IntN(len(x))] = 0
		}},
		{"negative zero max", func(x []float32, rng *rand.Rand) {
			for i := range x {
				x[i] = -1 - x[i]*x[i]
			}
			x[rng.IntN(len(x))] = negZero
		}},
		{"infinities", func(x []float32, rng *rand.Rand) {
			x[rng.IntN(len(x))] = inf
			x[rng.IntN(len(x))] = -inf
		}},
		{"all -inf", func(x []float32, rng *rand.Rand) {
			for i := range x {
				x[i] = -inf
			}
		}},
	}
	rng := rand.New(rand.NewPCG(71, 72))
	for _, sp := range specials {
		for n := 1; n <= 200; n++ {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 8)
			}
			sp.set(x, rng)
			want := maxGeneric(x)
			if got := Max(x); math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
				t.Fatalf("%s, n=%d: Max = %v (%#x), reference %v (%#x)", sp.name, n, got, math.Float32bits(got), want, math.Float32bits(want))
			}
			s := float32(rng.Float64()*3) + 1e-3
			got, ref := append([]float32(nil), x...), append([]float32(nil), x...)
			Scale(got, s)
			scaleGeneric(ref, s)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(ref[i]) && !(got[i] != got[i] && ref[i] != ref[i]) {
					t.Fatalf("%s, n=%d: Scale[%d] = %v, reference %v", sp.name, n, i, got[i], ref[i])
				}
			}
		}
	}
	if got := Max(nil); !math.IsInf(float64(got), -1) {
		t.Fatalf("Max(nil) = %v, want -Inf", got)
	}
	Scale(nil, 2)
}

func BenchmarkSoftmaxPasses(b *testing.B) {
	x := make([]float32, 2048)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, impl := range []struct {
		name string
		max  func([]float32) float32
		sc   func([]float32, float32)
	}{{"generic", maxGeneric, scaleGeneric}, {"kernel", Max, Scale}} {
		b.Run(impl.name, func(b *testing.B) {
			for b.Loop() {
				impl.sc(x, impl.max(x)*0+1)
			}
		})
	}
}
