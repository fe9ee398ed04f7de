package kernels

import (
	"fmt"
	"math"
)

// The logistic activations of Qwen3.5 (σ in the attention output gate, SiLU
// in the Gated DeltaNet conv and norm, SwiGLU in every expert) over slices.
// Decode evaluates some 16 thousand of them per layer; through float64
// math.Exp that was 5% of a cached decode step, so they run in float32 on a
// Cephes-style exp: 16 lanes at a time in assembly where the CPU has
// AVX-512, else the reference below, bit for bit the same (every product
// and sum rounded on its own, no fused multiply-add).
//
// Accuracy: exp32 is within 2 ulp of the correctly rounded float32 eˣ for
// x in [expMin, expMax] (TestExp32Accuracy); inputs are clamped to that
// range, so e^x never overflows and σ(x) for x < −88 is 6e−39 rather than
// smaller. NaN propagates.

// Sigmoid sets dst[i] = 1/(1+e^−x[i]).
func Sigmoid(dst, x []float32) { activate(dst, x, nil, actSigmoid, "Sigmoid") }

// SiLU sets dst[i] = x[i]·σ(x[i]).
func SiLU(dst, x []float32) { activate(dst, x, nil, actSiLU, "SiLU") }

// SwiGLU sets gate[i] = (gate[i]·σ(gate[i]))·up[i].
func SwiGLU(gate, up []float32) { activate(gate, gate, up, actSwiGLU, "SwiGLU") }

// MulSigmoid sets dst[i] = dst[i]·σ(gate[i]).
func MulSigmoid(dst, gate []float32) { activate(dst, gate, dst, actMulSigmoid, "MulSigmoid") }

// Exp sets dst[i] = e^(x[i]−shift) on exp32 (a softmax's exponentials,
// shift its maximum).
func Exp(dst, x []float32, shift float32) {
	if len(x) != len(dst) {
		panic(fmt.Sprintf("kernels.Exp: lengths %d, %d differ", len(dst), len(x)))
	}
	if len(dst) == 0 || expAsm(dst, x, shift) {
		return
	}
	expGeneric(dst, x, shift)
}

// expGeneric is the reference for expAsm.
func expGeneric(dst, x []float32, shift float32) {
	for i, v := range x {
		dst[i] = exp32(v - shift)
	}
}

const (
	actSigmoid = iota
	actSiLU
	actSwiGLU
	actMulSigmoid
	actExp // the assembly's mode for Exp: y points at the shift
)

func activate(dst, x, y []float32, mode int, fn string) {
	if len(x) != len(dst) || (y != nil && len(y) != len(dst)) {
		panic(fmt.Sprintf("kernels.%s: lengths %d, %d, %d differ", fn, len(dst), len(x), len(y)))
	}
	if len(dst) == 0 || activateAsm(dst, x, y, mode) {
		return
	}
	activateGeneric(dst, x, y, mode)
}

// activateGeneric is the reference for activateAsm.
func activateGeneric(dst, x, y []float32, mode int) {
	for i, v := range x {
		s := 1 / (1 + exp32(-v))
		switch mode {
		case actSigmoid:
			dst[i] = s
		case actSiLU:
			dst[i] = v * s
		case actSwiGLU:
			dst[i] = float32(v*s) * y[i]
		case actMulSigmoid:
			dst[i] = y[i] * s
		}
	}
}

// The clamp keeps 2ⁿ a normal float32 (n in [−126, 127]).
const (
	expMin = -87.0
	expMax = 88.0
)

// exp32's constants: ln 2 split so n·ln2Hi is exact, and the Cephes expf
// polynomial for e^r on |r| ≤ ln2/2.
const (
	log2e = 1.44269504088896341
	ln2Hi = 0.693359375
	ln2Lo = -2.12194440e-4
	expC0 = 1.9875691500e-4
	expC1 = 1.3981999507e-3
	expC2 = 8.3334519073e-3
	expC3 = 4.1665795894e-2
	expC4 = 1.6666665459e-1
	expC5 = 5.0000001201e-1
)

// exp32 is eˣ in float32: x = n·ln2 + r, e^r by a degree-7 polynomial,
// times 2ⁿ. The float32() conversions stop compilers that fuse a·b+c
// (arm64) from doing so: the assembly does not fuse either.
func exp32(x float32) float32 {
	if x != x {
		return x
	}
	x = min(max(x, expMin), expMax)
	n := float32(math.RoundToEven(float64(float32(x * log2e))))
	r := x - float32(n*ln2Hi)
	r -= float32(n * ln2Lo)
	r2 := float32(r * r)
	p := float32(expC0)
	for _, c := range [...]float32{expC1, expC2, expC3, expC4, expC5} {
		p = float32(p*r) + c
	}
	p = float32(p*r2) + r
	p++
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}
